/* One row per latency-monitor collection (run, environment): the threshold, the events and
   LATENCY DOCTOR's text, kept across history. */
select * from {{ ref('stg_latency_collections') }}

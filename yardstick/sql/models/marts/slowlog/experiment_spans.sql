/* One row per scratch experiment (run, environment, family): the SLOWLOG ids and the time it
   occupied on its server. Kept across history: a collection in a later update of any
   environment on that server leaves these ids out of its losses. */
select * from {{ ref('stg_experiment_spans') }}

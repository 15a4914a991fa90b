/* One row per transport run (run, environment): what the section counts of its rounds. */
select * from {{ ref('transport_rounds') }}

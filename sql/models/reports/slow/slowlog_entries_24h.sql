/* For each collection of the last update (run, environment), every deduplicated SLOWLOG entry
   first seen in the 24 h before it (a time-bounded slice of slowlog_entries_dedup). */
{{ config(materialized='ephemeral') }}

with batch as (
    {{ in_batch(ref('slowlog_collection_gaps')) }}
),

recent as (
    select *
    from {{ ref('slowlog_entries_dedup') }}
    where collected_at > (select min(collected_at) from batch) - interval 24 hour
)

select
    g.run_id,
    g.env,
    e.* exclude (run_id, env),
from batch as g
join recent as e
    on e.env = g.env
    and e.collected_at <= g.collected_at
    and e.collected_at > g.collected_at - interval 24 hour

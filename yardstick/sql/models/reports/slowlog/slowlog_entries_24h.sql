/* For each collection (run, environment), every deduplicated SLOWLOG entry first seen in the
   24 h before it (a time-bounded slice of slowlog_entries_dedup). Over every collection, not
   the last update's only: a report asks for one run, and an environment that was not in the
   last update keeps its lists. */
{{ config(materialized='ephemeral') }}

with collections as (
    select * from {{ ref('slowlog_collection_gaps') }}
),

recent as (
    select * from {{ ref('slowlog_entries_dedup') }}
)

select
    g.run_id,
    g.env,
    e.* exclude (run_id, env),
from collections as g
join recent as e
    on e.env = g.env
    and e.collected_at <= g.collected_at
    and e.collected_at > g.collected_at - interval 24 hour

/* State, one row per environment, server run and command: the latest commandstats snapshot of
   each server run, which counter_intervals of the next update differences its first snapshot
   against (read there through prior_relation, before this is updated). */
{{ config(
    materialized='incremental',
    incremental_strategy='delete+insert',
    unique_key=['env', 'server_run_id'],
) }}
-- depends_on: {{ ref('counter_intervals') }}

with snapshots as (
    select * from {{ ref('stg_commandstats_snapshots') }}
),

latest as (
    /* The batch's snapshots come after every earlier one: its latest replaces the state's. */
    select env, server_run_id, arg_max(run_id, (taken_at, run_id)) as run_id,
    from snapshots
    group by env, server_run_id
)

select s.env, s.server_run_id, s.run_id, s.uptime_s, s.taken_at, s.command, s.calls, s.usec,
       s.rejected_calls, s.failed_calls,
from snapshots as s
semi join latest as l
    on l.env = s.env and l.server_run_id = s.server_run_id and l.run_id = s.run_id

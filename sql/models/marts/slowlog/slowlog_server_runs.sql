/* State, one row per environment and server run: the highest SLOWLOG id any collection has
   seen and the latest collection. What slowlog_entries_dedup and slowlog_collection_gaps of
   the next update count from (read there through prior_relation, before this is updated). */
{{ config(
    materialized='incremental',
    incremental_strategy='delete+insert',
    unique_key=['env', 'server_run_id'],
) }}
-- depends_on: {{ ref('slowlog_collection_gaps') }}
-- depends_on: {{ ref('slowlog_entries_dedup') }}

with entry_ids as (
    select env, server_run_id, max(entry_id) as max_id,
    from {{ ref('stg_slowlog_entries') }}
    group by env, server_run_id
),

fresh as (
    select
        c.env,
        c.server_run_id,
        max(i.max_id) as max_id,
        arg_max(c.run_id, (c.collected_at, c.run_id)) as last_run_id,
        max(c.collected_at) as last_collected_at,
    from {{ ref('stg_slowlog_collections') }} as c
    left join entry_ids as i on i.env = c.env and i.server_run_id = c.server_run_id
    group by c.env, c.server_run_id
),

prior as (
    {% if is_incremental() %}
    select p.env, p.server_run_id, p.max_id, p.last_run_id, p.last_collected_at,
    from {{ this }} as p
    semi join fresh as c on c.env = p.env and c.server_run_id = p.server_run_id
    {% else %}
    select * from fresh where false
    {% endif %}
),

combined as (
    select * from prior
    union all
    select * from fresh
)

select
    env,
    server_run_id,
    max(max_id) as max_id,              /* null: no entry seen yet */
    arg_max(last_run_id, (last_collected_at, last_run_id)) as last_run_id,
    max(last_collected_at) as last_collected_at,
from combined
group by env, server_run_id

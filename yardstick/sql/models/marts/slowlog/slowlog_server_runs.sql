/* State, one row per environment and server run: the highest SLOWLOG id any collection has
   seen, the best evidence of where an empty log stood (its next id and basis: verified, then
   assumed, then unknown), and the latest collection. What slowlog_entries_dedup and
   slowlog_collection_gaps of the next update count from (read there through prior_relation,
   before this is updated). */
{{ config(
    materialized='incremental',
    incremental_strategy='delete+insert',
    unique_key=['env', 'server_run_id'],
) }}
-- depends_on: {{ ref('slowlog_collection_gaps') }}
-- depends_on: {{ ref('slowlog_entries_dedup') }}

with fresh as (
    select
        c.env,
        c.server_run_id,
        /* The newest id the collection read (files before the column: the entries'). */
        coalesce(c.newest_queued_id, i.max_id) as max_id,
        c.run_id as last_run_id,
        c.collected_at as last_collected_at,
        /* Only collections that read nothing found the log empty. */
        case when coalesce(c.newest_queued_id, i.max_id) is null
            then c.empty_log_next_id end as empty_log_next_id,
        case when coalesce(c.newest_queued_id, i.max_id) is null
            then c.empty_log_basis end as empty_log_basis,
    from {{ ref('stg_slowlog_collections') }} as c
    left join (
        select run_id, env, max(entry_id) as max_id,
        from {{ ref('stg_slowlog_entries') }}
        group by run_id, env
    ) as i on i.run_id = c.run_id and i.env = c.env
),

prior as (
    {% if is_incremental() %}
    select
        p.env, p.server_run_id, p.max_id, p.last_run_id, p.last_collected_at,
        p.empty_log_next_id, p.empty_log_basis,
    from {{ this }} as p
    semi join (select distinct env, server_run_id from fresh) as c
        on c.env = p.env and c.server_run_id = p.server_run_id
    {% else %}
    select * from fresh where false
    {% endif %}
),

combined as (
    select
        *,
        case
            when empty_log_next_id is not null
                and empty_log_basis in ('no_slowlog_calls', 'no_reset_calls') then 3
            when empty_log_next_id is not null then 2
            when empty_log_basis is not null then 1
        end as evidence_rank,
    from (
        select * from prior
        union all by name
        select * from fresh
    )
)

select
    env,
    server_run_id,
    max(max_id) as max_id,              /* null: no entry seen yet */
    arg_max(last_run_id, (last_collected_at, last_run_id)) as last_run_id,
    max(last_collected_at) as last_collected_at,
    /* The best evidence of an empty log (0: its next id; null: none, or unknown). */
    arg_max(empty_log_next_id, evidence_rank) as empty_log_next_id,
    arg_max(empty_log_basis, evidence_rank) as empty_log_basis,
from combined
group by env, server_run_id

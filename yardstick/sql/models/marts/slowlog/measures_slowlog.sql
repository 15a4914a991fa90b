/* The slowlog family's measures: one row per batch run, environment and figure (run level).
   measures keeps those of measurement runs; a collection's rows stay in its marts. */
{{ config(materialized='ephemeral') }}

with g as (
    {{ in_batch(ref('slowlog_collection_gaps')) }}
),

r as (
    {{ in_batch(ref('slowlog_rates')) }}
),

long as (
    select run_id, env, 'slowlog_entries_new' as figure, new_entries as value,
           new_entries as samples
    from g
    union all
    select run_id, env, 'slowlog_entries_lost', lost_entries, null from g
    union all
    select run_id, env, 'slowlog_lost_share',
           lost_entries / nullif(lost_entries + new_entries, 0), lost_entries + new_entries
    from g
    union all
    select run_id, env, 'slowlog_tool_share',
           new_tool_entries / nullif(new_entries, 0), new_entries
    from g
    union all
    select run_id, env, 'slowlog_collection_gap_min', gap_since_previous_s / 60, null from g
    union all
    select run_id, env, 'slowlog_entries_per_min', entries_per_min, ids_24h from r
    union all
    select run_id, env, 'slowlog_fill_min', fill_min, null from r
    union all
    select run_id, env, 'slowlog_recommended_interval_min', recommended_interval_min, null
    from r
    union all
    select run_id, env, 'slowlog_lost_24h', lost_24h, collections_24h from r
)

{{ as_measures('long') }}

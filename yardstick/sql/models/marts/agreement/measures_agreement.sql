/* The agreement family's measures: one row per batch run, environment, figure and repetition
   (window_idx null: the median over repetitions). */
{{ config(materialized='ephemeral') }}

with r as (
    select
        *,
        client_us / nullif(slowlog_us, 0) as c_over_s,
        latency_ms * 1000 / nullif(slowlog_us, 0) as l_over_s,
    from {{ ref('stg_agreement') }}
),

s as (
    {{ in_batch(ref('agreement_stats')) }}
),

long as (
    select run_id, env, 'agreement_slowlog_us' as figure, null::int as window_idx,
           slowlog_us::double as value, slowlog_matched as samples
    from s
    union all
    select run_id, env, 'agreement_client_us', null, client_us, repetitions from s
    union all
    select run_id, env, 'agreement_latency_ms', null, latency_ms, latency_matched from s
    union all
    select run_id, env, 'agreement_client_over_slowlog', null, client_over_slowlog,
           slowlog_matched
    from s
    union all
    select run_id, env, 'agreement_latency_over_slowlog', null, latency_over_slowlog,
           latency_matched
    from s
    union all
    select run_id, env, 'agreement_slowlog_us', rep_idx, slowlog_us, 1 from r
    union all
    select run_id, env, 'agreement_client_us', rep_idx, client_us, 1 from r
    union all
    select run_id, env, 'agreement_latency_ms', rep_idx, latency_ms, 1 from r
    union all
    select run_id, env, 'agreement_client_over_slowlog', rep_idx, c_over_s, 1 from r
    union all
    select run_id, env, 'agreement_latency_over_slowlog', rep_idx, l_over_s, 1 from r
)

{{ as_measures('long', window_idx='window_idx') }}

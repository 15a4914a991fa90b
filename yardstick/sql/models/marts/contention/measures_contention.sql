/* The contention family's measures: one row per batch run, environment, figure and window
   (each victim probe window is a repetition of its phase's figure). The victim's wait is set
   against one SORT's execution (pacing-independent, the headline) and against its own idle
   round trip after the loop (depends on the probe's pacing and path: absolute). */
{{ config(materialized='ephemeral') }}

with w as (
    select * from {{ ref('stg_contention_windows') }}
),

c as (
    {{ in_batch(ref('contention_stats')) }}
),

long as (
    select run_id, env, 'victim_slowlog_entries' as figure, null::int as window_idx,
           victim_entries::double as value, slowlog_entries as samples
    from c
    union all
    select run_id, env, 'victim_in_slowlog_share', null,
           victim_entries / nullif(during_over_threshold, 0), during_over_threshold
    from c
    union all
    select run_id, env, 'victim_pings_over_threshold', null, during_over_threshold,
           during_samples
    from c
    union all
    select run_id, env, 'victim_rtt_during_mean_us', null, during_mean_us, during_samples
    from c
    union all
    select run_id, env, 'victim_rtt_after_mean_us', null, after_mean_us, null from c
    union all
    select run_id, env, 'victim_rtt_before_mean_us', null, before_mean_us, null from c
    union all
    select run_id, env, 'victim_rtt_during_max_us', null, during_max_us, during_samples from c
    union all
    select run_id, env, 'victim_during_over_after', null,
           during_mean_us / nullif(after_mean_us, 0), during_samples
    from c
    union all
    select run_id, env, 'victim_usec_per_call', null, victim_usec_per_call, victim_server_calls
    from c
    union all
    select run_id, env, 'victim_wait_over_execution', null,
           during_mean_us / nullif(victim_usec_per_call, 0), victim_server_calls
    from c
    union all
    select run_id, env, 'victim_wait_over_culprit_sort', null, victim_wait_over_culprit_sort,
           sort_server_calls
    from c
    union all
    select run_id, env, 'culprit_sort_median_us', null, culprit_median_us, culprit_entries
    from c
    union all
    /* Each window is a repetition of its phase's figure. */
    select run_id, env, 'victim_rtt_' || phase || '_mean_us', window_idx, rtt_mean_us, samples
    from w
    union all
    select run_id, env, 'victim_rtt_during_max_us', window_idx, rtt_max_us, samples
    from w
    where phase = 'during'
    union all
    select w.run_id, w.env, 'victim_during_over_after', w.window_idx,
           w.rtt_mean_us / nullif(c.after_mean_us, 0), w.samples
    from w
    join c on c.run_id = w.run_id and c.env = w.env
    where w.phase = 'during'
    union all
    select w.run_id, w.env, 'victim_wait_over_culprit_sort', w.window_idx,
           w.rtt_mean_us / nullif(c.sort_usec_per_call, 0), w.samples
    from w
    join c on c.run_id = w.run_id and c.env = w.env
    where w.phase = 'during'
)

{{ as_measures('long', window_idx='window_idx') }}

/* One row per instrument agreement run (run, environment): the same SORT timed from outside,
   by its SLOWLOG entry and by the latency monitor. They agree when, in every repetition, each
   is within 10 % of the SLOWLOG (the monitor within its 1 ms resolution too: it stores whole
   milliseconds, rounded down); the repetitions that break the rule are named (1-based), with
   the ratio of the one furthest from 1, since the medians alone may pass. */
with reps as (
    select
        *,
        latency_ms * 1000 as latency_us,
        client_us / nullif(slowlog_us, 0) as client_over_slowlog,
        latency_ms * 1000 / nullif(slowlog_us, 0) as latency_over_slowlog,
        abs(client_us - slowlog_us) <= 0.10 * slowlog_us as client_agrees,
        abs(latency_ms * 1000 - slowlog_us) <= greatest(0.10 * slowlog_us, 1000) as latency_agrees,
    from {{ ref('stg_agreement') }}
)

select
    run_id,
    env,
    any_value(list_len) as list_len,
    any_value(latency_threshold_ms) as latency_threshold_ms,
    any_value(latency_threshold_before_ms) as latency_threshold_before_ms,
    count(*) as repetitions,
    count(slowlog_us) as slowlog_matched,
    count(latency_ms) as latency_matched,
    median(client_us) as client_us,
    median(slowlog_us) as slowlog_us,
    median(latency_ms) as latency_ms,
    median(client_over_slowlog) as client_over_slowlog,
    median(latency_over_slowlog) as latency_over_slowlog,
    coalesce(bool_and(client_agrees), false) and count(slowlog_us) = count(*) as client_agrees,
    coalesce(bool_and(latency_agrees), false) and count(latency_ms) = count(*) as latency_agrees,
    /* Which repetitions break the rule ("2, 4"), and the worst of them. */
    string_agg((rep_idx + 1)::varchar, ', ' order by rep_idx)
        filter (where not coalesce(client_agrees, false)) as client_failing_reps,
    arg_max(rep_idx + 1, abs(coalesce(client_over_slowlog, 0) - 1))
        filter (where not coalesce(client_agrees, false)) as client_worst_rep,
    arg_max(client_over_slowlog, abs(coalesce(client_over_slowlog, 0) - 1))
        filter (where not coalesce(client_agrees, false)) as client_worst_over_slowlog,
    string_agg((rep_idx + 1)::varchar, ', ' order by rep_idx)
        filter (where not coalesce(latency_agrees, false)) as latency_failing_reps,
    arg_max(rep_idx + 1, abs(coalesce(latency_over_slowlog, 0) - 1))
        filter (where not coalesce(latency_agrees, false)) as latency_worst_rep,
    arg_max(latency_over_slowlog, abs(coalesce(latency_over_slowlog, 0) - 1))
        filter (where not coalesce(latency_agrees, false)) as latency_worst_over_slowlog,
from reps
group by run_id, env

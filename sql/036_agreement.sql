/* Three instruments, one fact: the same SORT timed from outside, by its SLOWLOG entry and by
   the latency monitor. They agree when each is within 10 % of the SLOWLOG (the monitor within
   its 1 ms resolution too: it stores whole milliseconds, rounded down). */
create or replace table agreement_stats as
with reps as (
    select
        *,
        latency_ms * 1000 as latency_us,
        client_us / nullif(slowlog_us, 0) as client_over_slowlog,
        latency_ms * 1000 / nullif(slowlog_us, 0) as latency_over_slowlog,
        abs(client_us - slowlog_us) <= 0.10 * slowlog_us as client_agrees,
        abs(latency_ms * 1000 - slowlog_us) <= greatest(0.10 * slowlog_us, 1000) as latency_agrees,
    from stg_agreement
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
from reps
group by run_id, env;

insert into figure_catalog values
    ('agreement_slowlog_us', 'agreement', 240, 'µs', 'absolute',
     'CPU, data size and load of this server', 'lower',
     'one SORT ... LIMIT 0 10 as its SLOWLOG entry measured it'),
    ('agreement_client_us', 'agreement', 241, 'µs', 'absolute',
     'CPU, data size, load and network path of this run', 'lower',
     'the same SORT timed from outside (round trip included)'),
    ('agreement_latency_ms', 'agreement', 242, 'ms', 'absolute',
     'CPU, data size and load of this server', 'lower',
     'the same SORT as the latency monitor recorded it (whole ms)'),
    ('agreement_client_over_slowlog', 'agreement', 243, '×', 'ratio', null, null,
     'outside timing ÷ SLOWLOG duration (1 = agreement; above 1 = round trip and client)'),
    ('agreement_latency_over_slowlog', 'agreement', 244, '×', 'ratio', null, null,
     'latency monitor ÷ SLOWLOG duration (1 = agreement)');

insert into measures by name
with r as (
    select
        *,
        client_us / nullif(slowlog_us, 0) as c_over_s,
        latency_ms * 1000 / nullif(slowlog_us, 0) as l_over_s,
    from stg_agreement
),

s as (
    select * from agreement_stats
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

select * from long;

create or replace view report_agreement as
select * from agreement_stats;

/* Contention: the victim's PING round trip before, during and after a culprit's SORT loop,
   the victim's own execution time from the counters around the loop, and how many of the
   victim's commands the SLOWLOG logged (expected: none, however long they waited). */
create or replace table contention_stats as
with phases as (
    select
        run_id,
        env,
        phase,
        count(*) as windows,
        sum(samples) as samples,
        sum(rtt_mean_us * samples) / sum(samples) as rtt_mean_us,
        min(rtt_min_us) as rtt_min_us,
        max(rtt_max_us) as rtt_max_us,
        sum(over_threshold) as over_threshold,
    from stg_contention_windows
    group by run_id, env, phase
),

pivoted as (
    select
        run_id,
        env,
        max(rtt_mean_us) filter (phase = 'before') as before_mean_us,
        max(rtt_mean_us) filter (phase = 'during') as during_mean_us,
        max(rtt_mean_us) filter (phase = 'after') as after_mean_us,
        max(rtt_max_us) filter (phase = 'during') as during_max_us,
        max(samples) filter (phase = 'during') as during_samples,
        max(over_threshold) filter (phase = 'during') as during_over_threshold,
    from phases
    group by run_id, env
),

counters as (
    /* PING and SORT executed between the snapshots around the loop. */
    select
        a.run_id,
        a.env,
        a.command,
        a.calls - coalesce(b.calls, 0) as calls,
        a.usec - coalesce(b.usec, 0) as usec,
    from stg_contention_counters as a
    left join stg_contention_counters as b
        on b.run_id = a.run_id and b.env = a.env and b.command = a.command
        and b.phase = 'before'
    where a.phase = 'after'
),

logged as (
    select
        l.run_id,
        l.env,
        count(*) as entries,
        /* Servers before 4.0 log no client name: a PING entry is then the victim's. */
        count(*) filter (
            l.client_name = s.victim_client_name
            or (l.client_name is null and l.command = 'ping')
        ) as victim_entries,
        count(*) filter (l.client_name = s.culprit_client_name) as culprit_entries,
        median(l.duration_us) filter (l.client_name = s.culprit_client_name) as culprit_median_us,
        max(l.entry_id) - min(l.entry_id) + 1 - count(*) as ids_missing,
    from stg_contention_slowlog as l
    join stg_contention_setup as s on s.run_id = l.run_id and s.env = l.env
    group by l.run_id, l.env
)

select
    s.run_id,
    s.env,
    s.list_len,
    s.slowlog_threshold_us,
    s.culprit_commands,
    s.loop_s,
    p.before_mean_us,
    p.during_mean_us,
    p.after_mean_us,
    p.during_max_us,
    p.during_samples,
    p.during_over_threshold,
    ping.calls as victim_server_calls,
    ping.usec / nullif(ping.calls, 0) as victim_usec_per_call,
    sort.usec / nullif(sort.calls, 0) as sort_usec_per_call,
    coalesce(l.entries, 0) as slowlog_entries,
    coalesce(l.victim_entries, 0) as victim_entries,
    coalesce(l.culprit_entries, 0) as culprit_entries,
    l.culprit_median_us,
    coalesce(l.ids_missing, 0) as slowlog_ids_missing,
from stg_contention_setup as s
left join pivoted as p on p.run_id = s.run_id and p.env = s.env
left join counters as ping on ping.run_id = s.run_id and ping.env = s.env and ping.command = 'ping'
left join counters as sort on sort.run_id = s.run_id and sort.env = s.env and sort.command = 'sort'
left join logged as l on l.run_id = s.run_id and l.env = s.env;

insert into figure_catalog values
    ('victim_slowlog_entries', 'contention', 200, 'entries', 'absolute',
     'the length of the loop and the SLOWLOG threshold of this run', 'lower',
     'victim PINGs the SLOWLOG logged during the loop'),
    ('victim_in_slowlog_share', 'contention', 201, 'share', 'ratio', null, null,
     'victim PINGs logged ÷ victim PINGs that waited longer than the SLOWLOG threshold'),
    ('victim_pings_over_threshold', 'contention', 202, 'PINGs', 'absolute',
     'load and SORT cost on this server', 'lower',
     'victim PINGs whose round trip exceeded slowlog-log-slower-than during the loop'),
    ('victim_rtt_during_mean_us', 'contention', 203, 'µs', 'absolute',
     'CPU, data size and load of this server; network path', 'lower',
     'victim PING round trip while the culprit loops SORT (mean over samples)'),
    ('victim_rtt_after_mean_us', 'contention', 204, 'µs', 'absolute',
     'network path, client host, scheduler and load of this run', 'lower',
     'victim PING round trip after the loop'),
    ('victim_rtt_before_mean_us', 'contention', 205, 'µs', 'absolute',
     'network path, client host, scheduler and load of this run', 'lower',
     'victim PING round trip before the loop'),
    ('victim_rtt_during_max_us', 'contention', 206, 'µs', 'absolute',
     'CPU, data size and load of this server; network path', 'lower',
     'slowest victim PING during the loop'),
    ('victim_during_over_after', 'contention', 207, '×', 'ratio', null, 'lower',
     'victim round trip during the loop ÷ after it'),
    ('victim_usec_per_call', 'contention', 208, 'µs', 'absolute',
     'CPU, Redis version and load of this server', 'lower',
     'time Redis spent executing each victim PING during the loop (commandstats difference)'),
    ('victim_wait_over_execution', 'contention', 209, '×', 'ratio', null, 'lower',
     'victim round trip during the loop ÷ its own execution time: how much was queueing'),
    ('culprit_sort_median_us', 'contention', 210, 'µs', 'absolute',
     'CPU, data size and load of this server', 'lower',
     'median SORT execution time in the loop (SLOWLOG)');

insert into measures by name
with w as (
    select * from stg_contention_windows
),

c as (
    select * from contention_stats
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
)

select * from long;

create or replace view report_contention as
select * from contention_stats;

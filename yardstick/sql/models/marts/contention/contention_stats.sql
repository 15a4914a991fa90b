/* One row per contention experiment (run, environment): the victim's PING round trip before,
   during and after a culprit's SORT loop, the victim's own execution time and the culprit's
   from the counters around the loop, and how many of the victim's commands the SLOWLOG logged
   (expected: none, however long they waited).

   The headline ratio is the victim's wait ÷ one SORT's execution (commandstats mean over every
   SORT of the loop): both are set by the server, so it does not depend on how fast the victim
   probes. The round trip after the loop does (an idle round trip is longer when PINGs are
   spaced further apart), so during ÷ after holds only for this probe's pacing and path. */
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
    from {{ ref('stg_contention_windows') }}
    group by run_id, env, phase
),

pivoted as (
    select
        run_id,
        env,
        max(rtt_mean_us) filter (where phase = 'before') as before_mean_us,
        max(rtt_mean_us) filter (where phase = 'during') as during_mean_us,
        max(rtt_mean_us) filter (where phase = 'after') as after_mean_us,
        max(rtt_max_us) filter (where phase = 'during') as during_max_us,
        max(samples) filter (where phase = 'during') as during_samples,
        max(windows) filter (where phase = 'during') as during_windows,
        max(over_threshold) filter (where phase = 'during') as during_over_threshold,
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
    from {{ ref('stg_contention_counters') }} as a
    left join {{ ref('stg_contention_counters') }} as b
        on b.run_id = a.run_id and b.env = a.env and b.command = a.command
        and b.phase = 'before'
    where a.phase = 'after'
),

window_ratios as (
    /* Each during window's wait over one SORT: the headline pools every PING (one long
       window of many PINGs weighs more), their median says how typical it is. */
    select
        w.run_id,
        w.env,
        median(w.rtt_mean_us / nullif(c.usec / nullif(c.calls, 0), 0))
            as wait_over_sort_windows_median,
    from {{ ref('stg_contention_windows') }} as w
    join counters as c on c.run_id = w.run_id and c.env = w.env and c.command = 'sort'
    where w.phase = 'during'
    group by w.run_id, w.env
),

logged as (
    select
        l.run_id,
        l.env,
        count(*) as entries,
        /* Servers before 4.0 log no client name: a PING entry is then the victim's. */
        count(*) filter (
            where l.client_name = s.victim_client_name
            or (l.client_name is null and l.command = 'ping')
        ) as victim_entries,
        count(*) filter (where l.client_name = s.culprit_client_name) as culprit_entries,
        median(l.duration_us) filter (where l.client_name = s.culprit_client_name)
            as culprit_median_us,
        max(l.entry_id) - min(l.entry_id) + 1 - count(*) as ids_missing,
    from {{ ref('stg_contention_slowlog') }} as l
    join {{ ref('stg_contention_setup') }} as s on s.run_id = l.run_id and s.env = l.env
    group by l.run_id, l.env
)

select
    s.run_id,
    s.env,
    s.list_len,
    s.slowlog_threshold_us,
    s.slowlog_max_len_used,
    s.culprit_commands,
    s.loop_s,
    p.before_mean_us,
    p.during_mean_us,
    p.after_mean_us,
    p.during_max_us,
    p.during_samples,
    p.during_windows,
    /* Fewer victim PINGs during the loop than var('contention_min_pings', 30): the headline
       rests on too few samples to read as more than an anecdote (flagged in the report). */
    coalesce(p.during_samples, 0) < {{ var('contention_min_pings', 30) }} as low_sample,
    {{ var('contention_min_pings', 30) }} as min_pings,
    p.during_over_threshold,
    ping.calls as victim_server_calls,
    ping.usec / nullif(ping.calls, 0) as victim_usec_per_call,
    sort.calls as sort_server_calls,
    sort.usec / nullif(sort.calls, 0) as sort_usec_per_call,
    /* How many SORT executions each victim PING waited through: the rest of the running one,
       sometimes the culprit's next one too, so about 1 to 2 (the seed: 238 ms of wait, 256 ms
       of SORT). */
    p.during_mean_us / nullif(sort.usec / nullif(sort.calls, 0), 0)
        as victim_wait_over_culprit_sort,
    wr.wait_over_sort_windows_median,
    coalesce(l.entries, 0) as slowlog_entries,
    coalesce(l.victim_entries, 0) as victim_entries,
    coalesce(l.culprit_entries, 0) as culprit_entries,
    l.culprit_median_us,
    coalesce(l.ids_missing, 0) as slowlog_ids_missing,
from {{ ref('stg_contention_setup') }} as s
left join pivoted as p on p.run_id = s.run_id and p.env = s.env
left join counters as ping on ping.run_id = s.run_id and ping.env = s.env and ping.command = 'ping'
left join counters as sort on sort.run_id = s.run_id and sort.env = s.env and sort.command = 'sort'
left join window_ratios as wr on wr.run_id = s.run_id and wr.env = s.env
left join logged as l on l.run_id = s.run_id and l.env = s.env

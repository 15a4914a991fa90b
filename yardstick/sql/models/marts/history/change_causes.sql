/* The likely causes of tonight's changes: one row per judged change (environment, figure,
   subject, the night it began) and candidate cause, for every regression and improvement in
   changes (new or standing), else one row 'nothing else moved'. Each candidate is compared
   between the reference window (the reference_n runs of the environment before the change
   began: the runs the verdict compared against) and the change window (the runs since it
   began, up to tonight's), with its own size and its own noise in the reference window:
   - environment: a fact of the fingerprint (version, a configuration value, persistence,
     io-threads, the transport, the prober's host) whose value in the change window is not
     its last value in the reference window;
   - workload: a command's calls/s or usec_per_call in commandstats, a slow command of the
     SLOWLOG by command and argument count (the tool's own entries excluded), a prefix's
     keys or bytes;
   - host: intrinsic latency, the host's load per core during the figure's family, the tool's
     own CPU during it;
   - memory: used_memory, fragmentation after the memory family's load, keys evicted per
     second, a type's share of the key space's bytes;
   - topology (as environment): a failover, a node added or removed, slots moving, a
     Sentinel failover at one of the change's runs; the replicas' largest lag.
   The rule that calls a candidate likely (docs/verdict.md "Likely causes", constants in
   dbt_project.yml causes_*): an environment fact changed within the first causes_env_runs
   runs of the change; a number moved by causes_min_z robust σ of its reference window or
   more and by causes_min_share of its reference median or more (from a median of 0: beyond
   the reference's largest value); anything new is likely (a slow command or a command absent
   from the whole reference window, a prefix or type absent from its scans, a number 0 in
   every run of it and not now: see is_new below). An update first removes the causes of
   every environment whose latest full run is in its batch, as changes does. */
{{ config(
    incremental_strategy='append',
    pre_hook="{{ forget_envs_of_batch(this) }}",
) }}
{% set min_z = var('causes_min_z') %}
{% set min_share = var('causes_min_share') %}
{% set env_runs = var('causes_env_runs') %}
{% set min_calls = var('causes_min_calls') %}

with latest_runs as (
    select l.run_id, l.env
    from {{ ref('latest_full_runs') }} as l
    semi join {{ source('lake', 'batch_runs') }} as b on b.run_id = l.run_id and b.env = l.env
),

judged as (
    /* Tonight's regressions and improvements, with the figure's family (its load, its cost). */
    select
        c.env, c.figure, c.subject, c.run_id, c.started_at, c.change_since, c.change_share,
        c.verdict, c.standing, f.family,
        greatest(coalesce(c.reference_n, 30), 3) as reference_n,
    from {{ ref('changes') }} as c
    semi join latest_runs as l on l.run_id = c.run_id and l.env = c.env
    left join {{ ref('figures') }} as f
        on f.run_id = c.run_id and f.env = c.env and f.figure = c.figure
        and f.subject = c.subject
    where c.verdict in ('regression', 'improvement') and c.change_since is not null
),

run_times as (
    select run_id, env, started_at, from {{ ref('run_environment') }}
),

facts as (
    /* The environment's facts per run, as text (one row per run and fact). */
    unpivot (
        select
            e.run_id, e.env,
            coalesce(e.server_product, '') || ' ' || coalesce(e.server_version, '') as version,
            coalesce(e.config_appendonly, '?') as appendonly,
            coalesce(e.config_appendfsync, '?') as appendfsync,
            coalesce(e.config_save, '?') as save,
            coalesce(e.config_io_threads, '?') as io_threads,
            coalesce(e.maxmemory_policy, '?') as maxmemory_policy,
            coalesce(e.maxmemory_bytes::varchar, '?') as maxmemory,
            coalesce(e.transport, '?') as transport,
            coalesce(e.prober_hostname, '?') as prober_host,
        from {{ ref('env_facts') }} as e
    )
    on version, appendonly, appendfsync, save, io_threads, maxmemory_policy, maxmemory, transport,
        prober_host
    into name candidate value fact
),

commands as (
    /* commandstats per run and command, over the intervals that ended in it (not reset);
       only a command called causes_min_calls times or more in the run: below, its
       usec_per_call is a quantized ratio of integers and its rate that of the collectors'
       own few calls between two snapshots. */
    select
        run_id, env, command,
        sum(calls_delta) / nullif(sum(interval_s), 0) as calls_per_s,
        sum(usec_delta) / nullif(sum(calls_delta), 0) as usec_per_call,
    from {{ ref('counter_intervals') }}
    where not counters_reset and interval_s > 0
    group by all
    having sum(calls_delta) >= {{ min_calls }}
),

slow as (
    /* Slow commands by command and argument count, the tool's own entries left out. */
    select
        run_id, env,
        'slowlog ' || lower(command) || ' (' || coalesce(arg_count_original, arg_count)
            || ' args)' as candidate,
        count(*)::double as value,
    from {{ ref('slowlog_entries_dedup') }}
    where not measurement_caused
    group by all
),

evictions as (
    /* Keys evicted per second between two fingerprints of the same server process (INFO
       stats evicted_keys counts since it started: a restart begins again). */
    select
        run_id, env,
        /* none evicted: 0 even where the two fingerprints fell in one second of uptime */
        case
            when evicted_keys = lag(evicted_keys) over w then 0
            else (evicted_keys - lag(evicted_keys) over w)
                / nullif(uptime_s - lag(uptime_s) over w, 0)
        end as evicted_keys_per_s,
    from {{ ref('env_facts') }}
    where evicted_keys is not null and uptime_s is not null
    window w as (partition by env, server_run_id order by uptime_s)
    qualify evicted_keys_per_s >= 0
),

numbers as (
    select run_id, env, 'workload' as kind, command || ' calls/s' as candidate, null as family,
        calls_per_s as value, 'calls/s' as unit,
    from commands
    union all
    select run_id, env, 'workload', command || ' usec_per_call', null, usec_per_call, 'µs',
    from commands
    union all
    select run_id, env, 'workload', candidate, null, value, 'entries/run', from slow
    union all
    select run_id, env, 'workload', 'prefix ' || prefix || ' keys', null, keys_estimated, 'keys',
    from {{ ref('keyspace_prefixes') }}
    union all
    select run_id, env, 'workload', 'prefix ' || prefix || ' bytes', null,
        total_bytes * scale, 'bytes',
    from {{ ref('keyspace_prefixes') }}
    union all
    select run_id, env, 'host', 'intrinsic latency max', null, value, 'µs',
    from {{ ref('figures') }}
    where figure = 'intrinsic_max_us'
    union all
    select run_id, env, 'host', 'host load per core', family, max(load_per_core), 'per core',
    from {{ ref('family_loads') }}
    group by all
    union all
    select run_id, env, 'host', 'tool CPU share of cores', family, sum(cpu_share_of_cores), 'share',
    from {{ ref('tool_cost') }}
    where not run_wide
    group by all
    union all
    select run_id, env, 'memory', 'used_memory', null, used_memory_bytes::double, 'bytes',
    from {{ ref('env_facts') }}
    union all
    select run_id, env, 'memory', 'fragmentation', null, median(fragmentation_after), 'ratio',
    from {{ ref('memory_repetitions') }}
    group by all
    union all
    select run_id, env, 'memory', 'evicted keys/s', null, evicted_keys_per_s, 'keys/s',
    from evictions
    union all
    select run_id, env, 'memory', 'type ' || coalesce(type, '?') || ' share of key bytes', null,
        memory_usage_bytes / nullif(sum(memory_usage_bytes) over (partition by run_id, env), 0),
        'share',
    from {{ ref('keyspace_types') }}
    union all
    select run_id, env, 'environment', 'replica lag max', null, max(lag_bytes)::double, 'bytes',
    from {{ ref('topology_members') }}
    where role = 'replica'
    group by all
),

nights as (
    /* Each change's nights: the figure's own runs in its reference window (the reference_n
       runs before the change began) or in its change window (since it began, up to
       tonight's), numbered from the change's start both ways. */
    select
        j.env, j.figure, j.subject, j.change_since, t.run_id, t.started_at,
        t.started_at >= j.change_since as in_change,
        row_number() over (
            partition by j.env, j.figure, j.subject, t.started_at >= j.change_since
            order by case when t.started_at >= j.change_since then t.started_at end,
                t.started_at desc
        ) as place,
        j.reference_n,
    from judged as j
    inner join {{ ref('figure_trends') }} as t
        on t.env = j.env and t.figure = j.figure and t.subject = j.subject
        and t.started_at <= j.started_at
),

full_windows as (
    select * exclude (reference_n) from nights
    where in_change or place <= reference_n
),

spans as (
    /* The windows in time: a collection between the last reference night and the change's
       first night belongs to the change (a slow client started in between shows there). */
    select
        env, figure, subject, change_since,
        min(started_at) as reference_from,
        max(started_at) filter (where not in_change) as reference_to,
        max(started_at) as change_to,
    from full_windows
    group by all
),

windows as (
    /* Every run of the environment (collections too) in one of the windows. */
    select
        s.env, s.figure, s.subject, s.change_since, r.run_id, r.started_at,
        r.started_at > s.reference_to as in_change,
    from spans as s
    inner join run_times as r
        on r.env = s.env and r.started_at >= s.reference_from and r.started_at <= s.change_to
),

fact_runs as (
    select
        w.env, w.figure, w.subject, w.change_since, w.in_change, w.place, w.started_at,
        f.candidate, f.fact,
    from full_windows as w
    inner join facts as f on f.run_id = w.run_id and f.env = w.env
),

fact_before as (
    /* each fact's last value before the change began */
    select env, figure, subject, change_since, candidate, arg_max(fact, started_at) as before_value,
    from fact_runs
    where not in_change
    group by all
),

fact_windows as (
    /* and its first other value since the change began, when and at which of its runs */
    select
        b.env, b.figure, b.subject, b.change_since, b.candidate, b.before_value,
        arg_min(r.fact, r.started_at) as after_value,
        min(r.started_at) as moved_at,
        min(r.place) as moved_place,
    from fact_before as b
    inner join fact_runs as r
        on r.env = b.env and r.figure = b.figure and r.subject = b.subject
        and r.change_since = b.change_since and r.candidate = b.candidate
        and r.in_change and r.fact is distinct from b.before_value
    group by all
),

topology_moves as (
    /* A failover, a node added or removed, slots moving (topology_changes), a Sentinel
       failover (run_environment) at one of the figure's runs since the change began. */
    select
        w.env, w.figure, w.subject, w.change_since,
        arg_min(
            coalesce(
                t.topology_change,
                printf('Sentinel failover: master %s → %s.', e.previous_master_address,
                    e.sentinel_master_address)
            ),
            w.started_at
        ) as after_value,
        min(w.started_at) as moved_at,
        min(w.place) as moved_place,
    from full_windows as w
    inner join {{ ref('run_environment') }} as e on e.run_id = w.run_id and e.env = w.env
    left join {{ ref('topology_changes') }} as t on t.run_id = w.run_id and t.env = w.env
    where w.in_change and (t.topology_changed or e.sentinel_failover)
    group by all
),

environment as (
    select
        env, figure, subject, change_since, 'environment' as kind, candidate,
        before_value, after_value, null::double as before_number, null::double as after_number,
        null::varchar as unit, null::double as move_share, null::double as noise_sigma,
        null::double as robust_z, null::double as same_run_ratio, moved_at,
        false as is_new,
        moved_place <= {{ env_runs }} as likely,
        printf('%s %s → %s on %s''s run', replace(candidate, '_', '-'), before_value,
            after_value, strftime(moved_at, '%Y-%m-%d')) as sentence,
    from fact_windows
    union all
    select
        env, figure, subject, change_since, 'environment', 'topology', null, after_value,
        null, null, null, null, null, null, null, moved_at, false,
        moved_place <= {{ env_runs }},
        printf('topology on %s''s run: %s', strftime(moved_at, '%Y-%m-%d'),
            rtrim(after_value, '.')),
    from topology_moves
),

number_windows as (
    select
        j.env, j.figure, j.subject, j.change_since, j.change_share, n.kind, n.candidate,
        any_value(n.unit) as unit,
        median(n.value) filter (where not w.in_change) as before_number,
        mad(n.value) filter (where not w.in_change) as before_mad,
        count(n.value) filter (where not w.in_change) as before_n,
        max(abs(n.value)) filter (where not w.in_change) as before_max,
        stddev_samp(n.value) filter (where not w.in_change) as before_sd,
        median(n.value) filter (where w.in_change) as after_number,
        count(n.value) filter (where w.in_change) as after_n,
        min(w.started_at) filter (where w.in_change) as moved_at,
    from judged as j
    inner join windows as w
        on w.env = j.env and w.figure = j.figure and w.subject = j.subject
    inner join numbers as n
        on n.run_id = w.run_id and n.env = w.env
        /* load and cost: the figure's own family only */
        and (n.family is null or n.family = j.family)
    group by all
),

scan_counts as (
    /* The runs of each window the key space was scanned in: where a prefix or a type is
       absent from every scanned run of the reference window, it is new. */
    select
        w.env, w.figure, w.subject, w.change_since,
        count(*) filter (where not w.in_change) as scanned_before,
    from windows as w
    semi join {{ ref('keyspace_types') }} as k on k.run_id = w.run_id and k.env = w.env
    group by all
),

scored as (
    select
        n.*,
        /* Its own noise: the reference window's robust σ (1.4826 MAD), never below 1 % of
           its median (a quantized counter with a MAD of 0 still has a grain); where both
           are 0 (a median of 0: most runs had none), the standard deviation. */
        coalesce(
            nullif(greatest(
                1.4826 * coalesce(n.before_mad, 0), 0.01 * abs(coalesce(n.before_number, 0))
            ), 0),
            n.before_sd
        ) as noise_sigma,
        (n.after_number - n.before_number) / nullif(abs(n.before_number), 0) as move_share,
        /* New, with no noise to size it against: a slow command, or a command of
           commandstats, absent from the whole reference window (nothing the figure ran
           before); a prefix or a type absent from every run of it that scanned the key
           space (two at least); any other number that was 0 in every run of it and is not
           now (evictions, replica lag, the host's load on a quiet host), a share of the
           cores at least causes_min_share of them (a move worth naming). */
        case
            when n.candidate like 'slowlog %' or n.candidate like '% calls/s'
                then coalesce(n.before_n, 0) = 0
            when n.candidate like 'prefix %' or n.candidate like 'type %'
                then coalesce(n.before_n, 0) = 0 and coalesce(c.scanned_before, 0) >= 2
            else n.before_n >= 2 and n.before_max = 0 and n.after_number > 0
                and (n.unit not in ('per core', 'share') or n.after_number >= {{ min_share }})
        end as is_new,
    from number_windows as n
    left join scan_counts as c
        on c.env = n.env and c.figure = n.figure and c.subject = n.subject
        and c.change_since = n.change_since
    /* a command seen in neither window is no candidate */
    where n.after_n > 0
),

numeric as (
    select
        env, figure, subject, change_since, kind, candidate,
        null::varchar as before_value, null::varchar as after_value,
        case when is_new then 0 else before_number end as before_number, after_number, unit,
        move_share, noise_sigma,
        (after_number - before_number) / nullif(noise_sigma, 0) as robust_z,
        /* the candidate's move for each unit of the figure's (both in shares) */
        move_share / nullif(change_share, 0) as same_run_ratio,
        moved_at, is_new,
        is_new or coalesce(
            abs((after_number - before_number) / nullif(noise_sigma, 0)) >= {{ min_z }}
            /* from a median of 0 no share exists: beyond anything the reference saw */
            and coalesce(abs(move_share) >= {{ min_share }}, after_number > before_max),
            false
        ) as likely,
        case
            when is_new and before_n > 0 then printf(
                '%s: 0 in every run of the reference window, %.4g %s since the change (median of %d runs)',
                candidate, after_number, unit, after_n)
            when is_new then printf(
                '%s: new, in %d runs since the change (median %.4g %s), in none of the reference window',
                candidate, after_n, after_number, unit)
            when move_share is null then printf('%s %.4g → %.4g %s (from a median of 0, %.1f σ)',
                candidate, before_number, after_number, unit,
                (after_number - before_number) / nullif(noise_sigma, 0))
            else printf('%s %.4g → %.4g %s (%+.0f %%, %.1f σ)', candidate,
                before_number, after_number, unit,
                move_share * 100, (after_number - before_number) / nullif(noise_sigma, 0))
        end as sentence,
    from scored
    where is_new or before_n >= 2
),

candidates as (
    select * from environment
    union all by name
    select * from numeric
    where likely or abs(robust_z) >= 1
),

ranked as (
    /* Likely first; among them a changed environment fact or topology (a discrete change
       at the change's start: the only rows with an after_value), something new (the
       SLOWLOG's first: it names the argument shape), then the largest move in its own σ. */
    select
        *,
        row_number() over (
            partition by env, figure, subject, change_since
            order by likely desc, after_value is not null desc, is_new desc,
                candidate like 'slowlog %' desc,
                least(abs(coalesce(robust_z, 1e9)), 1e9) desc, candidate
        ) as cause_rank,
    from candidates
),

nothing as (
    select
        j.env, j.figure, j.subject, j.change_since, 'nothing' as kind,
        'nothing else moved' as candidate, false as likely, 1 as cause_rank,
        'nothing else moved' as sentence,
    from judged as j
    anti join ranked as r
        on r.env = j.env and r.figure = j.figure and r.subject = j.subject
        and r.change_since = j.change_since and r.likely
)

select
    j.env, j.figure, j.subject, j.change_since, j.run_id, j.verdict, j.change_share,
    c.cause_rank, c.kind, c.candidate, c.likely,
    c.before_value, c.after_value, c.before_number, c.after_number, c.unit, c.move_share,
    c.noise_sigma, c.robust_z, c.same_run_ratio, c.is_new, c.moved_at, c.sentence,
from judged as j
inner join (
    select * from ranked
    union all by name
    select * from nothing
) as c
    on c.env = j.env and c.figure = j.figure and c.subject = j.subject
    and c.change_since = j.change_since
order by j.env, j.figure, j.subject, c.cause_rank

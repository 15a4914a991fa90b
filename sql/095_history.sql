/* History: each figure's series per environment and subject, with the environment facts that
   decide whether two points may be compared, a rolling baseline (median and MAD of the
   previous runs) and the verdict on the latest run. */
create or replace table run_environment as
/* One row per environment per run: the facts, and where they changed. Runs without a
   fingerprint (collections, unreachable servers) inherit the segment of the last run that
   had one, so their absolutes are compared within the right environment. */
with runs as (
    select r.run_id, r.env, r.started_at, r.status, r.profile,
    from stg_runs as r
),

facts as (
    select
        r.run_id, r.env, r.started_at,
        e.redis_version, e.server_cores, e.server_cpu_model, e.transport,
        e.prober_load_1m,
    from runs as r
    join env_facts as e on e.run_id = r.run_id and e.env = r.env
    where e.redis_version is not null   /* runs that reached the server */
),

compared as (
    select
        *,
        /* A new Redis version, CPU, core count or transport makes another environment:
           absolutes from before do not describe it. */
        lag(run_id) over w is not null and (
            redis_version is distinct from lag(redis_version) over w
            or server_cores is distinct from lag(server_cores) over w
            or server_cpu_model is distinct from lag(server_cpu_model) over w
            or transport is distinct from lag(transport) over w
        ) as environment_changed,
    from facts
    window w as (partition by env order by started_at, run_id)
),

segmented as (
    select
        *,
        sum(environment_changed::int) over (
            partition by env order by started_at, run_id
        ) as segment,
    from compared
)

select
    r.run_id, r.env, r.started_at, r.status, r.profile,
    s.redis_version, s.server_cores, s.server_cpu_model, s.transport, s.prober_load_1m,
    coalesce(s.environment_changed, false) as environment_changed,
    coalesce(
        s.segment,
        last_value(s.segment ignore nulls) over (
            partition by r.env order by r.started_at, r.run_id
            rows between unbounded preceding and current row
        ),
        0
    ) as segment,
from runs as r
left join segmented as s on s.run_id = r.run_id and s.env = r.env;

create or replace table figure_trends as
with points as (
    select
        f.env, f.figure, f.subject, f.run_id, f.started_at, f.value, f.unit, f.nature,
        f.better, f.n, f.min_value, f.max_value, f.noisy,
        e.redis_version, e.server_cores, e.transport, e.prober_load_1m,
        coalesce(e.environment_changed, false) as environment_changed,
        coalesce(e.segment, 0) as segment,
        /* Absolutes are compared only within one unchanged environment; ratios across. */
        case when f.nature = 'absolute' then coalesce(e.segment, 0) else 0 end as baseline_key,
    from figures as f
    left join run_environment as e on e.run_id = f.run_id and e.env = f.env
),

baselines as (
    select
        *,
        median(value) over baseline as baseline_median,
        mad(value) over baseline as baseline_mad,
        stddev_samp(value) over baseline as baseline_stddev,
        count(value) over baseline as baseline_n,
        median(value) over rolling as rolling_median,
        mad(value) over rolling as rolling_mad,
    from points
    window
        /* The previous 30 comparable runs (a month of nights), not this one. */
        baseline as (
            partition by env, figure, subject, baseline_key order by started_at, run_id
            rows between 30 preceding and 1 preceding
        ),
        /* A centred-on-the-past line to draw: this run and the 6 before. */
        rolling as (
            partition by env, figure, subject order by started_at, run_id
            rows between 6 preceding and current row
        )
)

select
    *,
    (value - baseline_median) / nullif(abs(baseline_median), 0) as change_share,
    /* 1.4826 × MAD estimates a standard deviation robustly; the larger of it and the plain
       stdev, times 4, bounds the noise. 3 would raise a false alarm for one figure in 370
       every night: with hundreds of figures per environment, most nights. A step inside
       the baseline window widens the band (and may mark the series unstable) until the
       window has moved past it: a late verdict rather than a false one. */
    4 * greatest(1.4826 * baseline_mad, baseline_stddev) as noise_band,
    baseline_stddev / nullif(abs(baseline_median), 0) > 0.10 as unstable,
from baselines
order by env, figure, subject, started_at, run_id;

/* Kept for queries written against the first schema. */
create or replace view figure_history as
select env, figure, subject, started_at, run_id, value, unit, nature, n, min_value, max_value,
       redis_version, server_cores, transport, prober_load_1m, environment_changed,
from figure_trends;

create or replace table changes as
/* The verdict on each environment's latest run, figure by figure. */
with latest_runs as (
    /* Each environment's latest full run: a series missing from it is not "latest". */
    select run_id, env from stg_runs
    where profile is distinct from 'collect'
    qualify row_number() over (partition by env order by started_at desc, run_id desc) = 1
),

latest as (
    select t.* from figure_trends as t
    join latest_runs as l on l.run_id = t.run_id and l.env = t.env
),

judged as (
    select
        *,
        case
            /* Flagged, never called a regression: absolutes describe another machine now,
               and a ratio that moved with the version is news about the version. */
            when environment_changed then 'environment changed'
            when coalesce(baseline_n, 0) < 3 then 'new'
            when unstable then 'unstable'
            when abs(change_share) >= 0.05 and abs(value - baseline_median) > noise_band
                then case
                    when better = 'lower' and value > baseline_median then 'regression'
                    when better = 'lower' then 'improvement'
                    when better = 'higher' and value < baseline_median then 'regression'
                    when better = 'higher' then 'improvement'
                    else 'changed'
                end
            else 'steady'
        end as verdict,
    from latest
)

select
    env, figure, subject, run_id, started_at, value, unit, nature, better,
    baseline_median, baseline_n, change_share, noise_band, unstable, environment_changed,
    redis_version, verdict,
from judged
order by env, figure, subject;

/* Each figure's series per environment and subject, one row per run (full runs only): the
   environment facts that decide whether two points may be compared, a rolling line and a
   baseline (median, MAD and stdev of the previous 30 comparable runs). The points before this
   batch come from the state model figure_series_tail (the last 37 of each series). */
{% set prior = prior_relation('figure_series_tail') if is_incremental() else none %}

with batch_figures as (
    {{ in_batch(ref('figures')) }}
),

batch_environment as (
    {{ in_batch(ref('run_environment')) }}
),

batch_points as (
    select
        f.env, f.figure, f.subject, f.run_id, f.started_at, f.value, f.unit, f.nature,
        f.better, f.n, f.min_value, f.max_value, f.noisy,
        e.server_product, e.server_version, e.redis_version, e.server_cores, e.transport, e.prober_load_1m,
        coalesce(e.environment_changed, false) as environment_changed,
        coalesce(e.segment, 0) as segment,
        /* Absolutes are compared only within one unchanged environment; ratios across. */
        case when f.nature = 'absolute' then coalesce(e.segment, 0) else 0 end as baseline_key,
        false as is_prior,
    from batch_figures as f
    left join batch_environment as e on e.run_id = f.run_id and e.env = f.env
),

prior as (
    /* The latest points of the series this batch extends: enough for both windows. */
    {% if is_incremental() and prior %}
    select t.env, t.figure, t.subject, t.run_id, t.started_at, t.value, t.baseline_key,
    from {{ prior }} as t
    semi join (select distinct env, figure, subject from batch_points) as c
        on c.env = t.env and c.figure = t.figure and c.subject = t.subject
    {% else %}
    select
        null::varchar as env, null::varchar as figure, null::varchar as subject,
        null::varchar as run_id, null::timestamptz as started_at, null::double as value,
        null::bigint as baseline_key,
    where false
    {% endif %}
),

points as (
    select * from batch_points
    union all by name
    select *, true as is_prior, from prior
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
),

judged as (
    select
        * exclude (is_prior),
        (value - baseline_median) / nullif(abs(baseline_median), 0) as change_share,
        /* 1.4826 × MAD estimates a standard deviation robustly; the larger of it and the
           plain stdev, times 4, bounds the noise. 3 would raise a false alarm for one figure
           in 370 every night: with hundreds of figures per environment, most nights. A step
           inside the baseline window widens the band (and may mark the series unstable)
           until the window has moved past it: a late verdict rather than a false one. */
        4 * greatest(1.4826 * baseline_mad, baseline_stddev) as noise_band,
        baseline_stddev / nullif(abs(baseline_median), 0) > 0.10 as unstable,
    from baselines
    where not is_prior
)

select * from judged
order by started_at, run_id, env, figure, subject

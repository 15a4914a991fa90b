/* Each figure's points per environment and subject, one row per full run, with the verdict
   that run would get: its series (profile and the digest of the settings the family ran
   with: a point is compared only with points measured the same way), the environment facts
   that decide whether absolutes compare, a rolling line, a baseline (median and MAD of the
   previous 30 comparable runs) and a noise band. The points before this batch come from the
   state model figure_series_tail (the last 37 of each series).

   The verdict (see the README's "Tonight's verdict" and bench/verdicts.py for its measured
   false-alarm and miss rates):
   - judged value: the median of the run's repetitions (its run-level value when it has none);
   - noise band: band_sigmas × 1.4826 × MAD of the baseline (robust: a few outliers in the
     baseline neither move its median nor widen its band), widened by (1 + small_sample/√n)
     because a MAD of few runs is often too small; judged from min_baseline runs on;
   - a run beyond the band and at least min_change from the baseline median is only
     'unconfirmed'; a regression or improvement needs this run and the one before it beyond
     the band of the baseline before both, on the same side (one outlier run is no alarm);
   - 'noisy': nothing beyond the band, but the band is wider than min_change, so a change of
     that size would have gone unseen. */
{% set prior = prior_relation('figure_series_tail') if is_incremental() else none %}
{% set min_baseline = var('verdict_min_baseline', 10) %}
{% set min_change = var('verdict_min_change_share', 0.05) %}

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
        coalesce(f.median_value, f.value) as judged_value,
        f.profile, f.params_digest,
        concat_ws('/', coalesce(f.profile, 'unknown'), f.params_digest) as series,
        e.server_product, e.server_version, e.redis_version, e.server_cores, e.transport, e.prober_load_1m,
        coalesce(e.environment_changed, false) as environment_changed,
        coalesce(e.segment, 0) as segment,
        /* Absolutes are compared only within one unchanged environment; ratios across. */
        case when f.nature = 'absolute' then coalesce(e.segment, 0) else 0 end as baseline_key,
        null::varchar as prior_verdict,
        false as is_prior,
    from batch_figures as f
    left join batch_environment as e on e.run_id = f.run_id and e.env = f.env
),

prior as (
    /* The latest points of the series this batch extends: enough for every window. */
    {% if is_incremental() and prior %}
    select
        t.env, t.figure, t.subject, t.run_id, t.started_at, t.value, t.judged_value,
        t.profile, t.series, t.baseline_key, t.verdict as prior_verdict,
    from {{ prior }} as t
    semi join (select distinct env, figure, subject from batch_points) as c
        on c.env = t.env and c.figure = t.figure and c.subject = t.subject
    {% else %}
    select
        null::varchar as env, null::varchar as figure, null::varchar as subject,
        null::varchar as run_id, null::timestamptz as started_at, null::double as value,
        null::double as judged_value, null::varchar as profile, null::varchar as series,
        null::bigint as baseline_key, null::varchar as prior_verdict,
    where false
    {% endif %}
),

points as (
    select * from batch_points
    union all by name
    select *, true as is_prior, from prior
),

windows as (
    select
        *,
        median(judged_value) over baseline as baseline_median,
        mad(judged_value) over baseline as baseline_mad,
        count(judged_value) over baseline as baseline_n,
        /* The baseline before this run and the one before it, which confirms a move. */
        median(judged_value) over baseline_before_previous as confirm_median,
        mad(judged_value) over baseline_before_previous as confirm_mad,
        count(judged_value) over baseline_before_previous as confirm_n,
        lag(judged_value) over comparable as previous_value,
        median(value) over rolling as rolling_median,
        mad(value) over rolling as rolling_mad,
        count(*) over earlier_in_series as series_points_before,
        lag(series) over every_run as previous_series,
        lag(profile) over every_run as previous_profile,
    from points
    window
        /* The previous 30 comparable runs (a month of nights), not this one. */
        baseline as (
            partition by env, figure, subject, series, baseline_key order by started_at, run_id
            rows between 30 preceding and 1 preceding
        ),
        baseline_before_previous as (
            partition by env, figure, subject, series, baseline_key order by started_at, run_id
            rows between 31 preceding and 2 preceding
        ),
        comparable as (
            partition by env, figure, subject, series, baseline_key order by started_at, run_id
        ),
        /* A line to draw: this run and the 6 before it in the same series. */
        rolling as (
            partition by env, figure, subject, series order by started_at, run_id
            rows between 6 preceding and current row
        ),
        earlier_in_series as (
            partition by env, figure, subject, series order by started_at, run_id
            rows between unbounded preceding and 1 preceding
        ),
        every_run as (partition by env, figure, subject order by started_at, run_id)
),

measured as (
    select
        *,
        (judged_value - baseline_median) / nullif(abs(baseline_median), 0) as change_share,
        {{ verdict_band('baseline_mad', 'baseline_n') }} as noise_band,
        {{ verdict_band('baseline_mad', 'baseline_n') }} / nullif(abs(baseline_median), 0) as noise_share,
        coalesce(
            baseline_n >= {{ min_baseline }}
            and abs(judged_value - baseline_median) > {{ verdict_band('baseline_mad', 'baseline_n') }}
            and abs(judged_value - baseline_median) >= {{ min_change }} * abs(baseline_median),
            false
        ) as beyond_band,
        /* This run and the previous one both beyond the band of the baseline before them,
           on the same side. */
        coalesce(
            confirm_n >= {{ min_baseline }}
            and abs(judged_value - confirm_median) > {{ verdict_band('confirm_mad', 'confirm_n') }}
            and abs(previous_value - confirm_median) > {{ verdict_band('confirm_mad', 'confirm_n') }}
            and abs(judged_value - confirm_median) >= {{ min_change }} * abs(confirm_median)
            and abs(previous_value - confirm_median) >= {{ min_change }} * abs(confirm_median)
            and sign(judged_value - confirm_median) = sign(previous_value - confirm_median),
            false
        ) as confirmed,
        /* The first point of a series that is not the figure's first: the profile or its
           settings changed here (a marker on charts and in `yardstick trend`). */
        series_points_before = 0 and previous_series is not null as series_started,
        case
            when judged_value > baseline_median and better = 'lower' then 'worse'
            when judged_value < baseline_median and better = 'lower' then 'better'
            when judged_value > baseline_median and better = 'higher' then 'better'
            when judged_value < baseline_median and better = 'higher' then 'worse'
        end as direction,
    from windows
),

judged as (
    select
        *,
        case
            when is_prior then prior_verdict
            /* Flagged, never called a regression: absolutes describe another machine now,
               and a ratio that moved with the version is news about the version. */
            when environment_changed then 'environment changed'
            when baseline_n < {{ min_baseline }} then 'new'
            when confirmed then case direction
                when 'worse' then 'regression'
                when 'better' then 'improvement'
                else 'changed'
            end
            when beyond_band then 'unconfirmed'
            when noise_share > {{ min_change }} then 'noisy'
            else 'steady'
        end as verdict,
    from measured
),

followed as (
    select
        *,
        /* A regression or improvement first said tonight (not already the night before). */
        verdict in ('regression', 'improvement', 'changed')
            and lag(verdict) over comparable is distinct from verdict as first_night,
    from judged
    window comparable as (
        partition by env, figure, subject, series, baseline_key order by started_at, run_id
    )
)

select
    env, figure, subject, run_id, started_at, value, judged_value, unit, nature, better,
    n, min_value, max_value, noisy,
    profile, params_digest, series, series_started, previous_profile,
    server_product, server_version, redis_version, server_cores, transport, prober_load_1m,
    environment_changed, segment, baseline_key,
    baseline_median, baseline_mad, baseline_n, rolling_median, rolling_mad,
    change_share, noise_band, noise_share, previous_value, beyond_band, confirmed,
    direction, verdict, first_night,
from followed
where not is_prior
order by started_at, run_id, env, figure, subject

/* Each figure's points per environment and subject, one row per full run, with the verdict
   that run would get: its series (profile and the digest of the settings the family ran
   with: a point is compared only with points measured the same way), the environment facts
   that decide whether absolutes compare, a rolling line, a baseline (median and MAD of the
   previous 30 comparable runs) and the evidence of the verdict. The points before this batch
   come from the state model figure_series_tail (the last points of each series).

   The verdict (see the README's "Tonight's verdict" and bench/verdicts.py for its measured
   false-alarm and miss rates; every setting is a dbt var in dbt_project.yml):
   - judged value: the median of the run's repetitions (its run-level value when it has none);
   - baselines hold only runs not taken on a saturated host (run_load; a run without load
     samples counts as not saturated);
   - noise σ: the standard deviation of the reference runs, capped at 1.5 robust σ
     (1.4826 × MAD): efficient on ordinary noise, while one outlier run in the reference
     cannot blind the series for a month;
   - the tests: the level of the last k runs (their mean, leaving out a run further than
     outlier_sigmas σ from their median: one outlier run is no alarm) against the median of
     the 30 comparable runs before the last recent_runs, in standard errors σ √(1/k + π/2n),
     as a t test on n − 1 degrees of freedom; twice: a short test on k = recent_runs (a large
     change shows there first) and a long one on the fewest runs, up to max_recent_runs,
     whose level would show a change of min_change_share at alpha given the series' own noise
     (a quiet series needs 3, a noisier one waits for more), each at alpha / 2 when they
     differ; a regression or improvement when one is met: p-value at most its level, resting
     on 2 runs or more, a change of at least min_alarm_share;
   - 'unconfirmed': that test is not met, but this run alone is (against the 30 before it);
   - 'noisy': nothing moved, but the smallest change the test could reveal in this series
     with max_recent_runs runs (visible_change_share) is above min_change_share: a change of
     that size would go unseen. */
{% set prior = prior_relation('figure_series_tail') if is_incremental() else none %}
{% set min_baseline = var('verdict_min_baseline') %}
{% set k = var('verdict_recent_runs') %}
{% set k_max = var('verdict_max_recent_runs') %}
{% set alpha = var('verdict_alpha') %}
{% set outlier_sigmas = var('verdict_outlier_sigmas') %}
{% set min_alarm = var('verdict_min_alarm_share') %}
{% set min_change = var('verdict_min_change_share') %}
{% if k < 2 or k_max < k or min_baseline < k + 3 %}
    {{ exceptions.raise_compiler_error(
        "dbt vars verdict_recent_runs " ~ k ~ ", verdict_max_recent_runs " ~ k_max
        ~ " and verdict_min_baseline " ~ min_baseline ~ ": the test needs 2 recent runs or more,"
        ~ " at most verdict_max_recent_runs, and a baseline of at least verdict_recent_runs + 3 runs") }}
{% endif %}
{% set z_crit = z_critical(alpha) %}

with batch_figures as (
    {{ in_batch(ref('figures')) }}
),

batch_environment as (
    {{ in_batch(ref('run_environment')) }}
),

batch_load as (
    /* Runs taken on a saturated host (the precision mart run_load): no baseline. */
    {{ in_batch(ref('run_load')) }}
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
        null::timestamptz as prior_change_since,
        coalesce(l.saturated, false) as saturated,  /* no load samples: not saturated */
        false as is_prior,
    from batch_figures as f
    left join batch_environment as e on e.run_id = f.run_id and e.env = f.env
    left join batch_load as l on l.run_id = f.run_id and l.env = f.env
),

prior as (
    /* The latest points of the series this batch extends: enough for every window. */
    {% if is_incremental() and prior %}
    select
        t.env, t.figure, t.subject, t.run_id, t.started_at, t.value, t.judged_value,
        t.profile, t.series, t.baseline_key, t.verdict as prior_verdict,
        t.change_since as prior_change_since, t.saturated,
    from {{ prior }} as t
    semi join (select distinct env, figure, subject from batch_points) as c
        on c.env = t.env and c.figure = t.figure and c.subject = t.subject
    {% else %}
    select
        null::varchar as env, null::varchar as figure, null::varchar as subject,
        null::varchar as run_id, null::timestamptz as started_at, null::double as value,
        null::double as judged_value, null::varchar as profile, null::varchar as series,
        null::bigint as baseline_key, null::varchar as prior_verdict,
        null::timestamptz as prior_change_since, null::boolean as saturated,
    where false
    {% endif %}
),

points as (
    select * from batch_points
    union all by name
    select *, true as is_prior, from prior
),

usable as (
    select
        *,
        /* What a baseline may hold: runs on a saturated host are judged, never compared with. */
        case when not coalesce(saturated, false) then judged_value end as baseline_value,
    from points
),

windows as (
    select
        *,
        median(baseline_value) over baseline as baseline_median,
        mad(baseline_value) over baseline as baseline_mad,
        stddev_samp(baseline_value) over baseline as baseline_sd,
        count(baseline_value) over baseline as baseline_n,
        /* The reference of the test: the 30 comparable runs before the last recent_runs. */
        median(baseline_value) over reference as reference_median,
        mad(baseline_value) over reference as reference_mad,
        stddev_samp(baseline_value) over reference as reference_sd,
        count(baseline_value) over reference as reference_n,
        /* The last runs (this one and up to k_max - 1 before it), oldest first. */
        list({ 'v': judged_value, 'at': started_at }) over recent as recent_runs,
        lag(judged_value) over comparable as previous_value,
        median(value) over rolling as rolling_median,
        mad(value) over rolling as rolling_mad,
        count(*) over earlier_in_series as series_points_before,
        lag(series) over every_run as previous_series,
        lag(profile) over every_run as previous_profile,
    from usable
    window
        /* The previous 30 comparable runs (a month of nights), not this one. */
        baseline as (
            partition by env, figure, subject, series, baseline_key order by started_at, run_id
            rows between 30 preceding and 1 preceding
        ),
        reference as (
            partition by env, figure, subject, series, baseline_key order by started_at, run_id
            rows between {{ 29 + k }} preceding and {{ k }} preceding
        ),
        recent as (
            partition by env, figure, subject, series, baseline_key order by started_at, run_id
            rows between {{ k_max - 1 }} preceding and current row
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

noise as (
    select
        *,
        /* σ of the reference and of the baseline: the standard deviation, capped at 1.5
           robust σ (a MAD of 0 says nothing: the standard deviation alone then). */
        case
            when reference_mad > 0 then least(reference_sd, 1.5 * 1.4826 * reference_mad)
            else reference_sd
        end as noise_sigma,
        case
            when baseline_mad > 0 then least(baseline_sd, 1.5 * 1.4826 * baseline_mad)
            else baseline_sd
        end as baseline_sigma,
    from windows
),

sized as (
    /* Two tests of the recent level: the short one on the last recent_runs runs (a large
       change shows there first), and the long one on the fewest runs (from recent_runs to
       max_recent_runs) whose level would show a change of min_change_share at alpha given
       this series' own noise (a quiet series needs 3, a noisier one waits for more). */
    select
        *,
        case when reference_n >= 3 then {{ z_as_t(z_crit, 'reference_n - 1') }} end as recent_t_critical,
        {{ k }} as k_short,
        case
            when noise_sigma = 0 then {{ k }}
            when reference_n < 3 or noise_sigma is null then {{ k_max }}
            else coalesce(
                least(greatest(ceil(1 / nullif(greatest(
                    pow({{ min_change }} * abs(reference_median)
                        / ({{ z_as_t(z_crit, 'reference_n - 1') }} * noise_sigma), 2)
                    - pi() / (2 * reference_n),
                    0), 0)), {{ k }}), {{ k_max }}),
                {{ k_max }}
            )
        end::int as k_long,
    from noise
),

{% set tests = ['short', 'long'] %}
recent as (
    select
        *,
        {% for t in tests %}
        recent_runs[-k_{{ t }}:] as asked_{{ t }},
        list_aggregate(list_transform(recent_runs[-k_{{ t }}:], lambda r: r.v), 'median')
            as median_{{ t }},
        {% endfor %}
    from sized
),

levelled as (
    select
        *,
        /* The runs each level rests on: those within outlier_sigmas σ of their median (one
           run far from the others is an outlier, not a level), and never closer than
           min_change_share (a figure without noise, quantized, still has a level). */
        {% for t in tests %}
        list_filter(
            asked_{{ t }},
            lambda r: abs(r.v - median_{{ t }}) <= greatest(
                {{ outlier_sigmas }} * coalesce(noise_sigma, 0),
                {{ min_change }} * coalesce(abs(reference_median), 0)
            )
        ) as kept_{{ t }},
        {% endfor %}
    from recent
),

summed as (
    select
        *,
        {% for t in tests %}
        len(kept_{{ t }}) as n_{{ t }},
        list_avg(list_transform(kept_{{ t }}, lambda r: r.v)) as value_{{ t }},
        {% endfor %}
    from levelled
),

sided as (
    /* The kept runs past the midpoint between the reference and the recent level, on the
       side the level moved to, after the last kept run that was not. */
    select
        *,
        {% for t in tests %}
        list_max(list_transform(
            list_filter(kept_{{ t }}, lambda r: (r.v - (reference_median + value_{{ t }}) / 2)
                * sign(value_{{ t }} - reference_median) <= 0),
            lambda r: r.at
        )) as unmoved_at_{{ t }},
        {% endfor %}
    from summed
),

tested as (
    select
        *,
        {% for t in tests %}
        /* The first night of the change: the oldest of those runs (this run if none). */
        coalesce(
            list_min(list_transform(
                list_filter(kept_{{ t }}, lambda r: unmoved_at_{{ t }} is null or r.at > unmoved_at_{{ t }}),
                lambda r: r.at
            )),
            started_at
        ) as since_{{ t }},
        noise_sigma * sqrt(1 / nullif(n_{{ t }}, 0) + pi() / (2 * reference_n)) as se_{{ t }},
        (value_{{ t }} - reference_median) / nullif(abs(reference_median), 0) as share_{{ t }},
        (value_{{ t }} - reference_median)
            / nullif(noise_sigma * sqrt(1 / nullif(n_{{ t }}, 0) + pi() / (2 * reference_n)), 0)
            as score_{{ t }},
        {% endfor %}
    from sided
),

tested_p as (
    select
        *,
        /* Two-sided p-values; a change with no noise at all is certain (p = 0). */
        {% for t in tests %}
        case
            when reference_n < 3 or value_{{ t }} is null then null
            when se_{{ t }} = 0 then (value_{{ t }} = reference_median)::int::double
            else {{ p_two_sided(t_as_z('score_' ~ t, 'reference_n - 1')) }}
        end as p_{{ t }},
        {% endfor %}
        /* Each test at alpha / 2 when both run (Bonferroni: one alpha per night). */
        case when k_long > k_short then {{ alpha }} / 2 else {{ alpha }} end as alpha_each,
    from tested
),

significant as (
    select
        *,
        {% for t in tests %}
        coalesce(
            p_{{ t }} <= alpha_each and n_{{ t }} >= 2 and abs(share_{{ t }}) >= {{ min_alarm }},
            false
        ) as met_{{ t }},
        {% endfor %}
    from tested_p
),

chosen as (
    /* The evidence of the test that was met (the short one first), else of the long one. */
    select
        *,
        {% for col in ['k', 'n', 'value', 'since', 'share', 'score', 'p'] %}
        case when met_short then {{ col }}_short else {{ col }}_long end as chosen_{{ col }},
        {% endfor %}
    from significant
),

scored as (
    select
        *,
        chosen_k as recent_k,
        chosen_n as recent_n,
        chosen_value as recent_value,
        chosen_since as recent_since,
        chosen_share as recent_change_share,
        chosen_score as change_score,
        chosen_p as p_value,
        baseline_sigma * sqrt(1 + pi() / (2 * baseline_n)) as single_se,
        (judged_value - baseline_median) / nullif(abs(baseline_median), 0) as single_change_share,
        /* The t value one run must reach: z_critical mapped to n - 1 degrees of freedom. */
        case when baseline_n >= 3 then {{ z_as_t(z_crit, 'baseline_n - 1') }} end as single_t_critical,
    from chosen
),

measured as (
    select
        *,
        case
            when baseline_n < 3 then null
            when single_se = 0 then (judged_value = baseline_median)::int::double
            else {{ p_two_sided(t_as_z('(judged_value - baseline_median) / single_se', 'baseline_n - 1')) }}
        end as single_p_value,
        single_t_critical * single_se as noise_band,
        single_t_critical * single_se / nullif(abs(baseline_median), 0) as noise_share,
        noise_sigma / nullif(abs(reference_median), 0) as noise_sigma_share,
        /* The smallest change the test could reveal here (k_max runs against the reference). */
        greatest(
            recent_t_critical * noise_sigma * sqrt(1 / {{ k_max }} + pi() / (2 * reference_n))
                / nullif(abs(reference_median), 0),
            {{ min_alarm }}
        ) as visible_change_share,
        /* The first point of a series that is not the figure's first: the profile or its
           settings changed here (a marker on charts and in `yardstick trend`). */
        series_points_before = 0 and previous_series is not null as series_started,
    from scored
),

decided as (
    select
        *,
        coalesce(baseline_n >= {{ min_baseline }} and (met_short or met_long), false) as confirmed,
        coalesce(
            baseline_n >= {{ min_baseline }}
            and single_p_value <= {{ alpha }}
            and abs(single_change_share) >= {{ min_alarm }},
            false
        ) as beyond_band,
    from measured
),

directed as (
    select
        *,
        /* What the verdict speaks of: the recent level when the test is met, else this run. */
        case when confirmed then recent_change_share else single_change_share end as change_share,
        case when confirmed then recent_value - reference_median else judged_value - baseline_median end
            as moved_by,
    from decided
),

judged as (
    select
        *,
        case
            when moved_by > 0 and better = 'lower' then 'worse'
            when moved_by < 0 and better = 'lower' then 'better'
            when moved_by > 0 and better = 'higher' then 'better'
            when moved_by < 0 and better = 'higher' then 'worse'
        end as direction,
        case
            when is_prior then prior_verdict
            /* Flagged, never called a regression: absolutes describe another machine now,
               and a ratio that moved with the version is news about the version. */
            when environment_changed then 'environment changed'
            when baseline_n < {{ min_baseline }} then 'new'
            when confirmed then case
                when moved_by > 0 and better = 'lower' or moved_by < 0 and better = 'higher'
                    then 'regression'
                when moved_by < 0 and better = 'lower' or moved_by > 0 and better = 'higher'
                    then 'improvement'
                else 'changed'
            end
            when beyond_band then 'unconfirmed'
            when coalesce(visible_change_share, 1) > {{ min_change }} then 'noisy'
            else 'steady'
        end as verdict,
    from directed
),

followed as (
    select
        *,
        /* A regression or improvement first said tonight (not already the night before). */
        verdict in ('regression', 'improvement', 'changed')
            and (lag(verdict) over comparable is distinct from verdict) as first_night,
    from judged
    window comparable as (
        partition by env, figure, subject, series, baseline_key order by started_at, run_id
    )
),

streaks as (
    select
        *,
        /* Nights of one regression (or improvement) said night after night share a streak. */
        sum((first_night or verdict not in ('regression', 'improvement', 'changed'))::int) over (
            partition by env, figure, subject, series, baseline_key order by started_at, run_id
            rows between unbounded preceding and current row
        ) as streak,
        case
            when is_prior then prior_change_since
            when verdict in ('regression', 'improvement', 'changed') then recent_since
            when verdict = 'unconfirmed' then started_at
        end as night_since,
    from followed
),

dated as (
    select
        *,
        /* Since which night the change holds: the first night its level rests on, kept over
           the nights the same verdict is said again. */
        case
            when verdict in ('regression', 'improvement', 'changed') then first_value(night_since) over (
                partition by env, figure, subject, series, baseline_key, streak
                order by started_at, run_id
            )
            else night_since
        end as change_since,
    from streaks
)

select
    env, figure, subject, run_id, started_at, value, judged_value, unit, nature, better,
    n, min_value, max_value, noisy,
    profile, params_digest, series, series_started, previous_profile,
    server_product, server_version, redis_version, server_cores, transport, prober_load_1m,
    environment_changed, segment, baseline_key,
    saturated,  /* taken on a saturated host (run_load): never part of a baseline */
    baseline_median, baseline_mad, baseline_n, rolling_median, rolling_mad,
    change_share, noise_band, noise_share, previous_value, beyond_band, confirmed,
    /* the evidence of the test */
    recent_value, recent_k, recent_n, reference_median, reference_n, noise_sigma, noise_sigma_share,
    change_score, p_value, single_p_value, visible_change_share, change_since,
    direction, verdict, first_night,
from dated
where not is_prior
order by started_at, run_id, env, figure, subject

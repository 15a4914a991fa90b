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
   - beside it, a scan over the runs since a change may have begun: for each m of
     scan_lengths (3, 5, 7, 10), the mean of the last m runs (each clipped at scan_clip σ)
     against the level of the 30 comparable runs before those scan_runs (none of them in its
     own reference; their mean, each clipped at scan_clip σ from their median), in standard
     errors σ √(1/m + 1/n); a change when its largest score reaches scan_threshold (a
     calibrated threshold, not a p-value: bench/verdicts.py), a change of min_alarm_share, a
     reference of min_baseline runs. Its window is bounded, so the tail state recomputes it;
     verdict_test says which test said the change;
   - 'unconfirmed': neither test is met, but this run alone is (against the 30 before it);
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
{% set scan_runs = var('verdict_scan_runs') %}
{% set scan_h = var('verdict_scan_threshold') %}
{% set scan_clip = var('verdict_scan_clip') %}
{% set scan_lengths = var('verdict_scan_lengths') %}
{% if k < 2 or k_max < k or min_baseline < k + 3 %}
    {{ exceptions.raise_compiler_error(
        "dbt vars verdict_recent_runs " ~ k ~ ", verdict_max_recent_runs " ~ k_max
        ~ " and verdict_min_baseline " ~ min_baseline ~ ": the test needs 2 recent runs or more,"
        ~ " at most verdict_max_recent_runs, and a baseline of at least verdict_recent_runs + 3 runs") }}
{% endif %}
{% if scan_runs < 2 or scan_h <= 0 or scan_clip <= 0 or not scan_lengths
    or scan_lengths | min < 2 or scan_lengths | max > scan_runs %}
    {{ exceptions.raise_compiler_error(
        "dbt vars verdict_scan_runs " ~ scan_runs ~ ", verdict_scan_lengths " ~ scan_lengths
        ~ ", verdict_scan_threshold " ~ scan_h ~ " and verdict_scan_clip " ~ scan_clip
        ~ ": the scan needs lengths of 2 runs or more, none longer than its window,"
        ~ " a positive threshold and a positive clip") }}
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
        /* Absolutes are compared only within one unchanged environment; ratios across; and
           a series declared the new normal (rebaselines) starts its baseline again. */
        case when f.nature = 'absolute' then coalesce(e.segment, 0) else 0 end
            + 1000000 * (
                select count(*) from {{ ref('rebaselines') }} as r
                where r.env = f.env and r.figure = f.figure and r.subject in ('', f.subject)
                    and r.started_at <= f.started_at
            ) as baseline_key,
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
        t.profile, t.series, t.baseline_key, t.test_verdict as prior_verdict,
        t.test_change_since as prior_change_since, t.saturated,
        t.hold_verdict, t.hold_since, t.hold_reference, t.hold_sigma, t.hold_n, t.hold_sign,
        t.hold_said_at, t.hold_test,
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
        null::varchar as hold_verdict, null::timestamptz as hold_since,
        null::double as hold_reference, null::double as hold_sigma, null::bigint as hold_n,
        null::double as hold_sign, null::timestamptz as hold_said_at,
        null::varchar as hold_test,
    where false
    {% endif %}
),

points as (
    select * from batch_points
    union all by name
    select * exclude (
        hold_verdict, hold_since, hold_reference, hold_sigma, hold_n, hold_sign, hold_said_at,
        hold_test
    ),
        true as is_prior,
    from prior
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
        /* The scan's reference: the 30 comparable runs before its whole window (none of
           the runs it scans is in it), and its window, oldest first. */
        median(baseline_value) over scan_reference as scan_reference_median,
        mad(baseline_value) over scan_reference as scan_reference_mad,
        stddev_samp(baseline_value) over scan_reference as scan_reference_sd,
        count(baseline_value) over scan_reference as scan_reference_n,
        list(baseline_value) over scan_reference as scan_reference_runs,
        list({ 'v': judged_value, 'at': started_at }) over scan_window as scan_window_runs,
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
        scan_reference as (
            partition by env, figure, subject, series, baseline_key order by started_at, run_id
            rows between {{ 29 + scan_runs }} preceding and {{ scan_runs }} preceding
        ),
        scan_window as (
            partition by env, figure, subject, series, baseline_key order by started_at, run_id
            rows between {{ scan_runs - 1 }} preceding and current row
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

inversed as (
    select
        *,
        /* 1 / k of the long test (see k_long), where the reference can say it. */
        case when reference_n >= 3 then
            pow({{ min_change }} * abs(reference_median)
                / nullif({{ z_as_t(z_crit, 'reference_n - 1') }} * noise_sigma, 0), 2)
            - pi() / (2 * reference_n)
        end as long_inverse,
    from noise
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
            /* 1 / k = (the change in standard errors)² - π/2n: where that is not positive,
               no number of runs shows the change, and the test waits for k_max runs (an
               explicit case: DuckDB's greatest() ignores a NULL, which made it 3). */
            else coalesce(
                case when long_inverse > 0 then least(greatest(ceil(1 / long_inverse), {{ k }}), {{ k_max }}) end,
                {{ k_max }}
            )
        end::int as k_long,
    from inversed
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

scan_noise as (
    /* The scan's noise σ: of its own reference, capped as the test's is. */
    select
        *,
        case
            when scan_reference_mad > 0 then least(scan_reference_sd, 1.5 * 1.4826 * scan_reference_mad)
            else scan_reference_sd
        end as scan_sigma,
    from significant
),

scan_referenced as (
    /* The scan's reference level: the mean of its 30 runs, each clipped at scan_clip σ from
       their median. As robust as the median to a wild run, and its error is σ/√n on
       Gaussian and uniform noise alike, where the median's is √(π/2) and √3 times that (a
       median reference counted at π/2n let uniform noise alarm 0.67 % of nights). */
    select
        *,
        list_avg(list_transform(
            list_filter(scan_reference_runs, lambda x: x is not null),
            lambda x: greatest(least(x, scan_reference_median + {{ scan_clip }} * scan_sigma),
                scan_reference_median - {{ scan_clip }} * scan_sigma)
        )) as scan_reference_level,
    from scan_noise
),

scan_scored as (
    /* Each run of the scan's window in σ from the reference median, clipped at ±scan_clip:
       a heavy-tailed run weighs no more than that, the robust part the several-run test
       gets from leaving outliers out. */
    select
        *,
        list_transform(scan_window_runs, lambda r: greatest(least(
            (r.v - scan_reference_level) / nullif(scan_sigma, 0), {{ scan_clip }}), -{{ scan_clip }}))
            as scan_z,
    from scan_referenced
),

scan_lengths as (
    /* The lengths scanned (scan_lengths, those the window holds yet): a few, not every m
       from 2 to the window, so each spends a larger share of the false-alarm budget (the
       scores of neighbouring m are nearly the same test). */
    select
        *,
        list_filter({{ scan_lengths | list | sort }}, lambda m: m <= len(scan_z)) as scan_ms,
    from scan_scored
),

scan_sums as (
    /* The scan: for each length m, the mean z of the last m runs in standard errors of its
       difference from the reference level, √(1/m + 1/n) (the reference's error is shared by
       every run summed, so it is counted once, not m times). Position i is scan_ms[i]. */
    select
        *,
        list_transform(scan_ms, lambda m: list_sum(scan_z[-m:]) / m
            / sqrt(1 / m + 1 / scan_reference_n)) as scan_scores,
    from scan_lengths
),

scan_sided as (
    /* Tonight's scan: the largest score either way; its m is how many runs the change rests
       on (it began m runs ago). */
    select
        *,
        case when -list_min(scan_scores) >= list_max(scan_scores) then -1 else 1 end as scan_sign,
        greatest(-list_min(scan_scores), list_max(scan_scores)) as scan_score,
        scan_ms[case
            when -list_min(scan_scores) >= list_max(scan_scores)
                then list_position(scan_scores, list_min(scan_scores))
            else list_position(scan_scores, list_max(scan_scores))
        end] as scan_k,
    from scan_sums
),

scan_level as (
    select
        *,
        scan_k as scan_n,
        list_avg(list_transform(scan_window_runs[-scan_k:], lambda r: r.v)) as scan_value,
        scan_window_runs[-scan_k].at as scan_since,
        null::double as scan_p,  /* no p-value: its threshold is calibrated (bench/verdicts.py) */
    from scan_sided
),

scan_tested as (
    select
        *,
        (scan_value - scan_reference_level) / nullif(abs(scan_reference_level), 0) as scan_share,
    from scan_level
),

scan_met as (
    /* The scan is met at scan_threshold, a change of min_alarm_share, and a reference of
       min_baseline runs before its window (before: the several-run test alone). */
    select
        *,
        coalesce(
            scan_reference_n >= {{ min_baseline }} and scan_sigma > 0 and scan_score >= {{ scan_h }}
            and scan_k >= 2 and abs(scan_share) >= {{ min_alarm }} and sign(scan_share) = scan_sign,
            false
        ) as met_scan,
    from scan_tested
),

chosen as (
    /* The evidence of the test that was met (the several-run test first, short then long,
       then the scan), else of the long one; and what it was judged against. */
    select
        *,
        case
            when met_short or met_long then 'several-run' when met_scan then 'scan'
        end as fired_test,
        {% for col in ['k', 'n', 'value', 'since', 'share', 'score', 'p'] %}
        case
            when met_short then {{ col }}_short
            when not met_long and met_scan then scan_{{ col }}
            else {{ col }}_long
        end as chosen_{{ col }},
        {% endfor %}
        {% for col, scan_col in [('reference_median', 'scan_reference_level'),
            ('noise_sigma', 'scan_sigma'), ('reference_n', 'scan_reference_n')] %}
        case
            when not (met_short or met_long) and met_scan then {{ scan_col }} else {{ col }}
        end as test_{{ col }},
        {% endfor %}
    from scan_met
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
        coalesce(baseline_n >= {{ min_baseline }} and (met_short or met_long or met_scan), false)
            as confirmed,
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
        case
            when confirmed then recent_value - test_reference_median else judged_value - baseline_median
        end as moved_by,
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
),

{% set keys = ['env', 'figure', 'subject', 'series', 'baseline_key'] %}
{% set alarms = "('regression', 'improvement', 'changed')" %}
starts as (
    /* Where a change begins to be followed: the night the several-run test first said it,
       with what it was judged against that night (reference, noise, n: frozen), so that
       the reference taking in the changed runs night after night never fades it. */
    select
        {{ keys | join(', ') }}, started_at as start_at, run_id as start_run,
        verdict as hold_verdict, change_since as hold_since, test_reference_median as hold_reference,
        test_noise_sigma as hold_sigma, test_reference_n as hold_n,
        sign(recent_value - test_reference_median) as hold_sign, started_at as hold_said_at,
        fired_test as hold_test,
    from dated
    where first_night and not is_prior and test_reference_n >= 3 and test_noise_sigma is not null
    union all by name
    /* A change still standing at the series' last point before this batch: followed on. */
    select
        {{ keys | join(', ') }}, started_at as start_at, run_id as start_run,
        hold_verdict, hold_since, hold_reference, hold_sigma, hold_n, hold_sign, hold_said_at,
        hold_test,
    from (
        select * from prior
        qualify row_number() over (
            partition by {{ keys | join(', ') }} order by started_at desc, run_id desc
        ) = 1
    )
    where hold_reference is not null
),

followed_up as (
    /* Each change against every later point of its series: the runs since it began (of the
       last k_max), those within outlier_sigmas σ of their median. */
    select
        s.*, p.run_id, p.started_at,
        list_filter(p.recent_runs, lambda r: r.at >= s.hold_since) as since_runs,
    from starts as s
    inner join dated as p
        on p.env = s.env and p.figure = s.figure and p.subject = s.subject
        and p.series = s.series and p.baseline_key = s.baseline_key
        and p.started_at > s.start_at and not p.is_prior
),

followed_level as (
    select
        *,
        list_transform(list_filter(since_runs, lambda r: abs(r.v - list_aggregate(
            list_transform(since_runs, lambda q: q.v), 'median')) <= greatest(
                {{ outlier_sigmas }} * hold_sigma, {{ min_change }} * abs(hold_reference)
            )), lambda r: r.v) as held_values,
    from followed_up
),

followed_test as (
    select
        *,
        /* The runs since the change was said: new evidence, not the runs that said it. */
        list_filter(since_runs, lambda r: r.at > hold_said_at) as after_runs,
        len(since_runs) as held_k,
        len(held_values) as held_n,
        list_avg(held_values) as held_value,
        (list_avg(held_values) - hold_reference) / nullif(abs(hold_reference), 0) as held_share,
        (list_avg(held_values) - hold_reference)
            / nullif(hold_sigma * sqrt(1 / nullif(len(held_values), 0) + pi() / (2 * hold_n)), 0)
            as held_score,
    from followed_level
),

followed_p as (
    select
        *,
        case
            when held_value is null then null
            when hold_sigma = 0 then (held_value = hold_reference)::int::double
            else {{ p_two_sided(t_as_z('held_score', 'hold_n - 1')) }}
        end as held_p,
    from followed_test
),

held as (
    /* Still there: the same test, against the frozen reference, in the same direction. */
    select
        *,
        coalesce(
            held_n >= 2 and held_p <= {{ alpha }} and sign(held_share) = hold_sign
            and abs(held_share) >= {{ min_alarm }}
            /* and the runs since it was said lean its way (one-sided p <= 0.2): a false alarm
               rests on the runs that raised it, and the next ordinary runs end it */
            and (len(after_runs) = 0 or hold_sigma = 0 or hold_sign * (
                list_avg(list_transform(after_runs, lambda r: r.v)) - hold_reference
            ) / (hold_sigma * sqrt(1 / len(after_runs) + pi() / (2 * hold_n))) >= 0.8416),
            false
        ) as still,
    from followed_p
),

bounded as (
    /* A change stands from its first night until the first later night it is not there. */
    select
        s.*,
        (
            select min(h.started_at) from held as h
            where h.start_run = s.start_run and not h.still
                and h.env = s.env and h.figure = s.figure and h.subject = s.subject
                and h.series = s.series and h.baseline_key = s.baseline_key
        ) as end_at,
    from starts as s
),

accepted as (
    /* A change said again while the same change stands continues it (not a new one). */
    select b.* from bounded as b
    anti join bounded as c
        on c.env = b.env and c.figure = b.figure and c.subject = b.subject
        and c.series = b.series and c.baseline_key = b.baseline_key
        and c.hold_sign = b.hold_sign
        and c.start_at < b.start_at and (c.end_at is null or b.start_at < c.end_at)
),

covered as (
    /* The change each point stands in (the latest one begun before it and not over). */
    select
        p.env, p.figure, p.subject, p.run_id, a.start_run, a.hold_verdict, a.hold_since,
        a.hold_reference, a.hold_sigma, a.hold_n, a.hold_sign, a.hold_said_at, a.hold_test,
        h.held_value, h.held_k, h.held_n, h.held_share, h.held_score, h.held_p,
    from dated as p
    inner join accepted as a
        on a.env = p.env and a.figure = p.figure and a.subject = p.subject
        and a.series = p.series and a.baseline_key = p.baseline_key
        and a.start_at <= p.started_at and (a.end_at is null or p.started_at < a.end_at)
    left join held as h on h.start_run = a.start_run and h.run_id = p.run_id
        and h.env = p.env and h.figure = p.figure and h.subject = p.subject
        and h.series = p.series and h.baseline_key = p.baseline_key
    where not p.is_prior
    qualify row_number() over (
        partition by p.env, p.figure, p.subject, p.run_id order by a.start_at desc
    ) = 1
),

overlaid as (
    select
        d.* rename (verdict as test_verdict, change_since as test_change_since),
        c.start_run, c.hold_verdict, c.hold_since, c.hold_reference, c.hold_sigma, c.hold_n,
        c.hold_sign, c.hold_said_at, c.hold_test, c.held_value, c.held_k, c.held_n, c.held_share, c.held_score, c.held_p,
        /* A change said before tonight and still there (tonight's test alone may be quiet:
           its reference has taken in the changed runs), flagged nights excepted. */
        c.start_run is not null and c.start_run <> d.run_id and c.held_value is not null
            and (d.verdict not in {{ alarms }} and d.verdict <> 'environment changed'
                or d.verdict in {{ alarms }} and sign(d.moved_by) = c.hold_sign)
            as standing,
        /* Tonight's test quiet: the verdict and its evidence are the standing change's. */
        c.start_run is not null and c.start_run <> d.run_id and c.held_value is not null
            and d.verdict not in {{ alarms }} and d.verdict <> 'environment changed' as held_over,
    from dated as d
    left join covered as c
        on c.env = d.env and c.figure = d.figure and c.subject = d.subject and c.run_id = d.run_id
    where not d.is_prior
),

final as (
    select
        * exclude (recent_value, recent_k, recent_n, reference_median, reference_n, noise_sigma,
            noise_sigma_share, change_score, p_value, change_share, direction, first_night),
        case when held_over then hold_verdict else test_verdict end as verdict,
        case when standing then hold_since else test_change_since end as change_since,
        /* Tonight's evidence: of the standing change when there is one, else of the test. */
        case when held_over then held_value else recent_value end as recent_value,
        case when held_over then held_k else recent_k end as recent_k,
        case when held_over then held_n else recent_n end as recent_n,
        case when held_over then hold_reference else test_reference_median end as reference_median,
        case when held_over then hold_n else test_reference_n end as reference_n,
        case when held_over then hold_sigma else test_noise_sigma end as noise_sigma,
        case when held_over then hold_sigma else test_noise_sigma end
            / nullif(abs(case when held_over then hold_reference else test_reference_median end), 0)
            as noise_sigma_share,
        /* Which test says the change: the several-run test or the scan tonight; on a night
           only the standing change says it, the test that first said it. */
        case
            when held_over then hold_test
            when test_verdict in {{ alarms }} then fired_test
        end as verdict_test,
        case when held_over then held_score else change_score end as change_score,
        case when held_over then held_p else p_value end as p_value,
        case when held_over then held_share else change_share end as change_share,
        case
            when not held_over then direction
            when hold_sign > 0 and better = 'lower' or hold_sign < 0 and better = 'higher' then 'worse'
            when hold_sign < 0 and better = 'lower' or hold_sign > 0 and better = 'higher' then 'better'
        end as direction,
        /* "New tonight": first said tonight, not a standing change said again. */
        first_night and not standing as first_night,
    from overlaid
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
    verdict_test,  /* 'several-run' or 'scan': the test that said the change (first) */
    scan_score,  /* tonight's scan (the larger way), in standard errors; met at verdict_scan_threshold */
    /* the several-run test's own verdict and night, before a standing change is followed */
    test_verdict, test_change_since, standing,
    /* the standing change followed (what the next batch needs to follow it on) */
    hold_verdict, hold_since, hold_reference, hold_sigma, hold_n, hold_sign, hold_said_at, hold_test,
from final
order by started_at, run_id, env, figure, subject

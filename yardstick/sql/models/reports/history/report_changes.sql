/* What moved in an environment's latest full run, or could not be judged: one row per figure
   and subject, for the first screen of that environment's report (steady and new left out). */
select
    t.run_id, t.env, t.figure, t.subject, value, unit, nature, baseline_median, baseline_n,
    change_share, noise_band, noise_share, direction, verdict, first_night, standing, verdict_test,
    profile, series,
    recent_value, recent_n, reference_median, reference_n, noise_sigma_share, change_score,
    p_value, single_p_value, visible_change_share, change_since,
    /* The evidence in words, for the CLI and notifications (the reports say it in theirs). */
    case
        /* Which test said the change and since when, first: an operator paged by it reads
           whether it rests on the several-run test or on evidence summed night after night. */
        when verdict in ('regression', 'improvement', 'changed') and standing then printf(
            'standing since %s (said by the %s test): %+.1f %% over the last %d runs against the median of the %d before it'
            || ' (noise σ %.1f %%, %.1f σ of its error',
            strftime(change_since, '%Y-%m-%d'), coalesce(verdict_test, 'several-run'), change_share * 100,
            recent_n, reference_n, noise_sigma_share * 100, abs(change_score))
            /* the scan, said again tonight, has no p-value: its threshold is calibrated */
            || coalesce(printf(', p = %.2g', p_value), '') || ')'
        when verdict in ('regression', 'improvement', 'changed') and verdict_test = 'scan' then printf(
            'scan since %s: %+.1f %% over %d runs against the clipped mean of the %d before them'
            || ' (noise σ %.1f %%, %.1f σ of its error, threshold %g over up to %d runs)',
            strftime(change_since, '%Y-%m-%d'), change_share * 100, recent_n, reference_n,
            noise_sigma_share * 100, abs(change_score), {{ var('verdict_scan_threshold') }},
            {{ var('verdict_scan_runs') }})
        when verdict in ('regression', 'improvement', 'changed') then printf(
            'several-run test since %s: %+.1f %% over %d runs against the median of %d before'
            || ' (noise σ %.1f %%, %.1f σ of its error, p = %.2g)',
            strftime(change_since, '%Y-%m-%d'), change_share * 100, recent_n, reference_n,
            noise_sigma_share * 100, abs(change_score), p_value)
        when verdict = 'unconfirmed' then printf(
            'this run alone %+.1f %% (p = %.2g); the last %d runs together are not a change yet',
            change_share * 100, single_p_value, {{ var('verdict_recent_runs') }})
        when verdict = 'noisy' then printf(
            'changes under %.0f %% cannot be seen in this series (noise σ %.1f %%, %d runs of reference)',
            ceil(visible_change_share * 100), noise_sigma_share * 100, reference_n)
    end as evidence,
    /* What else moved with a regression or improvement (report_change_causes). */
    c.causes, c.cause_list,
from {{ ref('changes') }} as t
left join {{ ref('report_change_causes') }} as c
    on c.env = t.env and c.figure = t.figure and c.subject = t.subject and c.run_id = t.run_id
where verdict not in ('steady', 'new')
order by
    case verdict
        when 'regression' then 0 when 'improvement' then 1 when 'changed' then 2
        when 'environment changed' then 3 when 'unconfirmed' then 4 else 5
    end,
    abs(change_share) desc nulls last, t.figure, t.subject

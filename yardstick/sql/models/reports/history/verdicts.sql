/* Tonight's verdict per environment: its latest full run's figures counted by verdict, and how
   many could be judged (enough comparable history, and noise low enough to see a change of
   verdict_min_change_share). The first lines of every report and the Prefect event read it,
   with the settings they speak of. */
select
    l.env,
    l.run_id,
    l.started_at,
    l.profile,
    /* a missing site's environment: nothing measured, the reason instead of a verdict */
    case when l.status = 'missing' then l.error end as missing_reason,
    count(c.figure) as figures,
    count(c.figure) filter (where c.verdict = 'regression') as regressions,
    count(c.figure) filter (where c.verdict = 'regression' and c.first_night) as new_regressions,
    /* said on an earlier night and still there: reported until it returns or is re-baselined */
    count(c.figure) filter (where c.verdict = 'regression' and c.standing) as standing_regressions,
    count(c.figure) filter (where c.verdict = 'improvement') as improvements,
    count(c.figure) filter (where c.verdict = 'changed') as changed,
    count(c.figure) filter (where c.verdict = 'unconfirmed') as unconfirmed,
    count(c.figure) filter (where c.verdict = 'environment changed') as environment_changed,
    count(c.figure) filter (where c.verdict = 'noisy') as noisy,
    count(c.figure) filter (where c.verdict = 'steady') as steady,
    count(c.figure) filter (where c.verdict = 'new') as new,
    count(c.figure) filter (where c.series_started) as new_series,
    /* judged: compared with enough history in its own series and able to see the move asked */
    count(c.figure) filter (
        where c.verdict in ('regression', 'improvement', 'changed', 'unconfirmed', 'steady')
    ) as judged,
    case
        when any_value(l.status) = 'missing' then 'missing'  /* one run per row: its status */
        when count(c.figure) filter (where c.verdict = 'regression') > 0 then 'regression'
        when count(c.figure) filter (where c.verdict = 'environment changed') > 0
            then 'environment changed'
        when count(c.figure) filter (where c.verdict = 'unconfirmed') > 0 then 'unconfirmed'
        when count(c.figure) filter (where c.verdict in ('improvement', 'changed')) > 0
            then 'improvement'
        when count(c.figure) filter (where c.verdict in ('steady', 'noisy')) > 0
            then 'steady'
        else 'not judged'
    end as verdict,
    /* the settings the counts speak of (dbt vars): "new" = fewer comparable runs than this */
    {{ var('verdict_min_baseline') }} as min_baseline_runs,
    /* "noisy" = this change would go unseen */
    {{ var('verdict_min_change_share') }}::double as min_change_share,
from {{ ref('latest_full_runs') }} as l
left join {{ ref('changes') }} as c on c.env = l.env and c.run_id = l.run_id
group by all
order by l.env

/* What moved in an environment's latest full run, or could not be judged: one row per figure
   and subject, for the first screen of that environment's report (steady and new left out). */
select
    run_id, env, figure, subject, value, unit, nature, baseline_median, baseline_n,
    change_share, noise_band, noise_share, direction, verdict, first_night, profile, series,
from {{ ref('changes') }}
where verdict not in ('steady', 'new')
order by
    case verdict
        when 'regression' then 0 when 'improvement' then 1 when 'changed' then 2
        when 'environment changed' then 3 when 'unconfirmed' then 4 else 5
    end,
    abs(change_share) desc nulls last, figure, subject

/* What moved beyond noise in an environment's latest full run: one row per figure and
   subject, for that environment's report. */
select
    run_id, env, figure, subject, value, unit, nature, baseline_median, baseline_n,
    change_share, verdict,
from {{ ref('changes') }}
where verdict not in ('steady', 'new')
order by verdict, figure, subject

/* Tonight's verdict: one row per environment, figure and subject of each environment's latest
   full run, as figure_trends judged it (see there). An update first removes the verdicts of
   every environment whose latest full run is in its batch (that run may hold no figure at
   all: nothing is then "latest"), then appends that run's verdicts. */
{{ config(
    incremental_strategy='append',
    pre_hook="{{ forget_envs_of_batch(this) }}",
) }}

with latest_runs as (
    /* Latest full runs that this batch brought. */
    select l.run_id, l.env
    from {{ ref('latest_full_runs') }} as l
    semi join {{ source('lake', 'batch_runs') }} as b on b.run_id = l.run_id and b.env = l.env
)

select
    t.env, t.figure, t.subject, t.run_id, t.started_at,
    t.judged_value as value,  /* the median of the run's repetitions: what was judged */
    t.unit, t.nature, t.better,
    t.baseline_median, t.baseline_n, t.change_share, t.noise_band, t.noise_share,
    t.environment_changed, t.redis_version, t.profile, t.series, t.series_started,
    t.previous_profile, t.direction, t.verdict, t.first_night,
    t.standing,  /* said before tonight and still there, against the reference before it */
    t.verdict_test,  /* 'several-run' or 'scan': the test that said the change */
    /* the evidence: the recent level, the runs it rests on, the reference, the noise, the
       test's score and p-value, the smallest visible change, the night the change began */
    t.recent_value, t.recent_n, t.reference_median, t.reference_n, t.noise_sigma,
    t.noise_sigma_share, t.change_score, t.p_value, t.single_p_value, t.visible_change_share,
    t.change_since,
from {{ ref('figure_trends') }} as t
semi join latest_runs as l on l.run_id = t.run_id and l.env = t.env
order by t.env, t.figure, t.subject

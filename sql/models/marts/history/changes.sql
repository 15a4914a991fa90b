/* The verdict on each environment's latest full run, one row per environment, figure and
   subject. An update first removes the verdicts of every environment whose latest full run is
   in its batch (that run may hold no figure at all: nothing is then "latest"), then appends
   that run's verdicts. */
{{ config(
    incremental_strategy='append',
    pre_hook="
        {% if is_incremental() %}
        delete from {{ this }} where env in (
            select l.env from {{ ref('latest_full_runs') }} as l
            semi join {{ source('lake', 'batch_runs') }} as b
                on b.run_id = l.run_id and b.env = l.env
        )
        {% endif %}
    ",
) }}

with latest_runs as (
    /* Latest full runs that this batch brought. */
    select l.run_id, l.env
    from {{ ref('latest_full_runs') }} as l
    semi join {{ source('lake', 'batch_runs') }} as b on b.run_id = l.run_id and b.env = l.env
),

latest as (
    select t.*
    from {{ ref('figure_trends') }} as t
    semi join latest_runs as l on l.run_id = t.run_id and l.env = t.env
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
order by env, figure, subject

/* State for figure_trends: the last 37 points of each comparable series (environment, figure,
   subject, series, baseline key), enough for its 31-run confirming baseline, its 7-run rolling
   line and the verdict of its latest point. An update replaces the tails of the figures its
   batch extends. */
{{ config(incremental_strategy='delete+insert', unique_key=['env', 'figure', 'subject']) }}
-- depends_on: {{ ref('figure_trends') }}

with batch_points as (
    select
        t.env, t.figure, t.subject, t.run_id, t.started_at, t.value, t.judged_value,
        t.profile, t.series, t.baseline_key, t.verdict,
    from {{ ref('figure_trends') }} as t
    semi join {{ source('lake', 'batch_runs') }} as b on b.run_id = t.run_id and b.env = t.env
),

prior as (
    {% if is_incremental() %}
    select
        t.env, t.figure, t.subject, t.run_id, t.started_at, t.value, t.judged_value,
        t.profile, t.series, t.baseline_key, t.verdict,
    from {{ this }} as t
    semi join (select distinct env, figure, subject from batch_points) as c
        on c.env = t.env and c.figure = t.figure and c.subject = t.subject
    {% else %}
    select * from batch_points where false
    {% endif %}
),

points as (
    select * from prior
    union all
    select * from batch_points
)

select * from points
qualify row_number() over (
    partition by env, figure, subject, series, baseline_key order by started_at desc, run_id desc
) <= 37

/* State for figure_trends: the last 30 + max(k, k_max, w, 7) points of each comparable series
   (environment, figure, subject, series, baseline key; k, k_max and w = verdict_recent_runs,
   verdict_max_recent_runs and verdict_scan_runs): enough for its reference (the 30 runs
   before the last k), the scan's window and the 30 runs before it, its recent runs, its
   7-run rolling line, the verdict and change night of its latest point, and
   the change that point stands in (hold_*: followed on against its frozen reference).
   An update replaces the tails of the figures its batch extends. */
{{ config(incremental_strategy='delete+insert', unique_key=['env', 'figure', 'subject']) }}
-- depends_on: {{ ref('figure_trends') }}

with batch_points as (
    select
        t.env, t.figure, t.subject, t.run_id, t.started_at, t.value, t.judged_value,
        t.profile, t.series, t.baseline_key, t.verdict, t.change_since, t.saturated,
        t.test_verdict, t.test_change_since, t.hold_verdict, t.hold_since, t.hold_reference,
        t.hold_sigma, t.hold_n, t.hold_sign, t.hold_said_at, t.hold_test,
    from {{ ref('figure_trends') }} as t
    semi join {{ source('lake', 'batch_runs') }} as b on b.run_id = t.run_id and b.env = t.env
),

prior as (
    {% if is_incremental() %}
    select
        t.env, t.figure, t.subject, t.run_id, t.started_at, t.value, t.judged_value,
        t.profile, t.series, t.baseline_key, t.verdict, t.change_since, t.saturated,
        t.test_verdict, t.test_change_since, t.hold_verdict, t.hold_since, t.hold_reference,
        t.hold_sigma, t.hold_n, t.hold_sign, t.hold_said_at, t.hold_test,
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
) <= {{ 30 + [var('verdict_recent_runs'), var('verdict_max_recent_runs'), var('verdict_scan_runs'), 7] | max }}

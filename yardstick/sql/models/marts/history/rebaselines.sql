/* Series declared the new normal: one row per declaration (environment, figure, subject - ''
   for every subject - and the day declared), from the first run that landed it, with who and
   why. figure_trends starts the series' baseline again from that run on (a standing change
   is no longer reported; the series is judged again once verdict_min_baseline runs are in). */
with landed as (
    select
        r.env, r.figure, r.subject, r.declared, r.declared_by, r.why, r.run_id, s.started_at,
    from {{ ref('stg_rebaselines') }} as r
    inner join {{ ref('stg_runs_batch') }} as s on s.run_id = r.run_id and s.env = r.env
),

first_landed as (
    select * from landed
    qualify row_number() over (
        partition by env, figure, subject, declared order by started_at, run_id
    ) = 1
)

select f.* from first_landed as f
{% if is_incremental() %}
    anti join {{ this }} as t
        on t.env = f.env and t.figure = f.figure and t.subject = f.subject
        and t.declared = f.declared
{% endif %}

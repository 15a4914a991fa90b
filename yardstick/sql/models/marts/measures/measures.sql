/* The long table every family feeds: one row per run, environment, figure, subject and window
   (window_idx null: the run-level value; other rows are its repetitions, from which n/min/
   median/max are taken). Collections (profile 'collect', every few minutes) are not figures:
   their rows stay in their families' own marts. For a run whose detail retention dropped,
   the family's figures come from what the lake kept (stg_retained_measures), not from what
   is left of its raw rows. */
{% set families = measure_families() %}

with family_measures as (
    {% for family in families %}
    select run_id, env, figure, subject, window_idx, value, samples,
    from {{ ref('measures_' ~ family) }}
    {% if not loop.last %}union all{% endif %}
    {% endfor %}
),

retained as (
    select * from {{ ref('stg_retained_measures') }}
),

retained_families as (
    select distinct run_id, env, family from retained
),

computed as (
    select m.*,
    from family_measures as m
    left join {{ ref('figure_catalog') }} as c on c.figure = m.figure
    anti join retained_families as k
        on k.run_id = m.run_id and k.env = m.env and k.family = c.family
),

kept as (
    select * from computed
    union all
    select run_id, env, figure, subject, window_idx, value, samples, from retained
),

full_runs as (
    select run_id, env from {{ ref('stg_runs_batch') }}
    where {{ is_full_run('profile') }}
)

select
    m.run_id,
    m.env,
    m.figure,
    coalesce(m.subject, '') as subject,  /* what the figure is about: a cell, a command ... */
    m.window_idx,
    m.value,
    m.samples,                            /* raw samples behind the value, when known */
from kept as m
semi join full_runs as r on r.run_id = m.run_id and r.env = m.env

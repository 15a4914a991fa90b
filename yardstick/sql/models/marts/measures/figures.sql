/* Figures: one row per run, environment, figure and subject, with its nature and, when it was
   repeated (windows, repetitions), n/min/median/max and the spread stdev ÷ median. Reads only
   the measures of this update's batch. */
with batch_measures as (
    {{ in_batch(ref('measures')) }}
),

run_level as (
    select * from batch_measures where window_idx is null
),

repeats as (
    select
        run_id, env, figure, subject,
        count(value) as n,
        min(value) as min_value,
        median(value) as median_value,
        max(value) as max_value,
        /* Ordered: a float aggregate combined across threads in varying order would differ
           in its last bits from one build to the next. */
        stddev_samp(value order by window_idx) / nullif(abs(median(value)), 0) as spread,
    from batch_measures
    where window_idx is not null and value is not null
    group by run_id, env, figure, subject
),

joined as (
    select
        r.run_id,
        r.env,
        runs.started_at,
        c.family,
        c.position,
        r.figure,
        r.subject,
        r.value,
        c.unit,
        c.nature,
        c.not_transferable_because,
        c.better,
        c.description,
        coalesce(p.n, 1) as n,
        coalesce(p.min_value, r.value) as min_value,
        coalesce(p.median_value, r.value) as median_value,
        coalesce(p.max_value, r.value) as max_value,
        p.spread,
        /* Repetitions spreading more than 10 % (stdev ÷ median): read with care. */
        coalesce(p.spread > 0.10, false) as noisy,
        r.samples,
        /* What was asked: the run's profile and the digest of the settings the family ran
           with (null for runs landed before digests were kept). */
        runs.profile,
        st.params_digest,
    from run_level as r
    join {{ ref('figure_catalog') }} as c on c.figure = r.figure
    left join repeats as p
        on p.run_id = r.run_id and p.env = r.env and p.figure = r.figure
        and p.subject = r.subject
    left join {{ ref('stg_runs_batch') }} as runs on runs.run_id = r.run_id and runs.env = r.env
    left join {{ ref('stg_steps_batch') }} as st
        on st.run_id = r.run_id and st.env = r.env and st.family = c.family
    where r.value is not null
)

select * from joined
order by env, started_at, run_id, position, figure, subject

/* Whether a run's absolute figures were taken on a saturated host: one row per run and
   environment. Saturated when any family's load per core (family_loads: other processes'
   runnable threads per core, the prober's own tree left out) rose above
   var('saturated_load_per_core', 1.0); a run landed without load samples (before the
   sampling, or a run whose families all failed) is not sampled and counted as not
   saturated, so it stays a baseline as it was. Verdicts leave saturated runs out of
   baselines. */
with families as (
    {{ in_batch(ref('family_loads')) }}
),

per_run as (
    select
        run_id,
        env,
        count(*) as families_sampled,
        max(load_per_core) as load_per_core_max,
        -- Ties broken by name: an incremental update and a rebuild must agree.
        first(family order by load_per_core desc nulls last, family) as busiest_family,
        max(busy_share_max) as busy_share_max,
        max(run_queue_max) as run_queue_max,
        max(load_1m_max) as load_1m_max,
        any_value(cores) as cores,
        bool_or(on_server_host) as on_server_host,
        string_agg(family, ', ' order by first_sampled_at, family) filter (where saturated)
            as saturated_families,
    from families
    group by run_id, env
)

select
    r.run_id,
    r.env,
    p.run_id is not null as load_sampled,
    coalesce(p.load_per_core_max > {{ var('saturated_load_per_core', 1.0) }}, false)
        as saturated,
    p.load_per_core_max,
    {{ var('saturated_load_per_core', 1.0) }}::double as saturation_threshold_per_core,
    p.busiest_family,
    p.saturated_families,
    p.families_sampled,
    p.busy_share_max,
    p.run_queue_max,
    p.load_1m_max,
    p.cores,
    p.on_server_host,
from {{ ref('stg_runs_batch') }} as r
left join per_run as p on p.run_id = r.run_id and p.env = r.env

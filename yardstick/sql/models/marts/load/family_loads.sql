/* How loaded the prober's machine was while each family ran: one row per run, environment and
   family. Load per core is the mean run queue of everything but the prober's own process
   tree (its benchmark children, an embedded server: the measurement's own load, the same
   every night), divided by the cores: it answers within a second, where the 1-minute load
   average (kept beside it) lags a minute. Above var('saturated_load_per_core', 1.0) more
   threads of other processes wanted a CPU than there were cores, so the family's absolute
   figures were taken on a saturated host. */
with samples as (
    select * from {{ ref('stg_family_load') }}
),

per_family as (
    select
        run_id,
        env,
        family,
        count(*) as samples,
        min(sampled_at) as first_sampled_at,
        max(sampled_at) as last_sampled_at,
        any_value(cores) as cores,
        bool_or(on_server_host) as on_server_host,
        /* Time-weighted over the intervals; ordered so every build gives the same bits. */
        sum(busy_share * interval_s order by sample_idx)
            / nullif(sum(interval_s order by sample_idx) filter (where busy_share is not null), 0)
            as busy_share_mean,
        max(busy_share) as busy_share_max,
        avg(run_queue) as run_queue_mean,
        max(run_queue) as run_queue_max,
        avg(coalesce(own_running, 0)) as own_running_mean,
        /* Other processes' threads running or waiting for a CPU. */
        avg(greatest(run_queue - coalesce(own_running, 0), 0)) as other_run_queue_mean,
        max(load_1m) as load_1m_max,
    from samples
    group by run_id, env, family
),

judged as (
    select
        *,
        other_run_queue_mean / cores as load_per_core,
        other_run_queue_mean / cores > {{ var('saturated_load_per_core', 1.0) }} as saturated,
        {{ var('saturated_load_per_core', 1.0) }}::double as saturation_threshold_per_core,
    from per_family
)

select * from judged

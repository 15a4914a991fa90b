/* One row per environment, server run, latency event and second (LATENCY HISTORY samples
   recur across collections: each is kept once, with the first run that read it). Samples
   taken while a scratch experiment ran are the tool's. */
with fresh as (
    select env, server_run_id, event, sampled_at, max(latency_ms) as latency_ms,
           min(run_id) as first_run_id,
    from {{ ref('stg_latency_history') }}
    group by env, server_run_id, event, sampled_at
),

{% if is_incremental() %}
earlier as (
    /* Samples an earlier update kept: no older than the batch's oldest sample (appended in
       time order, DuckDB skips older row groups by their zone maps). */
    select env, server_run_id, event, sampled_at,
    from {{ this }}
    where sampled_at >= (select min(sampled_at) from fresh)
),
{% endif %}

deduped as (
    select c.*
    from fresh as c
    {% if is_incremental() %}
    anti join earlier as e
        on e.env = c.env and e.server_run_id = c.server_run_id and e.event = c.event
        and e.sampled_at = c.sampled_at
    {% endif %}
)

select
    d.*,
    /* A second of a scratch experiment (one second of slack for clock rounding). */
    exists(
        select 1 from {{ ref('experiment_spans') }} as s
        where s.server_run_id = d.server_run_id  /* any environment on that server */
            and d.sampled_at between s.started_at - interval 1 second
                and s.finished_at + interval 1 second
    ) as measurement_caused,
from deduped as d

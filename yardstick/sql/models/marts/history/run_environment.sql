/* One row per environment per run: the facts that decide whether two points may be compared,
   and where they changed. Runs without a fingerprint (collections, unreachable servers)
   inherit the segment of the last run that had one, so their absolutes are compared within
   the right environment. The last fingerprinted run of each environment before this batch
   comes from the state model run_environment_tail. */
{% set prior = prior_relation('run_environment_tail') if is_incremental() else none %}

with prior as (
    /* Each environment's last fingerprinted run before this batch, with its segment. */
    {% if is_incremental() and prior %}
    select
        run_id, env, started_at, server_product, server_version, redis_version, server_cores,
        server_cpu_model, transport, sentinel_master_address, segment,
    from {{ prior }}
    {% else %}
    select
        null::varchar as run_id, null::varchar as env, null::timestamptz as started_at,
        null::varchar as server_product, null::varchar as server_version,
        null::varchar as redis_version, null::int as server_cores,
        null::varchar as server_cpu_model, null::varchar as transport,
        null::varchar as sentinel_master_address, null::bigint as segment,
    where false
    {% endif %}
),

runs as (
    select r.run_id, r.env, r.started_at, r.status, r.profile,
    from {{ ref('stg_runs_batch') }} as r
),

facts as (
    select
        r.run_id, r.env, r.started_at,
        e.server_product, e.server_version, e.redis_version, e.server_cores,
        e.server_cpu_model, e.transport, e.prober_load_1m,
        /* A Sentinel-managed master's address as the Sentinels named it (null for every
           other environment: never the URL, which an embedded server changes each run). */
        e.sentinel_master_address,
        /* A failover, a node added or removed, slots moving (marts/topology). */
        coalesce(t.topology_changed, false) as topology_changed,
    from runs as r
    join {{ ref('env_facts') }} as e on e.run_id = r.run_id and e.env = r.env
    left join {{ ref('topology_changes') }} as t on t.run_id = r.run_id and t.env = r.env
    /* runs that reached the server */
    where coalesce(e.server_version, e.redis_version) is not null
),

fingerprinted as (
    select
        run_id, env, started_at, server_product, server_version, redis_version, server_cores,
        server_cpu_model, transport, sentinel_master_address,
        null::double as prober_load_1m, segment as prior_segment, true as is_prior,
        false as topology_changed,
    from prior
    union all
    select
        run_id, env, started_at, server_product, server_version, redis_version, server_cores,
        server_cpu_model, transport, sentinel_master_address,
        prober_load_1m, null, false, topology_changed,
    from facts
),

failovers as (
    select
        *,
        /* The Sentinels named another master than at the previous run: a failover, another
           server behind the same name. Only where both runs have an address. */
        lag(sentinel_master_address) over w as previous_master_address,
        coalesce(
            sentinel_master_address <> lag(sentinel_master_address) over w, false
        ) as sentinel_failover,
    from fingerprinted
    window w as (partition by env order by started_at, run_id)
),

compared as (
    select
        *,
        /* Another server product or version (the product's own: Valkey 8.1.8 answers
           redis_version 7.2.4 whatever its release), CPU, core count, transport or, for a
           Sentinel-managed master, another master after a failover makes another
           environment: absolutes from before do not describe it. */
        lag(run_id) over w is not null and (
            server_product is distinct from lag(server_product) over w
            or server_version is distinct from lag(server_version) over w
            or redis_version is distinct from lag(redis_version) over w
            or server_cores is distinct from lag(server_cores) over w
            or server_cpu_model is distinct from lag(server_cpu_model) over w
            or transport is distinct from lag(transport) over w
            or sentinel_failover
            or topology_changed
        ) as environment_changed,
    from failovers
    window w as (partition by env order by started_at, run_id)
),

segmented as (
    select
        *,
        /* The prior row carries the count so far; each change in the batch adds one. */
        sum(
            case when is_prior then prior_segment else environment_changed::int end
        ) over (partition by env order by started_at, run_id) as segment,
    from compared
),

timeline as (
    /* Every run of the batch, after the prior fingerprinted run it may inherit from. */
    select
        r.run_id, r.env, r.started_at, r.status, r.profile,
        s.server_product,
        s.server_version,
        s.redis_version,
        s.server_cores,
        s.server_cpu_model,
        s.transport,
        s.prober_load_1m,
        s.sentinel_master_address, s.previous_master_address, s.sentinel_failover,
        s.environment_changed, s.segment, false as is_prior,
    from runs as r
    left join segmented as s on s.run_id = r.run_id and s.env = r.env and not s.is_prior
    union all
    select
        run_id, env, started_at, null, null,
        null, null, null, null, null, null, null,
        null, null, null,
        null, segment, true,
    from segmented
    where is_prior
),

inherited as (
    select
        run_id, env, started_at, status, profile,
        server_product, server_version, redis_version, server_cores, server_cpu_model,
        transport, prober_load_1m,
        sentinel_master_address, previous_master_address,
        coalesce(sentinel_failover, false) as sentinel_failover,
        coalesce(environment_changed, false) as environment_changed,
        coalesce(
            segment,
            last_value(segment ignore nulls) over (
                partition by env order by started_at, run_id
                rows between unbounded preceding and current row
            ),
            0
        ) as segment,
        is_prior,
    from timeline
)

select
    run_id, env, started_at, status, profile,
    server_product, server_version, redis_version, server_cores, server_cpu_model, transport,
    prober_load_1m,
    sentinel_master_address,  /* a Sentinel-managed master's address (null for others) */
    previous_master_address,
    sentinel_failover,        /* the master moved since the previous run: a failover */
    environment_changed,
    segment::bigint as segment,  /* environment number: absolutes compare only within one */
from inherited
where not is_prior
order by env, started_at, run_id

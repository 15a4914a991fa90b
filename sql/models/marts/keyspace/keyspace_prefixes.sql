/* One row per run, environment and key prefix: counts and bytes from MEMORY USAGE, the
   prefix's share of used_memory, and the projection "k times the keys of this prefix" from
   the sampled mean. When the scan stopped at its budget, counts and sums are scaled by
   DBSIZE ÷ sampled. */
with keys as (
    select * from {{ ref('stg_keyspace_keys') }}
),

scans as (
    {{ in_batch(ref('keyspace_scan_costs')) }}
),

encodings as (
    /* "hashtable 80 %, listpack 20 %": how the prefix's keys are stored. */
    select
        run_id,
        env,
        prefix,
        string_agg(
            coalesce(type, '?') || ' ' || coalesce(encoding, '?') || ' '
                || round(100.0 * n / total)::int || ' %',
            ', ' order by n desc
        ) as encodings,
    from (
        select
            run_id, env, prefix, type, encoding, count(*) as n,
            sum(count(*)) over (partition by run_id, env, prefix) as total,
        from keys
        group by run_id, env, prefix, type, encoding
    )
    group by run_id, env, prefix
),

per_prefix as (
    select
        run_id,
        env,
        prefix,
        count(*) as keys_sampled,
        avg(memory_usage_bytes) as mean_bytes,
        median(memory_usage_bytes) as median_bytes,
        max(memory_usage_bytes) as max_bytes,
        coalesce(sum(memory_usage_bytes), 0) as total_bytes,
        max(elements) filter (type <> 'string') as max_elements,
    from keys
    group by run_id, env, prefix
)

select
    p.*,
    e.encodings,
    c.scale,
    c.coverage_share,
    c.projection_factor,
    c.stop_reason,
    p.keys_sampled * c.scale as keys_estimated,
    p.total_bytes * c.scale / nullif(c.used_memory_bytes, 0) as share_of_used_memory,
    c.projection_factor * p.keys_sampled * c.scale * p.mean_bytes as projection_bytes,
from per_prefix as p
join scans as c on c.run_id = p.run_id and c.env = p.env
left join encodings as e on e.run_id = p.run_id and e.env = p.env and e.prefix = p.prefix

/* One row per run, environment and key prefix: counts and bytes from MEMORY USAGE, the
   prefix's share of used_memory, and the projection "k times the keys of this prefix" from
   the sampled mean. When the scan stopped at its budget, counts and sums are scaled by
   DBSIZE ÷ sampled. Group by only: the keys are read in two aggregates (by encoding, by
   prefix), never sorted or windowed one by one. */
with keys as not materialized (
    /* Read in place by each aggregate below: a materialized copy of every key (DuckDB's
       default for a CTE read twice) costs more than reading them twice. */
    select * from {{ ref('stg_keyspace_keys') }}
),

scans as (
    {{ in_batch(ref('keyspace_scan_costs')) }}
),

encoding_counts as (
    /* Grouped before the scan's row is joined: a join per group, not per key. */
    select run_id, env, prefix, type, encoding, count(*) as n,
    from keys
    group by run_id, env, prefix, type, encoding
),

encoding_groups as (
    /* Keys by type and encoding. Since types come from typed SCAN pages, OBJECT ENCODING is
       read for a sample of the keys (and the top keys): the shares are then over the keys
       whose encoding was read, and say how many those are. Before, every key's was asked
       (an encoding that could not be read shows as '?'). */
    select
        g.run_id,
        g.env,
        g.prefix,
        g.type,
        g.encoding,
        g.n,
        g.encoding is not null or coalesce(s.encoding_every, 1) = 1 as counted,
        sum(g.n) over (partition by g.run_id, g.env, g.prefix) as keys_all,
        sum(case when g.encoding is not null or coalesce(s.encoding_every, 1) = 1
            then g.n else 0 end) over (partition by g.run_id, g.env, g.prefix) as keys_read,
    from encoding_counts as g
    join scans as s on s.run_id = g.run_id and s.env = g.env
),

encodings as (
    /* "hash hashtable 80 %, hash listpack 20 %": how the prefix's keys are stored; with
       " (encodings of 12 of 340 keys read)" where only a sample's were read. */
    select
        run_id,
        env,
        prefix,
        coalesce(
            string_agg(
                coalesce(type, '?') || ' ' || coalesce(encoding, '?') || ' '
                    || round(100.0 * n / nullif(keys_read, 0))::int || ' %',
                ', ' order by n desc, type, encoding
            ) filter (where counted),
            'not read'
        ) || case
            when max(keys_read) < max(keys_all)
                then ' (encodings of ' || max(keys_read) || ' of ' || max(keys_all)
                    || ' keys read)'
            else ''
        end as encodings,
    from encoding_groups
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

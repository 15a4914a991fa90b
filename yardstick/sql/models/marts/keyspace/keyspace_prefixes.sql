/* One row per run, environment and key prefix: counts and bytes from MEMORY USAGE, the
   prefix's share of used_memory, and the projection "k times the keys of this prefix" from
   the sampled mean. When the scan stopped at its budget, counts and sums are scaled by
   DBSIZE ÷ sampled. Aggregates only, the keys read once: everything below comes from their
   histogram by prefix, type, encoding and size (MEMORY USAGE answers in allocator size
   classes: a prefix of 200,000 keys has a few dozen sizes), the median too, never from a
   sort of the keys (bench/keyspace_models.py measures it against a plain scan). */
with histogram as (
    select
        run_id,
        env,
        prefix,
        type,
        encoding,
        memory_usage_bytes,
        count(*) as n,
        max(elements) as max_elements,
    from {{ ref('stg_keyspace_keys') }}
    group by run_id, env, prefix, type, encoding, memory_usage_bytes
),

scans as (
    {{ in_batch(ref('keyspace_scan_costs')) }}
),

encoding_counts as (
    select run_id, env, prefix, type, encoding, sum(n)::bigint as n,
    from histogram
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

size_positions as (
    /* Each known size with the number of keys up to it: the window runs over a prefix's
       distinct sizes, not its keys. */
    select
        *,
        sum(n) over (
            partition by run_id, env, prefix order by memory_usage_bytes
            rows between unbounded preceding and current row
        ) as keys_upto,
        sum(n) over (partition by run_id, env, prefix) as keys_known,
    from (
        select run_id, env, prefix, memory_usage_bytes, sum(n) as n,
        from histogram
        where memory_usage_bytes is not null
        group by run_id, env, prefix, memory_usage_bytes
    )
),

medians as (
    /* median(): the middle size, or the mean of the two middle ones (lo + 0.5 (hi - lo), as
       DuckDB's median interpolates). */
    select
        run_id,
        env,
        prefix,
        min(memory_usage_bytes) filter (where keys_upto > (keys_known - 1) // 2) as lo,
        min(memory_usage_bytes) filter (where keys_upto > keys_known // 2) as hi,
    from size_positions
    group by run_id, env, prefix
),

per_prefix as (
    select
        run_id,
        env,
        prefix,
        sum(n)::bigint as keys_sampled,
        sum(memory_usage_bytes::hugeint * n)::double
            / nullif(sum(n) filter (where memory_usage_bytes is not null), 0) as mean_bytes,
        max(memory_usage_bytes) as max_bytes,
        coalesce(sum(memory_usage_bytes::hugeint * n), 0) as total_bytes,
        max(max_elements) filter (where type <> 'string') as max_elements,
    from histogram
    group by run_id, env, prefix
)

select
    p.run_id,
    p.env,
    p.prefix,
    p.keys_sampled,
    p.mean_bytes,
    m.lo::double + 0.5 * (m.hi::double - m.lo::double) as median_bytes,
    p.max_bytes,
    p.total_bytes,
    p.max_elements,
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
left join medians as m on m.run_id = p.run_id and m.env = p.env and m.prefix = p.prefix

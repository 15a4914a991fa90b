/* Key space by prefix (subject = the prefix): counts and bytes from MEMORY USAGE, each
   prefix's share of used_memory and what no key accounts for, and the projection "k times
   the keys of this prefix" as an estimate from the sampled mean, with its sample size.
   When the scan stopped at its budget, counts and sums are scaled by DBSIZE ÷ sampled. */
insert into figure_catalog values
    ('ks_keys_sampled', 'keyspace', 330, 'keys', 'absolute',
     'this server''s data at the time of the scan', null,
     'keys the scan read (TYPE, MEMORY USAGE, encoding, elements)'),
    ('ks_coverage_share', 'keyspace', 331, 'share', 'ratio', null, 'higher',
     'keys read ÷ DBSIZE: 1 when the scan completed, less when its budget stopped it'),
    ('ks_attributed_share', 'keyspace', 332, 'share', 'ratio', null, null,
     'sum of MEMORY USAGE (scaled to the whole database) ÷ used_memory'),
    ('ks_unattributed_share', 'keyspace', 333, 'share', 'ratio', null, null,
     'share of used_memory no key''s MEMORY USAGE accounts for (key table, buffers, other databases)'),
    ('ks_busy_share', 'keyspace', 334, 'share', 'ratio', null, 'lower',
     'server time in the scan''s own commands (commandstats difference) ÷ wall time'),
    ('ks_server_us_per_key', 'keyspace', 335, 'µs', 'absolute',
     'CPU, Redis version, data and load of this server', 'lower',
     'server time the scan cost per key read (commandstats difference)'),
    ('ks_keys_per_s', 'keyspace', 336, 'keys/s', 'absolute',
     'network path, client host, budget and load of this run', 'higher',
     'keys read per second of scan'),
    ('ks_memory_usage_total_bytes', 'keyspace', 337, 'bytes', 'absolute',
     'this server''s data at the time of the scan', null,
     'sum of MEMORY USAGE over the keys read'),
    ('ks_prefix_keys', 'keyspace', 340, 'keys', 'absolute',
     'this server''s data at the time of the scan', null, 'keys of the prefix read'),
    ('ks_prefix_keys_estimated', 'keyspace', 341, 'keys', 'absolute',
     'this server''s data at the time of the scan', null,
     'keys of the prefix in the database (read ÷ coverage)'),
    ('ks_prefix_mean_bytes', 'keyspace', 342, 'bytes', 'absolute',
     'this server''s data, Redis version and allocator', null, 'mean MEMORY USAGE of a key'),
    ('ks_prefix_median_bytes', 'keyspace', 343, 'bytes', 'absolute',
     'this server''s data, Redis version and allocator', null, 'median MEMORY USAGE of a key'),
    ('ks_prefix_max_bytes', 'keyspace', 344, 'bytes', 'absolute',
     'this server''s data, Redis version and allocator', null, 'largest MEMORY USAGE of a key'),
    ('ks_prefix_share_of_used_memory', 'keyspace', 345, 'share', 'ratio', null, null,
     'MEMORY USAGE of the prefix (scaled to the database) ÷ used_memory'),
    ('ks_prefix_projection_bytes', 'keyspace', 346, 'bytes', 'absolute',
     'an estimate from the sampled mean on this server; MEMORY USAGE leaves out each key''s '
     || 'share of the key table, so it errs low', null,
     'cost of k × the keys of the prefix: k × estimated keys × mean MEMORY USAGE');

create or replace table keyspace_prefixes as
with keys as (
    select * from stg_keyspace_keys
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
join keyspace_scan_costs as c on c.run_id = p.run_id and c.env = p.env
left join encodings as e on e.run_id = p.run_id and e.env = p.env and e.prefix = p.prefix;

insert into measures by name
with scan_level as (
    select
        run_id,
        env,
        keys_sampled::double as ks_keys_sampled,
        coverage_share as ks_coverage_share,
        memory_usage_total_bytes * scale / nullif(used_memory_bytes, 0) as ks_attributed_share,
        1 - memory_usage_total_bytes * scale / nullif(used_memory_bytes, 0)
            as ks_unattributed_share,
        busy_share as ks_busy_share,
        server_us_per_key as ks_server_us_per_key,
        keys_per_s as ks_keys_per_s,
        memory_usage_total_bytes::double as ks_memory_usage_total_bytes,
        keys_sampled,
    from keyspace_scan_costs
),

prefix_level as (
    select
        run_id,
        env,
        prefix,
        keys_sampled,
        keys_sampled::double as ks_prefix_keys,
        keys_estimated as ks_prefix_keys_estimated,
        mean_bytes as ks_prefix_mean_bytes,
        median_bytes::double as ks_prefix_median_bytes,
        max_bytes::double as ks_prefix_max_bytes,
        share_of_used_memory as ks_prefix_share_of_used_memory,
        projection_bytes as ks_prefix_projection_bytes,
    from keyspace_prefixes
)

select run_id, env, figure, '' as subject, value, keys_sampled as samples,
from (
    unpivot scan_level
    on ks_keys_sampled, ks_coverage_share, ks_attributed_share, ks_unattributed_share,
       ks_busy_share, ks_server_us_per_key, ks_keys_per_s, ks_memory_usage_total_bytes
    into name figure value value
)
union all by name
select run_id, env, figure, prefix as subject, value, keys_sampled as samples,
from (
    unpivot prefix_level
    on ks_prefix_keys, ks_prefix_keys_estimated, ks_prefix_mean_bytes,
       ks_prefix_median_bytes, ks_prefix_max_bytes, ks_prefix_share_of_used_memory,
       ks_prefix_projection_bytes
    into name figure value value
);

/* The budget the scan had and what it used. */
create or replace view report_keyspace_scan as
select
    *,
    memory_usage_total_bytes * scale / nullif(used_memory_bytes, 0) as attributed_share,
    1 - memory_usage_total_bytes * scale / nullif(used_memory_bytes, 0) as unattributed_share,
    busy_share <= busy_share_cap * 1.1 as within_busy_share,  /* 10 %: one round's lag */
from keyspace_scan_costs;

/* The prefix table, largest share first. */
create or replace view report_keyspace_prefixes as
select *
from keyspace_prefixes
order by total_bytes desc, keys_sampled desc, prefix;

/* The biggest keys by elements (what makes an O(N) command slow; aggregates only, a
   string's "elements" are its bytes) and by bytes (what fills memory): they differ. */
create or replace view report_keyspace_top_keys as
with ranked as (
    select
        k.*,
        s.top_keys,
        row_number() over (
            partition by k.run_id, k.env order by k.memory_usage_bytes desc nulls last, k.key
        ) as rank_bytes,
        row_number() over (
            partition by k.run_id, k.env
            order by case when k.type <> 'string' then k.elements end desc nulls last, k.key
        ) as rank_elements,
    from stg_keyspace_keys as k
    join stg_keyspace_scans as s on s.run_id = k.run_id and s.env = k.env
)

select run_id, env, 'bytes' as ranked_by, rank_bytes as rank, key, prefix, type, encoding,
       elements, memory_usage_bytes,
from ranked
where rank_bytes <= top_keys
union all
select run_id, env, 'elements' as ranked_by, rank_elements as rank, key, prefix, type,
       encoding, elements, memory_usage_bytes,
from ranked
where rank_elements <= top_keys and type <> 'string' and elements is not null
order by run_id, env, ranked_by, rank;

/* Per type, as redis-cli --bigkeys and --memkeys summarize: keys, elements, bytes, and the
   biggest key each way. */
create or replace view report_keyspace_types as
select
    run_id,
    env,
    type,
    count(*) as keys,
    sum(elements) as elements,
    sum(memory_usage_bytes) as memory_usage_bytes,
    avg(memory_usage_bytes) as mean_bytes,
    /* Ties go to the first key by name, so a rebuild shows the same one. */
    first(key order by elements desc nulls last, key) as biggest_by_elements,
    max(elements) as max_elements,
    first(key order by memory_usage_bytes desc nulls last, key) as biggest_by_bytes,
    max(memory_usage_bytes) as max_bytes,
from stg_keyspace_keys
group by run_id, env, type
order by memory_usage_bytes desc;

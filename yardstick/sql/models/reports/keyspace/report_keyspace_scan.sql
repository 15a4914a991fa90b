/* One row per key space scan (run, environment): the budget the scan had and what it used. */
select
    *,
    memory_usage_total_bytes * scale / nullif(used_memory_bytes, 0) as attributed_share,
    1 - memory_usage_total_bytes * scale / nullif(used_memory_bytes, 0) as unattributed_share,
    /* The budget's basis: the server's CPU since the footprint-free scan, commandstats
       before. 10 %: one round's lag. */
    coalesce(cpu_share, busy_share) <= busy_share_cap * 1.1 as within_busy_share,
    /* No key read and none in the database: the section says "nothing to scan". */
    coalesce(keys_sampled, 0) = 0 and coalesce(dbsize_before, 0) = 0 as nothing_to_scan,
from {{ ref('keyspace_scan_costs') }}

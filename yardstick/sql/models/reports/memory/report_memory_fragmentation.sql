/* One row per memory run (run, environment): mem_fragmentation_ratio empty and loaded, with the
   size that decides whether it means anything: below ~100 MiB the process's fixed RSS
   dominates the ratio. */
select
    run_id,
    env,
    arg_min(fragmentation_before, first_taken_at) as fragmentation_empty,
    arg_max(fragmentation_after, after_bytes) as fragmentation_loaded,
    max(after_bytes) as used_memory_loaded_bytes,
    arg_max(rss_after_bytes, after_bytes) as rss_loaded_bytes,
    max(after_bytes) < 100 * 1024 * 1024 as small_dataset,
    count(*) filter (where not clean) as unclean_repetitions,
    max(abs(clients_delta_bytes)) as clients_delta_max_bytes,
from {{ ref('memory_repetitions') }}
group by run_id, env

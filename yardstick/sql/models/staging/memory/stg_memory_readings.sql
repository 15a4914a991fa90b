/* One row per run, shape, repetition and phase of the batch: settle (the wait for used_memory
   to stop falling begins), before (it has stopped: the baseline), after (loaded), removed. */
select
    run_id,
    env,
    shape,
    repetition,
    phase,                      /* settle | before | after | removed */
    taken_at,
    used_memory_bytes,
    used_memory_rss_bytes,
    mem_fragmentation_ratio,
    mem_clients_normal_bytes,
    dbsize,
from {{ source('lake', 'raw_memory_readings') }}

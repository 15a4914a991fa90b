/* One row per run, shape, repetition and phase (before | after | removed) of the batch. */
select
    run_id,
    env,
    shape,
    repetition,
    phase,                      /* before | after | removed */
    taken_at,
    used_memory_bytes,
    used_memory_rss_bytes,
    mem_fragmentation_ratio,
    mem_clients_normal_bytes,
    dbsize,
from {{ source('lake', 'raw_memory_readings') }}

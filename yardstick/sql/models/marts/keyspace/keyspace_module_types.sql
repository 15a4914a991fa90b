/* One row per key-space scan (run, environment) and module key type it met: its keys, their
   MEMORY USAGE, whether MEMORY USAGE counts such keys (false: the value is left out, so
   used_memory not attributed to keys is partly theirs, not overhead), and the module's own
   memory figure for the keys it was asked about. */
select
    run_id,
    env,
    type,
    module,
    module_version,
    keys,
    memory_usage_bytes,
    memory_usage_counts,
    own_command,
    own_unit_bytes,
    keys_sized,
    own_memory_bytes,
    modules_loaded,
from {{ ref('stg_keyspace_module_types') }}

/* One row per run, environment and module key type the key-space scan met (batch runs). */
select
    run_id,
    env,
    type,                       /* TYPE's answer: graphdata, vectorset ... */
    module,                     /* MODULE LIST name; null: a type the tool does not know */
    module_version,
    keys,
    memory_usage_bytes,
    memory_usage_counts,        /* false: MEMORY USAGE leaves the value out (measured) */
    own_command,                /* the module's own memory command (GRAPH.MEMORY USAGE) */
    own_unit_bytes,             /* its answer's unit: 1 MiB for whole megabytes, floored */
    keys_sized,
    own_memory_bytes,
    modules_loaded,
from {{ source('lake', 'raw_keyspace_module_types') }}

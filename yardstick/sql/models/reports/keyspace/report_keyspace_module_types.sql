/* One row per key-space scan and module key type: what MEMORY USAGE and the module's own
   command say of its keys (the report names an under-count instead of calling it overhead). */
select *,
from {{ ref('keyspace_module_types') }}
order by run_id, env, type

/* One row per scan (run, environment) and key type: keys, elements, bytes, and the biggest
   key each way (marts/keyspace/keyspace_types). */
select * from {{ ref('keyspace_types') }}
order by memory_usage_bytes desc

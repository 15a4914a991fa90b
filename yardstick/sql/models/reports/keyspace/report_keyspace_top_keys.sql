/* One row per scan (run, environment), ranking (bytes | elements) and rank: the biggest keys
   each way (marts/keyspace/keyspace_top_keys). */
select * from {{ ref('keyspace_top_keys') }}
order by run_id, env, ranked_by, rank

/* One row per run, environment and key prefix, largest share first. */
select *
from {{ ref('keyspace_prefixes') }}
order by total_bytes desc, keys_sampled desc, prefix

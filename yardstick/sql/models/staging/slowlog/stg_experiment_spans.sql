/* One row per scratch experiment of the batch: the SLOWLOG ids and time it occupied (one raw
   table per family). */
with spans as (
    select * from {{ source('lake', 'raw_contention_span') }}
    union all by name
    select * from {{ source('lake', 'raw_slow_commands_span') }}
    union all by name
    select * from {{ source('lake', 'raw_agreement_span') }}
)

select run_id, env, family, server_run_id, started_at, finished_at, first_entry_id, last_entry_id,
from spans

/* One row per contention experiment (a run and environment) of the batch. */
select run_id, env, server_run_id, list_len, slowlog_threshold_us, slowlog_max_len_used,
       victim_client_name, culprit_client_name, culprit_commands, culprit_busy_us, loop_s,
       baseline_entry_id,
from {{ source('lake', 'raw_contention_setup') }}

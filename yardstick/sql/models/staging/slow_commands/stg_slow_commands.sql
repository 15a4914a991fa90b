/* One row per run, O(N) command and repetition of the batch. */
select run_id, env, command, args, rep_idx, n_elements, returned, entry_id, duration_us,
       client_us, logged_at,
from {{ source('lake', 'raw_slow_commands') }}

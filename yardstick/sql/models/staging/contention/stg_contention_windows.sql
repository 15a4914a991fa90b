/* One row per run, phase and victim probe window of the batch. */
select run_id, env, phase, window_idx, started_at, window_s, samples, rtt_min_us, rtt_max_us,
       rtt_mean_us, over_threshold,
from {{ source('lake', 'raw_contention_windows') }}

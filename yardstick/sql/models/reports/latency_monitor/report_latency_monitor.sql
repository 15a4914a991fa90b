/* One row per latency-monitor collection (run, environment). */
select
    run_id,
    env,
    collected_at,
    threshold_ms,
    threshold_ms = 0 as monitor_off,
    threshold_ms is null as threshold_unknown,
    error,
    events,
    doctor_text,
from {{ ref('latency_collections') }}

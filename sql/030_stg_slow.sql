/* Slow commands and stalls, staging: one view per raw table, renames and casts only.
   SLOWLOG and latency-monitor collections, commandstats snapshots, and the scratch
   experiments (O(N) commands, contention, instrument agreement). */
create or replace view stg_slowlog_collections as
select
    run_id,
    env,
    server_run_id,          /* entry ids restart with the server process */
    redis_version,
    uptime_s,
    collected_at,
    slowlog_len,
    slowlog_max_len,        /* null where CONFIG is renamed or forbidden */
    log_slower_than_us,
    count_requested,
    entries_returned,
    args_redacted,
    tool_client_prefix,
    read_s,
from raw_slowlog_collections;

create or replace view stg_slowlog_entries as
with source as (
    select * from raw_slowlog_entries
),

collections as (
    select run_id, env, collected_at, tool_client_prefix from raw_slowlog_collections
)

select
    s.run_id,
    s.env,
    c.collected_at,
    s.server_run_id,
    s.entry_id,
    s.logged_at,
    s.duration_us,
    s.command,
    s.args,
    s.args_redacted,
    s.arg_count,
    s.arg_count_original,
    s.complexity,
    s.client_addr,
    s.client_name,
    s.entry_fields,
    /* The tool names every connection it opens; its entries are diagnostics, not traffic. */
    coalesce(starts_with(s.client_name, c.tool_client_prefix), false) as measurement_caused,
from source as s
join collections as c on c.run_id = s.run_id and c.env = s.env;

create or replace view stg_experiment_spans as
/* SLOWLOG ids and time each scratch experiment occupied (one raw table per family). */
with spans as (
    select * from raw_contention_span
    union all by name
    select * from raw_slow_commands_span
    union all by name
    select * from raw_agreement_span
)

select run_id, env, family, server_run_id, started_at, finished_at, first_entry_id, last_entry_id,
from spans;

create or replace view stg_latency_collections as
select run_id, env, server_run_id, collected_at, threshold_ms, events, doctor_text, error,
from raw_latency_collections;

create or replace view stg_latency_latest as
select run_id, env, server_run_id, event, latest_at, latest_ms, max_ms,
from raw_latency_latest;

create or replace view stg_latency_history as
select run_id, env, server_run_id, event, sampled_at, latency_ms,
from raw_latency_history;

create or replace view stg_commandstats_snapshots as
select run_id, env, server_run_id, uptime_s, taken_at, command, calls, usec,
       rejected_calls, failed_calls,
from raw_commandstats_snapshots;

create or replace view stg_slow_commands as
select run_id, env, command, args, rep_idx, n_elements, returned, entry_id, duration_us,
       client_us, logged_at,
from raw_slow_commands;

create or replace view stg_slow_commands_baseline as
select run_id, env, phase, command, taken_at, calls_sent, calls, usec,
from raw_slow_commands_baseline;

create or replace view stg_contention_setup as
select run_id, env, server_run_id, list_len, slowlog_threshold_us, slowlog_max_len_used,
       victim_client_name, culprit_client_name, culprit_commands, culprit_busy_us, loop_s,
       baseline_entry_id,
from raw_contention_setup;

create or replace view stg_contention_windows as
select run_id, env, phase, window_idx, started_at, window_s, samples, rtt_min_us, rtt_max_us,
       rtt_mean_us, over_threshold,
from raw_contention_windows;

create or replace view stg_contention_counters as
select run_id, env, phase, taken_at, command, calls, usec,
from raw_contention_counters;

create or replace view stg_contention_slowlog as
select run_id, env, entry_id, command, client_name, duration_us,
from raw_contention_slowlog;

create or replace view stg_agreement as
select run_id, env, server_run_id, rep_idx, list_len, client_us, entry_id, slowlog_us, logged_at,
       latency_ms, latency_sampled_at, latency_threshold_ms, latency_threshold_before_ms,
       measured_at,
from raw_agreement;

/* One row per SLOWLOG collection (a run and environment) of the batch. */
select
    run_id,
    env,
    server_run_id,          /* entry ids restart with the server process */
    redis_version,
    server_product,         /* INFO server's product (valkey), null in files before it */
    server_version,         /* the product's own version (Valkey 8.1.8, not 7.2.4) */
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
    slowlog_reset_calls,    /* null before 7.0, where RESET is not counted apart */
    empty_log_next_id,      /* an empty log: its next entry's id (0), null if unknown */
    empty_log_basis,        /* why (yardstick/tasks/slowlog.py); null where the log was not empty
                               or the file predates the column */
    oldest_queued_id,       /* the queue as read: its oldest and newest entry ids (null:
                               empty, or the file predates the columns: every entry read */
    newest_queued_id,       /* was landed then, the entries say) */
    landed_above_id,        /* only entries above this id were landed (null: all read) */
from {{ source('lake', 'raw_slowlog_collections') }}

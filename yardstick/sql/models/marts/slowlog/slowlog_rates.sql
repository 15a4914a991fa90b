/* One row per SLOWLOG collection (run, environment): its environment's collections of the last
   24 hours up to it, read from a time-bounded slice of slowlog_collection_gaps. */
with batch as (
    {{ in_batch(ref('slowlog_collection_gaps')) }}
),

lookback as (
    /* Appended in time order: DuckDB skips older row groups by their zone maps. */
    select *
    from {{ ref('slowlog_collection_gaps') }}
    where collected_at > (select min(collected_at) from batch) - interval 24 hour
),

windowed as (
    /* Each collection's last 24 hours as a window frame, not a self-join: a day of 288
       collections is 288 frames, not 288 x 288 pairs. The frame's lower bound excludes the
       collection exactly 24 h earlier (timestamps have microseconds). */
    select
        run_id,
        env,
        sum(ids_logged) filter (where ids_logged is not null and interval_s > 0) over last_24h
            as ids_24h,
        sum(interval_s) filter (where ids_logged is not null and interval_s > 0) over last_24h
            as observed_s,
        sum(lost_entries) over last_24h as lost_24h,
        /* Intervals whose losses (and ids logged) are unknown: left out of both sums. */
        count(run_id) filter (where loss_status = 'unknown') over last_24h as unknown_intervals_24h,
        count(run_id) over last_24h as collections_24h,
        median(gap_since_previous_s) over last_24h as median_gap_s,
        /* The busiest interval: ids logged in it (kept or lost), and the most lost in one. */
        max(ids_logged) filter (where ids_logged is not null and interval_s > 0) over last_24h
            as max_ids_one_interval_24h,
        max(lost_entries) over last_24h as max_lost_one_interval_24h,
    from lookback
    window last_24h as (
        partition by env order by collected_at
        range between interval '23:59:59.999999' preceding and current row
    )
),

rates as (
    select
        w.*,
        g.slowlog_max_len,
        60.0 * w.ids_24h / nullif(w.observed_s, 0) as entries_per_min,
    from windowed as w
    join batch as g on g.run_id = w.run_id and g.env = w.env  /* the batch's rows only */
)

select
    *,
    slowlog_max_len / nullif(entries_per_min, 0) as fill_min,
    /* Twice per fill time, so a burst at double the average rate still fits; at most hourly,
       and every minute is the floor (below that, only a longer queue helps). */
    case
        when entries_per_min is null then null
        when entries_per_min = 0 then 60
        else least(60, greatest(1, floor(slowlog_max_len / entries_per_min / 2)))
    end as recommended_interval_min,
    coalesce(slowlog_max_len / nullif(entries_per_min, 0) < 2, false) as collection_cannot_keep_up,
from rates

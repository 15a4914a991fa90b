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
    select
        r.run_id,
        r.env,
        sum(p.ids_logged) filter (p.ids_logged is not null and p.interval_s > 0) as ids_24h,
        sum(p.interval_s) filter (p.ids_logged is not null and p.interval_s > 0)
            as observed_s,
        sum(p.lost_entries) as lost_24h,
        count(p.run_id) as collections_24h,
        median(p.gap_since_previous_s) as median_gap_s,
    from batch as r
    join lookback as p
        on p.env = r.env
        and p.collected_at <= r.collected_at
        and p.collected_at > r.collected_at - interval 24 hour
    group by r.run_id, r.env
),

rates as (
    select
        w.*,
        g.slowlog_max_len,
        60.0 * w.ids_24h / nullif(w.observed_s, 0) as entries_per_min,
    from windowed as w
    join batch as g on g.run_id = w.run_id and g.env = w.env
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

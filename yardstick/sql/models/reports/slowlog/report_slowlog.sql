/* One row per SLOWLOG collection (run, environment): what the section's sentences are made
   of. */
select
    g.*,
    r.entries_per_min,
    r.fill_min,
    r.recommended_interval_min,
    r.collection_cannot_keep_up,
    r.lost_24h,
    r.unknown_intervals_24h,
    r.collections_24h,
    r.median_gap_s / 60 as median_gap_min,
    r.max_ids_one_interval_24h,
    r.max_lost_one_interval_24h,
from {{ ref('slowlog_collection_gaps') }} as g
left join {{ ref('slowlog_rates') }} as r on r.run_id = g.run_id and r.env = g.env

/* One line per benchmark repetition that stalled (its wall time far beyond its peers': the
   rule is in timed_repetitions), for the throughput and memtier sections: what it took
   against the median of its peers, and the rate it measured against theirs. Its figures
   were left out of the medians. */
select
    run_id, env, family,
    subject as cell,          /* the redis-benchmark cell; '' for memtier's one workload */
    test, repetition, elapsed_s, peers, peers_median_elapsed_s, elapsed_over_peers,
    rate,                     /* req/s (redis-benchmark), total ops/s (memtier) */
    peers_median_rate,
from {{ ref('timed_repetitions') }}
where stalled
order by family, cell, repetition

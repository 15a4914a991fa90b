/* One row per cluster, full run, balance dimension (ops, cpu) and primary: its window, the
   median window and whether it was compared (the report lists those left out apart). */
select w.*,
from {{ ref('shard_windows') }} as w
join {{ ref('runs') }} as r on r.run_id = w.run_id and r.env = w.env
where {{ is_full_run('r.profile') }}
order by w.run_id, w.env, w.dimension, w.shard

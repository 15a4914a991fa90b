/* Like with like for shard balance: one row per cluster, batch run, dimension and primary,
   the window its difference covers (ops: since its previous commandstats snapshot; cpu:
   since its previous fingerprinted run) against the primaries' median window. A primary
   whose window is off the median by more than the tolerance (var shard_window_tolerance)
   is left out of that dimension's balance and listed apart with its window: a node whose
   counters could not be read last time covers a longer window, and its rate is not the
   others'. */
with shapes as (
    {{ in_batch(ref('topology_runs'), alias='t') }}
),

primaries as (
    select n.run_id, n.env, n.member, n.address as shard,
    from ({{ in_batch(ref('topology_members'), alias='n') }}) as n
    join shapes as t on t.run_id = n.run_id and t.env = n.env
    where t.shape = 'cluster' and n.role = 'primary' and n.slots > 0
),

counter_windows as (
    select i.run_id, i.env, max(i.interval_s) as window_s,
    from ({{ in_batch(ref('counter_intervals'), alias='i') }}) as i
    where not i.counters_reset and i.interval_s > 0
    group by i.run_id, i.env
),

cpu_windows as (
    select c.run_id, c.env, c.interval_s as window_s,
    from ({{ in_batch(ref('server_cpu_intervals'), alias='c') }}) as c
),

windows as (
    select p.run_id, p.env, p.shard, p.member, 'ops' as dimension, w.window_s,
    from primaries as p
    left join counter_windows as w on w.run_id = p.run_id and w.env = p.member
    union all
    select p.run_id, p.env, p.shard, p.member, 'cpu', c.window_s,
    from primaries as p
    left join cpu_windows as c on c.run_id = p.run_id and c.env = p.member
),

medians as (
    select run_id, env, dimension, median(window_s) as median_window_s,
    from windows
    group by run_id, env, dimension
)

select
    w.run_id,
    w.env,
    w.dimension,                /* ops | cpu */
    w.shard,                    /* the primary's address */
    w.member,
    w.window_s,                 /* seconds the primary's difference covers */
    m.median_window_s,          /* the primaries' median window */
    {{ var('shard_window_tolerance') }} as tolerance,
    abs(w.window_s / nullif(m.median_window_s, 0) - 1)
    <= {{ var('shard_window_tolerance') }} as comparable,
from windows as w
join medians as m on m.run_id = w.run_id and m.env = w.env and m.dimension = w.dimension

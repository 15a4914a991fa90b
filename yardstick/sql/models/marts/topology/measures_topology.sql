/* The environment's figures across its servers, one row per run, figure and subject, all
   landed under the environment itself (its members' own figures stay theirs):
   - shard balance of a cluster, per dimension: the largest primary ÷ the mean of all
     primaries (subject ''), and each primary ÷ the mean (subject: the shard's primary
     address, so the largest is named and each shard keeps its own series): keys (INFO
     keyspace db0), bytes (used_memory), operations per second (commandstats difference
     since the previous snapshot, the tool's own probe and read commands left out) and
     server CPU (used_cpu_sys + used_cpu_user difference since the previous run of the same
     server run); only when every primary has the value; commands/s and CPU compare only
     primaries whose windows match (shard_windows: within shard_window_tolerance of the
     median window), the others are listed apart in the report;
   - each replica's lag in bytes and seconds, and its client round trip p50 ÷ its primary's
     (the same run, the same prober; subject: the replica's address);
   - the cluster's key space: keys (sum of the primaries' DBSIZE read by their scans) and,
     per prefix, keys and bytes summed over the primaries and their share of the primaries'
     used_memory (only when every primary was scanned). */
{{ config(materialized='ephemeral') }}

with shapes as (
    {{ in_batch(ref('topology_runs'), alias='t') }}
),

nodes as (
    {{ in_batch(ref('topology_members'), alias='n') }}
),

primaries as (
    select n.run_id, n.env, n.member, n.address as shard, n.db0_keys, n.used_memory_bytes,
    from nodes as n
    join shapes as t on t.run_id = n.run_id and t.env = n.env
    where t.shape = 'cluster' and n.role = 'primary' and n.slots > 0
),

operations as (
    /* Commands per second on each member since its previous commandstats snapshot. The
       probe's PINGs, the collections' INFO/SLOWLOG/LATENCY/CONFIG GET, the key space
       scan's commands and the replicas' REPLCONF acks are not the shard's client load
       (an application's own PINGs, SCANs or length commands are left out with them). */
    select i.run_id, i.env, sum(i.calls_delta) / any_value(i.interval_s) as ops_per_s,
    from ({{ in_batch(ref('counter_intervals'), alias='i') }}) as i
    where not i.counters_reset and i.interval_s > 0
        and i.command not in (
            'ping', 'info', 'echo', 'dbsize', 'scan', 'type', 'hello', 'auth', 'select',
            'readonly', 'command', 'strlen', 'llen', 'hlen', 'scard', 'zcard', 'xlen',
            'replconf', 'psync', 'sync'
        )
        and not regexp_matches(
            i.command, '^(config|slowlog|latency|client|cluster|memory|object|acl|command)\|'
        )
    group by i.run_id, i.env
),

cpu as (
    select run_id, env, cpu_share,
    from ({{ in_batch(ref('server_cpu_intervals'), alias='c') }}) as c
),

shard_values as (
    select p.run_id, p.env, p.shard, 'keys' as dimension, p.db0_keys::double as value,
    from primaries as p
    union all
    select p.run_id, p.env, p.shard, 'bytes', p.used_memory_bytes::double, from primaries as p
    union all
    select p.run_id, p.env, p.shard, 'ops', o.ops_per_s,
    from primaries as p
    left join operations as o on o.run_id = p.run_id and o.env = p.member
    union all
    select p.run_id, p.env, p.shard, 'cpu', c.cpu_share,
    from primaries as p
    left join cpu as c on c.run_id = p.run_id and c.env = p.member
),

windowed as (
    /* A primary whose ops or CPU window is off the others' is left out of that dimension. */
    select v.*,
    from shard_values as v
    anti join ({{ in_batch(ref('shard_windows'), alias='w') }}) as w
        on w.run_id = v.run_id and w.env = v.env and w.shard = v.shard
        and w.dimension = v.dimension and w.window_s is not null and not w.comparable
),

shard_means as (
    select
        run_id, env, dimension,
        avg(value) as mean_value,
        max(value) as max_value,
        count(*) as shards,
    from windowed
    group by run_id, env, dimension
    /* every primary has the value, two or more of them */
    having count(value) = count(*) and count(*) >= 2 and avg(value) > 0
),

balance as (
    select run_id, env, 'shard_' || dimension || '_balance' as figure, '' as subject,
           max_value / mean_value as value, shards as samples,
    from shard_means
    union all
    select v.run_id, v.env, 'shard_' || v.dimension || '_over_mean', v.shard,
           v.value / m.mean_value, m.shards,
    from windowed as v
    join shard_means as m
        on m.run_id = v.run_id and m.env = v.env and m.dimension = v.dimension
),

replicas as (
    select r.run_id, r.env, r.address, r.member, r.lag_bytes, r.lag_s,
           p.member as primary_member,
    from nodes as r
    left join nodes as p
        on p.run_id = r.run_id and p.env = r.env and p.address = r.primary_address
    where r.role = 'replica'
),

member_figures as (
    /* The members' own round trip and key space figures this run; for a run whose detail
       retention dropped, the figures the lake kept of it. */
    select run_id, env, figure, subject, value,
    from {{ ref('measures_round_trip') }}
    where figure = 'rtt_client_p50_us' and window_idx is null
    union all
    select run_id, env, figure, subject, value,
    from {{ ref('measures_keyspace') }}
    where figure in ('ks_prefix_keys_estimated', 'ks_prefix_mean_bytes')
),

retained as (
    select * from {{ ref('stg_retained_measures') }}
    where window_idx is null
        and figure in ('rtt_client_p50_us', 'ks_prefix_keys_estimated', 'ks_prefix_mean_bytes')
),

kept as (
    select m.*,
    from member_figures as m
    anti join (select distinct run_id, env, family from retained) as k
        on k.run_id = m.run_id and k.env = m.env
        and k.family = case when m.figure like 'ks\_%' escape '\' then 'keyspace'
                            else 'round_trip' end
    union all
    select run_id, env, figure, subject, value, from retained
),

rtt as (
    select run_id, env, value as p50_us, from kept where figure = 'rtt_client_p50_us'
),

replica_figures as (
    select run_id, env, 'replica_lag_bytes' as figure, address as subject,
           lag_bytes::double as value, null::bigint as samples,
    from replicas
    union all
    select run_id, env, 'replica_lag_s', address, lag_s, null, from replicas
    union all
    select r.run_id, r.env, 'replica_rtt_p50_over_primary', r.address,
           rr.p50_us / nullif(pr.p50_us, 0), null,
    from replicas as r
    join rtt as rr on rr.run_id = r.run_id and rr.env = r.member
    join rtt as pr on pr.run_id = r.run_id and pr.env = r.primary_member
),

scans as (
    select s.run_id, s.env, s.dbsize_before, s.used_memory_bytes,
    from ({{ in_batch(ref('keyspace_scan_costs'), alias='s') }}) as s
),

scanned as (
    /* Clusters whose every primary was scanned in this run. */
    select p.run_id, p.env,
           sum(s.dbsize_before) as keys,
           sum(s.used_memory_bytes) as used_memory_bytes,
    from primaries as p
    left join scans as s on s.run_id = p.run_id and s.env = p.member
    group by p.run_id, p.env
    having count(s.run_id) = count(*)
),

prefixes as (
    select p.run_id, p.env, k.subject as prefix,
           sum(k.value) filter (where k.figure = 'ks_prefix_keys_estimated') as keys,
           sum(k.value * m.value) filter (where k.figure = 'ks_prefix_keys_estimated') as bytes,
    from primaries as p
    join kept as k on k.run_id = p.run_id and k.env = p.member
    left join kept as m
        on m.run_id = k.run_id and m.env = k.env and m.subject = k.subject
        and m.figure = 'ks_prefix_mean_bytes'
    group by p.run_id, p.env, k.subject
),

keyspace_figures as (
    select run_id, env, 'cluster_keys' as figure, '' as subject, keys::double as value,
           keys::bigint as samples,
    from scanned
    union all
    select x.run_id, x.env, 'cluster_prefix_keys', x.prefix, x.keys, x.keys::bigint,
    from prefixes as x
    semi join scanned as s on s.run_id = x.run_id and s.env = x.env
    union all
    select x.run_id, x.env, 'cluster_prefix_bytes', x.prefix, x.bytes, x.keys::bigint,
    from prefixes as x
    semi join scanned as s on s.run_id = x.run_id and s.env = x.env
    union all
    select x.run_id, x.env, 'cluster_prefix_share_of_used_memory', x.prefix,
           x.bytes / nullif(s.used_memory_bytes, 0), x.keys::bigint,
    from prefixes as x
    join scanned as s on s.run_id = x.run_id and s.env = x.env
),

long as (
    select * from balance
    union all by name
    select * from replica_figures
    union all by name
    select * from keyspace_figures
)

{{ as_measures('long', subject='subject') }}

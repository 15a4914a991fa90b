/* Intrinsic latency: what the OS steals from a tight loop on the server host, Redis excluded. */
create or replace view stg_intrinsic as
select run_id, env, started_at, duration_s, max_us, total_runs, avg_us_per_run,
       avg_ns_per_run, worst_over_avg_printed, host_busy_share, load_1m_before,
       tool_path, tool_version,
from raw_intrinsic;

insert into figure_catalog values
    ('intrinsic_max_us', 'intrinsic', 1, 'µs', 'absolute',
     'this host''s kernel, CPU and other processes during the run', 'lower',
     'longest the OS held a tight loop still (redis-cli --intrinsic-latency)'),
    ('intrinsic_avg_ns_per_run', 'intrinsic', 2, 'ns', 'absolute',
     'this host''s CPU speed', 'lower',
     'average duration of one loop iteration'),
    ('intrinsic_worst_over_avg', 'intrinsic', 3, '×', 'ratio', null, 'lower',
     'worst loop iteration ÷ average iteration'),
    ('intrinsic_max_over_client_p99', 'intrinsic', 4, '×', 'ratio', null, null,
     'intrinsic maximum ÷ client PING p99 of the same run: above 1, the machine alone '
     'stalls longer than the slow tail the client sees');

insert into measures by name
with latest as (
    /* One intrinsic measurement per run; keep the last should a run hold two. */
    select * from stg_intrinsic
    qualify row_number() over (partition by run_id, env order by started_at desc) = 1
),

client_p99 as (
    select run_id, env, value from measures
    where figure = 'rtt_client_p99_us' and window_idx is null
)

select run_id, env, 'intrinsic_max_us' as figure, max_us as value, total_runs as samples
from latest
union all
select run_id, env, 'intrinsic_avg_ns_per_run', avg_ns_per_run, total_runs from latest
union all
select run_id, env, 'intrinsic_worst_over_avg', max_us * 1000 / nullif(avg_ns_per_run, 0),
       total_runs
from latest
union all
select l.run_id, l.env, 'intrinsic_max_over_client_p99', l.max_us / nullif(c.value, 0), null
from latest as l
join client_p99 as c on c.run_id = l.run_id and c.env = l.env;

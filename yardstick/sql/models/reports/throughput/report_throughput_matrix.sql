/* One line per run and benchmark cell: the run-level figures side by side, for the report's
   matrix. */
select
    run_id, env, subject as cell,
    max(value) filter (where figure = 'bench_rps') as rps,
    max(value) filter (where figure = 'bench_p50_us') as p50_us,
    max(value) filter (where figure = 'bench_p99_us') as p99_us,
    max(n) filter (where figure = 'bench_rps') as n,
    max(min_value) filter (where figure = 'bench_rps') as rps_min,
    max(max_value) filter (where figure = 'bench_rps') as rps_max,
    max(spread) filter (where figure = 'bench_rps') as rps_spread,
    bool_or(noisy) filter (where figure = 'bench_rps') as noisy,
    /* Repetitions left out of n as stalls; null: fewer than 3, not judged. */
    max(value) filter (where figure = 'bench_stalled_repetitions')::int as stalled_repetitions,
from {{ ref('figures') }}
where family = 'throughput' and subject <> '' and figure like 'bench\_%' escape '\'
group by run_id, env, subject
order by cell

/* Every repetition of the timed benchmark tools that finished ok, with its wall time against
   its peers' and whether it stalled: one row per run, environment, family, subject (a
   redis-benchmark cell, its test in the name; '' for memtier's one workload) and repetition.
   measures_throughput and measures_memtier leave the stalled ones out of their figures.

   The rule. Peers are the other timed repetitions of the same run, environment and subject.
   A repetition is judged only when it has at least 2 peers (3 repetitions or more): the
   peers' median then rests on two values, one disturbed peer cannot set it alone, and
   leaving a stall out still leaves a median of two. It has stalled when
     elapsed_s > 3 × the peers' median elapsed_s  and  elapsed_s - that median ≥ 1 s.
   A freeze only ever adds wall time; load on a shared machine moves a repetition's wall time
   by tens of percent, rarely 2×, so 3× is beyond what load alone does, while a freeze of
   seconds on a cell of a second or less is 5× and more (a 60 s freeze: 60×). The 1 s floor
   keeps sub-second hiccups on tiny cells (a 0.05 s cell taking 0.2 s) as noise: they show in
   the spread, not as a stall. A stall that hit most repetitions of a cell is not told apart
   (the peers' median is then the stall): the cell's spread marks it noisy instead. */
with benchmark as (
    /* redis-benchmark runs every test of a cell in one invocation and times it as a whole:
       the tests of one invocation share its wall time and its verdict (their rps beside the
       peers' shows which test the stall hit). */
    select
        run_id, env,
        'throughput' as family,
        cell as subject,
        test,
        repetition,
        elapsed_s,
        rps as rate,              /* req/s */
    from {{ ref('stg_benchmark') }}
    where status = 'ok'
),

memtier as (
    /* One memtier_benchmark run is timed once for all its op types: one row, its total ops/s. */
    select
        run_id, env,
        'memtier' as family,
        '' as subject,
        '' as test,
        repetition,
        max(elapsed_s) as elapsed_s,
        max(ops_sec) filter (where op_type = 'totals') as rate,   /* ops/s */
    from {{ ref('stg_memtier') }}
    group by run_id, env, repetition
),

repetitions as (
    select * from benchmark
    union all by name
    select * from memtier
),

peers as (
    /* Rows without a wall time (files from before elapsed_s) are neither judged nor peers. */
    select
        r.run_id, r.env, r.family, r.subject, r.repetition,
        count(p.elapsed_s) as peers,
        median(p.elapsed_s) as peers_median_elapsed_s,
        median(p.rate) as peers_median_rate,
    from repetitions as r
    left join repetitions as p
        on p.run_id = r.run_id and p.env = r.env and p.family = r.family
        and p.subject = r.subject and p.repetition <> r.repetition
        and p.elapsed_s is not null
    group by r.run_id, r.env, r.family, r.subject, r.repetition
),

judged as (
    select
        r.run_id,
        r.env,
        r.family,
        r.subject,
        r.test,
        r.repetition,
        r.elapsed_s,
        r.rate,
        p.peers,                                  /* other timed repetitions of the subject */
        p.peers_median_elapsed_s,
        p.peers_median_rate,
        r.elapsed_s / nullif(p.peers_median_elapsed_s, 0) as elapsed_over_peers,
        /* false: fewer than 3 timed repetitions, the wall time was not judged */
        coalesce(r.elapsed_s is not null and p.peers >= 2, false) as judged,
    from repetitions as r
    join peers as p
        on p.run_id = r.run_id and p.env = r.env and p.family = r.family
        and p.subject = r.subject and p.repetition = r.repetition
)

select
    *,
    judged
        and elapsed_s > 3 * peers_median_elapsed_s
        and elapsed_s - peers_median_elapsed_s >= 1.0 as stalled,
from judged
order by run_id, env, family, subject, repetition

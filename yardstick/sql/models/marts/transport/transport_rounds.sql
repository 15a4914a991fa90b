/* One row per transport run (run, environment): rounds planned (the step's settings), landed,
   and dropped because a side's benchmark failed or was killed (their PINGs still count, the
   throughput ratio has no pair for them), so the section counts every round it left out. */
with rounds as (
    select
        run_id,
        env,
        round,
        string_agg(side || ': ' || error, '; ' order by side) filter (where error is not null)
            as error,
    from {{ ref('stg_transport') }}
    group by run_id, env, round
),

planned as (
    select
        run_id,
        env,
        try_cast(json_extract_string(params, '$.transport.rounds') as int) as rounds_planned,
    from {{ ref('stg_steps_batch') }}
    where family = 'transport'
)

select
    r.run_id,
    r.env,
    coalesce(any_value(p.rounds_planned), count(*)) as rounds_planned,
    count(*) as rounds_landed,
    count(*) filter (where r.error is null) as rounds_paired,
    count(*) filter (where r.error is not null) as rounds_dropped,
    /* 1-based, as the step's reason names them ("round 2") */
    string_agg((r.round + 1)::varchar, ', ' order by r.round) filter (where r.error is not null)
        as dropped_rounds,
    min_by(r.error, r.round) filter (where r.error is not null) as first_error,
from rounds as r
left join planned as p on p.run_id = r.run_id and p.env = r.env
group by r.run_id, r.env

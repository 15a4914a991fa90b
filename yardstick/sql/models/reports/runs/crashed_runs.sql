/* Runs that left files in the lake but never their `runs` row: killed before they could land
   it. Their rows are in no figure, trend or verdict; this lists them. A run without its row
   counts as crashed once a later run of the same environment has landed one (runs of one
   environment do not overlap: they hold its host's lock) or 24 hours after it started;
   before that it may still be running. */
with unfinished as (
    select
        env,
        run_id,
        strptime(left(run_id, 15) || '+00', '%Y%m%dT%H%M%S%z') as started_at,
        tables,
    from {{ source('lake', 'raw_unfinished_runs') }}
),

later as (
    select u.env, u.run_id, min(r.run_id) as next_run_id,
    from unfinished as u
    join {{ ref('runs') }} as r on r.env = u.env and r.run_id > u.run_id
    group by u.env, u.run_id
)

select
    u.env,
    u.run_id,
    u.started_at,
    u.tables,
    l.next_run_id,
    case
        when
            l.next_run_id is not null
            then 'no run row; a later run (' || l.next_run_id || ') finished'
        else 'no run row 24 hours after it started'
    end as why,
from unfinished as u
left join later as l on l.env = u.env and l.run_id = u.run_id
where l.next_run_id is not null or u.started_at < now() - interval '24 hours'
order by u.env, u.run_id

/* One row per collection (run, environment) and latency event: its latest
   spike and all-time worst, with its samples of the 24 h before the collection. */
with collections as (
    select * from {{ ref('latency_collections') }}
),

recent as (
    select * from {{ ref('latency_samples') }}
)

select
    l.run_id,
    l.env,
    l.event,
    l.latest_at,
    l.latest_ms,
    l.max_ms,
    count(s.sampled_at) as samples_24h,
    count(s.sampled_at) filter (where s.measurement_caused) as tool_samples_24h,
    max(s.latency_ms) filter (where not s.measurement_caused) as worst_app_24h_ms,
from {{ ref('latency_latest') }} as l
join collections as c on c.run_id = l.run_id and c.env = l.env
left join recent as s
    on s.env = l.env
    and s.event = l.event
    and s.server_run_id = l.server_run_id
    and s.sampled_at <= c.collected_at
    and s.sampled_at > c.collected_at - interval 24 hour
group by all
order by l.run_id, l.env, l.max_ms desc

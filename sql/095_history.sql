/* Figure history: each figure's series per environment, with the facts that decide whether
   two points may be compared (version, cores, transport, load). */
create or replace view figure_history as
select
    f.env,
    f.figure,
    f.subject,
    f.started_at,
    f.run_id,
    f.value,
    f.unit,
    f.nature,
    f.n,
    f.min_value,
    f.max_value,
    e.redis_version,
    e.server_cores,
    e.transport,
    e.prober_load_1m,
    /* An absolute compared across a new version or core count compares two machines. */
    coalesce(
        e.redis_version is distinct from lag(e.redis_version) over w
        or e.server_cores is distinct from lag(e.server_cores) over w
        or e.transport is distinct from lag(e.transport) over w,
        false
    ) and lag(f.run_id) over w is not null as environment_changed,
from figures as f
left join env_facts as e on e.run_id = f.run_id and e.env = f.env
window w as (partition by f.env, f.figure, f.subject order by f.started_at, f.run_id)
order by f.env, f.figure, f.subject, f.started_at;

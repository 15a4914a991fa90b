/* One row per SLOWLOG collection (run, environment). Its lost entries are the ids skipped since
   the previous collection of the same server run (a restart starts a new series: no false
   losses), minus ids the tool's own scratch experiments produced. The previous collection
   comes from the batch or, for the batch's first one, from the state slowlog_server_runs.

   Where the ids stood: the highest id an earlier collection read or, when every earlier
   collection found the log empty, the id before the next one (ids come from a per-process
   counter from 0 that SLOWLOG RESET does not rewind, so an empty log means "next id 0"
   unless a RESET or a max-len of 0 emptied it: yardstick/tasks/slowlog.py records the evidence).
   Verified evidence counts losses; an unverified one (before 7.0, where commandstats
   cannot tell RESET from GET) counts only once the next collection still holds id 0.
   Where the ids cannot be placed the losses are unknown (null) with a reason, never 0.

   The queue's oldest and newest ids and its length come from the collection row (a
   collection lands only the entries above its cursor); files written before those columns
   landed every entry read, so their entries give the same figures. */
{% set prior = prior_relation('slowlog_server_runs') %}

with ids as (
    select run_id, env, min(entry_id) as min_id, max(entry_id) as max_id, count(*) as entries,
    from {{ ref('stg_slowlog_entries') }}
    group by run_id, env
),

fresh as (
    select
        c.*,
        coalesce(c.oldest_queued_id, i.min_id) as min_id,
        coalesce(c.newest_queued_id, i.max_id) as max_id,
        /* A queue read whole but landed in part: its length as read. */
        case when c.newest_queued_id is not null then c.entries_returned
            else coalesce(i.entries, 0) end as entries,
        false as is_prior,
    from {{ ref('stg_slowlog_collections') }} as c
    left join ids as i on i.run_id = c.run_id and i.env = c.env
),

prior as (
    /* Each server run's latest collection of earlier updates, with the highest id seen and
       the best evidence of where an empty log stood. */
    {% if is_incremental() and prior %}
    select
        p.last_run_id as run_id,
        p.env,
        p.server_run_id,
        p.last_collected_at as collected_at,
        p.max_id,
        p.empty_log_next_id,
        p.empty_log_basis,
        true as is_prior,
    from {{ prior }} as p
    where p.env in (select env from fresh)
    {% else %}
    select
        run_id, env, server_run_id, collected_at, max_id, empty_log_next_id, empty_log_basis,
        is_prior,
    from fresh where false
    {% endif %}
),

collections as (
    select
        *,
        /* The empty log's next id is pinned: no SLOWLOG call at all, or (7.0+) no RESET. */
        coalesce(empty_log_next_id is not null
            and empty_log_basis in ('no_slowlog_calls', 'no_reset_calls'), false)
            as next_id_verified,
    from (
        select * from prior
        union all by name
        select * from fresh
    )
),

ordered as (
    select
        *,
        /* Highest id any earlier collection of this server run has seen. */
        max(max_id) over (
            partition by env, server_run_id order by collected_at, run_id
            rows between unbounded preceding and 1 preceding
        ) as seen_max_id,
        /* An earlier collection found the log empty with its next id pinned, or assumed. */
        coalesce(bool_or(next_id_verified) over (
            partition by env, server_run_id order by collected_at, run_id
            rows between unbounded preceding and 1 preceding
        ), false) as empty_verified_before,
        coalesce(bool_or(empty_log_next_id is not null) over (
            partition by env, server_run_id order by collected_at, run_id
            rows between unbounded preceding and 1 preceding
        ), false) as empty_assumed_before,
        /* An earlier collection found the log empty after a RESET (or with max-len 0). */
        coalesce(bool_or(empty_log_basis is not null and empty_log_next_id is null) over (
            partition by env, server_run_id order by collected_at, run_id
            rows between unbounded preceding and 1 preceding
        ), false) as empty_unknown_before,
        lag(collected_at) over (
            partition by env, server_run_id order by collected_at, run_id
        ) as prev_same_server_at,
        lag(collected_at) over (partition by env order by collected_at, run_id)
            as prev_collected_at,
    from collections
),

placed as (
    select
        *,
        case
            when seen_max_id is not null then seen_max_id
            when empty_verified_before then -1
            /* Every earlier collection found the log empty and id 0 is queued now: it was
               logged since, so the log stood at id 0 then, whatever the evidence said. */
            when prev_same_server_at is not null and min_id = 0 then -1
        end as known_max_id,
        case
            when seen_max_id is not null then 'entries'
            when empty_verified_before then 'empty_log'
            when prev_same_server_at is not null and min_id = 0 then 'empty_log_confirmed'
        end as known_max_basis,
    from ordered
    where not is_prior
),

judged as (
    select
        *,
        case
            when prev_same_server_at is null then null  /* first collection: nothing to count */
            when known_max_id is null then
                case
                    when empty_unknown_before then 'empty_log_after_reset'
                    when empty_assumed_before then 'empty_log_unconfirmed'
                    else 'empty_log_not_recorded'  /* collected before the evidence was */
                end
            /* Entries leave only when the queue is full: the oldest id above the assumed one
               in a queue with room means the empty log's next id was not 0 after all. */
            when known_max_basis = 'empty_log' and min_id > 0
                and slowlog_len < slowlog_max_len then 'ids_above_assumed'
            /* Empty now: entries logged since may have been removed by a RESET, unless the
               evidence says no entry was ever removed (nothing logged yet). */
            when min_id is null and not (seen_max_id is null and next_id_verified)
                then 'empty_log_now'
        end as loss_unknown_reason,
    from placed
),

ranges as (
    select
        *,
        /* Ids nobody read: after the last known id, before the oldest one still queued. */
        known_max_id + 1 as gap_first_id,
        min_id - 1 as gap_last_id,
        case when known_max_id is not null and loss_unknown_reason is null
            then greatest(0, coalesce(min_id - known_max_id - 1, 0)) end as gap_ids,
        /* Ids logged since the previous collection, kept or lost (an empty log adds none). */
        case when known_max_id is not null and loss_unknown_reason is null
            then greatest(coalesce(max_id, known_max_id), known_max_id) - known_max_id
        end as ids_logged,
    from judged
),

span_overlap as (
    /* Ids a scratch experiment produced belong to the tool, not to the application. */
    select
        r.run_id,
        r.env,
        sum(case when r.min_id is not null then greatest(0, least(r.gap_last_id, s.last_entry_id)
            - greatest(r.gap_first_id, s.first_entry_id) + 1) else 0 end) as gap_experiment_ids,
        sum(greatest(0, least(r.known_max_id + r.ids_logged, s.last_entry_id)
            - greatest(r.known_max_id + 1, s.first_entry_id) + 1)) as logged_experiment_ids,
    from ranges as r
    /* Matched by server, not environment: another environment naming the same server
       sees the experiment's ids too (server run ids are unique across servers). */
    join {{ ref('experiment_spans') }} as s on s.server_run_id = r.server_run_id
    where r.gap_ids is not null and s.last_entry_id is not null
    group by r.run_id, r.env
),

products as (
    /* The server's own name and version from its fingerprint (Valkey 8.1.8 answers
       redis_version 7.2.4): looked up by server run id, for the batch's servers only. */
    select server_run_id, any_value(server_product) as server_product,
           any_value(server_version) as server_version,
    from {{ ref('env_facts') }}
    where server_run_id in (select server_run_id from fresh)
    group by server_run_id
),

new_entries as (
    select
        d.run_id,
        d.env,
        count(*) as new_entries,
        count(*) filter (where d.measurement_caused) as new_tool_entries,
    from {{ ref('slowlog_entries_dedup') }} as d
    semi join fresh as c on c.run_id = d.run_id and c.env = d.env
    group by d.run_id, d.env
)

select
    r.run_id,
    r.env,
    r.server_run_id,
    r.redis_version,        /* what INFO answers: a compatibility version on Valkey */
    /* The server's own product and version: its fingerprint's, else what the collection
       read in INFO server (server_name, valkey_version), else what redis_version says */
    coalesce(p.server_product, r.server_product, 'redis') as server_product,
    coalesce(p.server_version, r.server_version, r.redis_version) as server_version,
    r.collected_at,
    r.slowlog_len,
    r.slowlog_max_len,
    r.log_slower_than_us,
    r.args_redacted,
    r.entries as entries_returned,
    r.min_id,
    r.max_id,
    r.landed_above_id,      /* entries above it were landed (null: every entry read) */
    /* -1: an earlier collection found the log empty before any entry (next id 0) */
    r.known_max_id,
    r.known_max_basis,      /* entries | empty_log | empty_log_confirmed */
    r.empty_log_next_id,    /* this collection found the log empty: its next id, if known */
    r.empty_log_basis,
    coalesce(n.new_entries, 0) as new_entries,
    coalesce(n.new_tool_entries, 0) as new_tool_entries,
    /* null: first collection of this server run (or restart), or unknown (the reason) */
    r.gap_ids - coalesce(o.gap_experiment_ids, 0) as lost_entries,
    coalesce(o.gap_experiment_ids, 0) as lost_experiment_ids,
    r.ids_logged - coalesce(o.logged_experiment_ids, 0) as ids_logged,
    case
        when r.gap_ids is not null then 'counted'
        when r.prev_same_server_at is null then 'first_collection'
        else 'unknown'
    end as loss_status,
    r.loss_unknown_reason,
    epoch(r.collected_at) - epoch(r.prev_same_server_at) as interval_s,
    epoch(r.collected_at) - epoch(r.prev_collected_at) as gap_since_previous_s,
from ranges as r
left join span_overlap as o on o.run_id = r.run_id and o.env = r.env
left join new_entries as n on n.run_id = r.run_id and n.env = r.env
left join products as p on p.server_run_id = r.server_run_id

/* One row per environment, server run and SLOWLOG entry id: each entry once, attributed to the
   collection that saw it first. Ids are handed out in increasing order and a collection reads
   the whole queue, so an id at or below the highest one an earlier update's collections read
   (the state slowlog_server_runs) was landed then: by those collections, or below their
   cursors by complete runs started before them, which the warehouse loads first
   (yardstick/storage/cursors.py). An entry landed again (a lost cursor, a run that started
   before the collection it follows) is dropped here. */
{% set prior = prior_relation('slowlog_server_runs') %}

with known as (
    {% if is_incremental() and prior %}
    select env, server_run_id, max_id, from {{ prior }}
    {% else %}
    select null::varchar as env, null::varchar as server_run_id, null::bigint as max_id,
    where false
    {% endif %}
),

firsts as (
    select *
    from {{ ref('stg_slowlog_entries') }}
    qualify row_number() over (
        partition by env, server_run_id, entry_id order by collected_at, run_id
    ) = 1
)

select f.*
from firsts as f
left join known as k on k.env = f.env and k.server_run_id = f.server_run_id
where k.max_id is null or f.entry_id > k.max_id

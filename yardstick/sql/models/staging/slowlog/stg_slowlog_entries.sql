/* One row per SLOWLOG entry each collection of the batch landed: those above its cursor
   (landed_above_id), every entry read in files before the cursor existed (an entry then
   recurs across collections until it leaves the queue). Counts and ids of the queue come
   from the collection row, not from here. */
with source as (
    select * from {{ source('lake', 'raw_slowlog_entries') }}
),

collections as (
    select run_id, env, collected_at, tool_client_prefix,
    from {{ source('lake', 'raw_slowlog_collections') }}
)

select
    s.run_id,
    s.env,
    c.collected_at,
    s.server_run_id,
    s.entry_id,
    s.logged_at,
    s.duration_us,
    s.command,
    s.args,
    s.args_redacted,
    s.arg_count,
    s.arg_count_original,
    s.complexity,
    s.client_addr,
    s.client_name,
    s.entry_fields,
    /* The tool names every connection it opens; its entries are diagnostics, not traffic.
       Its writes replicated to a replica arrive over the replication link, which has no
       name: an unnamed client's entry on a key of the tool's (yardstick:..., or the keys
       redis-benchmark writes: key:/counter: and 12 digits, mylist, myset, myhash, myzset,
       with a cluster hash tag or not) is the tool's too. */
    coalesce(starts_with(s.client_name, c.tool_client_prefix), false)
    or (
        coalesce(s.client_name, '') = ''
        and regexp_matches(
            coalesce(s.args[2], ''),
            '^(yardstick:|(key|counter):(\{[^}]*\}:?)?[0-9]{12}$'
            || '|(mylist|myset|myhash|myzset)(:?\{[^}]*\})?$)'
        )
    ) as measurement_caused,
from source as s
join collections as c on c.run_id = s.run_id and c.env = s.env

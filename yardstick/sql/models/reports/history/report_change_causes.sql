/* The likely causes of each of tonight's changes in words, one row per environment, figure
   and subject: its top causes (marts.change_causes, at most var('causes_top'), likely ones
   only) or 'nothing else moved', as one line for a report row and as a list for the CLI's
   JSON and the verdict event. */
with shown as (
    select *
    from {{ ref('change_causes') }}
    where (likely or kind = 'nothing') and cause_rank <= {{ var('causes_top') }}
)

select
    env, figure, subject, run_id,
    /* "likely: appendfsync everysec → always on 2026-01-19's run; …" */
    case
        when bool_or(kind = 'nothing') then 'nothing else moved'
        else 'likely: ' || string_agg(sentence, '; ' order by cause_rank)
    end as causes,
    list(
        struct_pack(
            rank := cause_rank, kind := kind, candidate := candidate, sentence := sentence,
            before := coalesce(before_value, before_number::varchar),
            after := coalesce(after_value, after_number::varchar), unit := unit,
            move_share := move_share, robust_z := robust_z, same_run_ratio := same_run_ratio,
            moved_at := moved_at
        )
        order by cause_rank
    ) filter (where kind <> 'nothing') as cause_list,
from shown
group by env, figure, subject, run_id

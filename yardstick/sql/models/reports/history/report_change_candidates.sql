/* Everything that moved beside each of tonight's changes, for the reader who asks why the
   rule named what it named: one row per change and candidate of marts.change_causes (the
   likely ones and those beyond 1 σ of their own noise), ranked, at most 8 a change, each
   with the part of the rule it met or missed. */
{% set min_z = var('causes_min_z') %}
{% set min_share = var('causes_min_share') %}
{% set env_runs = var('causes_env_runs') %}

select
    env, figure, subject, run_id, change_since, verdict, cause_rank, kind, candidate, likely,
    sentence, same_run_ratio,
    case
        when likely and is_new then 'likely: new since the change'
        when likely and kind = 'environment' and after_value is not null
            then 'likely: changed at the change''s start'
        when likely then printf('likely: %.1f σ and %+.0f %%', robust_z, move_share * 100)
        when after_value is not null
            then printf('not likely: changed after the change''s first %d runs', {{ env_runs }})
        when abs(coalesce(robust_z, 0)) < {{ min_z }}
            then printf('not likely: within %g σ of its own noise', {{ min_z }})
        when abs(coalesce(move_share, 0)) < {{ min_share }}
            then printf('not likely: moved under %g %%', {{ min_share * 100 }})
        else 'not likely'
    end as judgement,
from {{ ref('change_causes') }}
where kind <> 'nothing' and cause_rank <= 8

/* The batch's re-baselines: series declared the new normal (the environments file's
   `rebaseline:`), one row per entry and run that landed it; '' for every subject. */
select
    run_id,
    env,
    figure,
    coalesce(subject, '') as subject,
    declared,
    declared_by,
    why,
from {{ source('lake', 'raw_rebaselines') }}

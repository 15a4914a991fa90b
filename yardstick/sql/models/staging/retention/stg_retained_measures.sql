/* Figures the lake keeps for runs whose per-run detail (per-key rows, RTT histograms) was
   dropped by retention (yardstick/storage/retention.py): one row per run, environment, figure,
   subject and window, as the warehouse had derived them. */
select
    r.run_id,
    r.env,
    c.family,
    r.figure,
    coalesce(r.subject, '') as subject,
    r.window_idx,
    r.value,
    r.samples,
from {{ source('lake', 'raw_retained_measures') }} as r
join {{ ref('figure_catalog') }} as c on c.figure = r.figure

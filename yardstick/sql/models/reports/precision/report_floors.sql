/* One row per run, environment, figure and subject whose value or minimum lies below its
   instrument's floor (instrument_floors): the report prints shown_as instead of the value,
   below_text instead of a min, median or max under the floor. */
select f.run_id, f.env, f.figure, f.subject, f.value, i.floor_value, i.below_text, i.shown_as,
from {{ ref('figures') }} as f
join {{ ref('instrument_floors') }} as i on i.figure = f.figure
where least(f.value, f.min_value) < i.floor_value

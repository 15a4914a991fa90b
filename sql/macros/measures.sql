{# The measures contract every measures_<family> model ends with: run_id, env, figure,
   subject ('' when the figure is about the whole environment), window_idx (null: the
   run-level value), value, samples; typed once here. #}
{% macro as_measures(relation, subject="''", window_idx="null") %}
select
    run_id::varchar as run_id,
    env::varchar as env,
    figure::varchar as figure,
    {{ subject }}::varchar as subject,
    {{ window_idx }}::int as window_idx,
    value::double as value,
    samples::bigint as samples,
from {{ relation }}
{% endmacro %}

{# Rows of `relation` that belong to this update's runs. #}
{% macro in_batch(relation, alias='t') %}
select {{ alias }}.*
from {{ relation }} as {{ alias }}
semi join {{ source('lake', 'batch_runs') }} as b
    on b.run_id = {{ alias }}.run_id and b.env = {{ alias }}.env
{% endmacro %}

{# Every per-window row of `relation` (run_id, env, figure, subject, `window_col`, value,
   samples), plus the run's value: the median of its windows (null windows, a failed
   benchmark, left out), with `window_col` null. #}
{% macro with_run_median(relation, window_col) %}
select * from {{ relation }}
union all by name
select run_id, env, figure, subject, null as {{ window_col }},
       median(value) as value, sum(samples) as samples,
from {{ relation }}
where value is not null
group by run_id, env, figure, subject
{% endmacro %}

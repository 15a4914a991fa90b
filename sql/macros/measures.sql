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

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

{# Every family whose figures the measures union takes, each from its model
   models/marts/<family>/measures_<family>.sql: the one list of them. A list, not a loop
   over the graph: dbt records a model's refs while parsing, before the graph exists, so a
   ref found only by walking the graph would be refused at run time.
   tests/test_sql_layout.py fails when this list, the registry's families (yardstick/tasks/), the
   measures_<family> models, the family folders and the catalog's families disagree. #}
{% macro measure_families() %}
{{ return([
    'agreement', 'contention', 'counters', 'intrinsic', 'keyspace', 'latency_monitor',
    'memory', 'memtier', 'round_trip', 'slow_commands', 'slowlog', 'throughput',
    'topology', 'transport',
]) }}
{% endmacro %}

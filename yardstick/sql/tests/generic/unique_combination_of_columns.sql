{# Rows whose combination of columns is not unique (dbt_utils' test of the same name, which
   needs no network here): the grain of a model spanning several columns. #}
{% test unique_combination_of_columns(model, combination_of_columns) %}

with grouped as (
    select
        {{ combination_of_columns | join(', ') }},
        count(*) as rows_with_this_key,
    from {{ model }}
    group by all
)

select * from grouped
where rows_with_this_key > 1

{% endtest %}

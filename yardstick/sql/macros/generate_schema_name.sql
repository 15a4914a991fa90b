{# A layer's schema is named as dbt_project.yml gives it (`staging`, `marts`, `reports`), not
   dbt's default <target schema>_<name>: a user of the duckdb CLI finds `marts.figures`. #}
{% macro generate_schema_name(custom_schema_name, node) -%}
    {{ (custom_schema_name or target.schema) | trim }}
{%- endmacro %}

{# The batch contract. The tool loads into raw_<table> only the rows of the runs this update
   adds (every run on a full build) and lists those runs in batch_runs(env, run_id). Marts
   append what the batch adds; models that need earlier rows (a previous collection, the
   last 30 comparable points) read them from a small state table or from a time-bounded
   slice of a mart, so an update costs the same whatever the length of the history. #}

{# A relation read without ref() (a state table that would otherwise form a cycle), or none
   when it does not exist yet (full build). #}
{% macro prior_relation(name) %}
  {#- Unit tests have no `this`: they give prior rows through their own overrides. -#}
  {%- if this is none -%}{{ return(none) }}{%- endif -%}
  {%- set rel = adapter.get_relation(database=this.database, schema=this.schema, identifier=name) -%}
  {{- return(rel) -}}
{% endmacro %}

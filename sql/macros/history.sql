{# The noise band of a baseline, in the figure's unit: band_sigmas robust standard deviations
   (1.4826 × MAD), widened by (1 + small_sample / √n) because the MAD of a few runs is often
   too small (bench/verdicts.py measures what these settings cost in false alarms and misses).
   `mad` and `n` are column expressions. #}
{% macro verdict_band(mad, n) -%}
    ({{ var('verdict_band_sigmas', 3) }} * 1.4826 * {{ mad }}
        * (1 + {{ var('verdict_small_sample', 2) }} / sqrt(greatest({{ n }}, 1))))
{%- endmacro %}

{# The one definition of a full run: every run but the 5-minute collections (a runs file older
   than the profile column, profile null, counts as a full run). #}
{% macro is_full_run(profile) -%}
    ({{ profile }} is distinct from 'collect')
{%- endmacro %}

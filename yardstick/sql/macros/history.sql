{# The two-sided p-value of a z score: erfc(|z| / √2), by the Chebyshev fit of Numerical
   Recipes' erfcc (relative error under 1.2e-7 everywhere; DuckDB has no erf). #}
{% macro p_two_sided(z) -%}
    {%- set x = "(abs(" ~ z ~ ") / sqrt(2))" -%}
    {%- set t = "(1 / (1 + 0.5 * " ~ x ~ "))" -%}
    ({{ t }} * exp(-{{ x }} * {{ x }} - 1.26551223 + {{ t }} * (1.00002368 + {{ t }} * (0.37409196
        + {{ t }} * (0.09678418 + {{ t }} * (-0.18628806 + {{ t }} * (0.27886807 + {{ t }} * (-1.13520398
        + {{ t }} * (1.48851587 + {{ t }} * (-0.82215223 + {{ t }} * 0.17087277))))))))))
{%- endmacro %}

{# A t statistic on `df` degrees of freedom as the z score of the same tail probability
   (z = √((ν − ½) ln(1 + t²/ν)): within 8 % of the exact p-value from ν = 5 on). #}
{% macro t_as_z(t, df) -%}
    (sign({{ t }}) * sqrt(({{ df }} - 0.5) * ln(1 + ({{ t }}) * ({{ t }}) / ({{ df }}))))
{%- endmacro %}

{# The t statistic on `df` degrees of freedom that t_as_z maps to `z` (its inverse). #}
{% macro z_as_t(z, df) -%}
    sqrt(({{ df }}) * (exp(({{ z }}) * ({{ z }}) / (({{ df }}) - 0.5)) - 1))
{%- endmacro %}

{# The z score whose two-sided p-value is `alpha` (Acklam's rational approximation of the
   normal quantile in its tail, relative error under 1.2e-9), as a constant expression. #}
{% macro z_critical(alpha) -%}
    {%- if not (0 < alpha < 0.0485) -%}
        {{ exceptions.raise_compiler_error(
            "dbt var verdict_alpha: " ~ alpha ~ " is outside (0, 0.0485) (a significance level per night, such as 0.001)") }}
    {%- endif -%}
    {%- set q = "sqrt(-2 * ln(" ~ (alpha / 2) ~ "))" -%}
    (-(((((-7.784894002430293e-03 * {{ q }} - 3.223964580411365e-01) * {{ q }}
        - 2.400758277161838e+00) * {{ q }} - 2.549732539343734e+00) * {{ q }}
        + 4.374664141464968e+00) * {{ q }} + 2.938163982698783e+00)
     / ((((7.784695709041462e-03 * {{ q }} + 3.224671290700398e-01) * {{ q }}
        + 2.445134137142996e+00) * {{ q }} + 3.754408661907416e+00) * {{ q }} + 1))
{%- endmacro %}

{# The one definition of a full run: every run but the 5-minute collections (a runs file older
   than the profile column, profile null, counts as a full run). #}
{% macro is_full_run(profile) -%}
    ({{ profile }} is distinct from 'collect')
{%- endmacro %}

{# An incremental history mart's first statement: forget the rows of every environment whose
   latest full run is in the batch (they are derived again, whole, from the batch on). #}
{% macro forget_envs_of_batch(relation) -%}
    {% if is_incremental() %}
    delete from {{ relation }} where env in (
        select l.env from {{ ref('latest_full_runs') }} as l
        semi join {{ source('lake', 'batch_runs') }} as b
            on b.run_id = l.run_id and b.env = l.env
    )
    {% endif %}
{%- endmacro %}

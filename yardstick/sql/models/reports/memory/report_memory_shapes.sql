/* One row per run, environment and memory shape: the three numbers side by side, their ratios,
   and which way each estimate errs. */
select
    *,
    abs(mem_usage_over_actual - 1) as usage_error_share,
    abs(mem_formula_over_actual - 1) as formula_error_share,
    case
        when mem_usage_over_actual < 1 then 'under: promises room that is not there (dangerous)'
        when mem_usage_over_actual > 1 then 'over: the safe side'
        else 'exact'
    end as usage_direction,
    case
        when mem_formula_over_actual < 1 then 'under: promises room that is not there (dangerous)'
        when mem_formula_over_actual > 1 then 'over: the safe side'
        else 'exact'
    end as formula_direction,
    case
        when mem_samples_default_over_all is null then null
        when mem_samples_default_over_all < 1 then 'default samples under-count'
        when mem_samples_default_over_all > 1 then 'default samples over-count'
        else 'no difference'
    end as samples_direction,
from {{ ref('memory_shapes') }}
order by first_taken_at

/* The keyspace family's measures: the scan's cost and coverage ('' subject) and, per key prefix
   (subject = the prefix), counts, bytes, share of used_memory and the projection. */
{{ config(materialized='ephemeral') }}

with scan_costs as (
    {{ in_batch(ref('keyspace_scan_costs')) }}
),

prefixes as (
    {{ in_batch(ref('keyspace_prefixes')) }}
),

scan_level as (
    select
        run_id,
        env,
        keys_sampled::double as ks_keys_sampled,
        coverage_share as ks_coverage_share,
        memory_usage_total_bytes * scale / nullif(used_memory_bytes, 0) as ks_attributed_share,
        1 - memory_usage_total_bytes * scale / nullif(used_memory_bytes, 0)
            as ks_unattributed_share,
        busy_share as ks_busy_share,
        server_us_per_key as ks_server_us_per_key,
        cpu_share as ks_server_cpu_share,
        server_cpu_us_per_key as ks_server_cpu_us_per_key,
        scan_cpu_s as ks_server_cpu_s,
        cpu_peak_share as ks_server_cpu_peak_share,
        keys_touched::double as ks_keys_touched,
        keys_per_s as ks_keys_per_s,
        memory_usage_total_bytes::double as ks_memory_usage_total_bytes,
        keys_sampled,
    from scan_costs
),

prefix_level as (
    select
        run_id,
        env,
        prefix,
        keys_sampled,
        keys_sampled::double as ks_prefix_keys,
        keys_estimated as ks_prefix_keys_estimated,
        mean_bytes as ks_prefix_mean_bytes,
        median_bytes::double as ks_prefix_median_bytes,
        max_bytes::double as ks_prefix_max_bytes,
        share_of_used_memory as ks_prefix_share_of_used_memory,
        projection_bytes as ks_prefix_projection_bytes,
    from prefixes
),

long as (
    select run_id, env, figure, '' as subject, value, keys_sampled as samples,
    from (
        unpivot scan_level
        on ks_keys_sampled, ks_coverage_share, ks_attributed_share, ks_unattributed_share,
           ks_busy_share, ks_server_us_per_key, ks_keys_per_s, ks_memory_usage_total_bytes,
           ks_server_cpu_share, ks_server_cpu_us_per_key, ks_server_cpu_s,
           ks_server_cpu_peak_share, ks_keys_touched
        into name figure value value
    )
    /* An empty key space has nothing to scan: no cost, share or rate of it is a figure. */
    where keys_sampled > 0 or figure = 'ks_keys_sampled'
    union all by name
    select run_id, env, figure, prefix as subject, value, keys_sampled as samples,
    from (
        unpivot prefix_level
        on ks_prefix_keys, ks_prefix_keys_estimated, ks_prefix_mean_bytes,
           ks_prefix_median_bytes, ks_prefix_max_bytes, ks_prefix_share_of_used_memory,
           ks_prefix_projection_bytes
        into name figure value value
    )
)

{{ as_measures('long', subject='subject') }}

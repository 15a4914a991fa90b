/* The environment before the numbers: one row of facts per environment per run, pivoted from
   the long fingerprint table. */
with source as (
    select * from {{ ref('stg_fingerprint') }}
),

pivoted as (
    select
        run_id,
        env,
        max(value) filter (where section = 'server' and key = 'redis_version') as redis_version,
        /* Valkey says server_mode; a server without either leaves it null, never "None". */
        coalesce(
            max(value) filter (where section = 'server' and key = 'redis_mode'),
            max(value) filter (where section = 'server' and key = 'server_mode'),
            nullif(max(value) filter (where section = 'product' and key = 'mode'), '')
        ) as redis_mode,
        /* The product and its own version (Valkey 8.1.8 answers redis_version 7.2.4): the
           fingerprint's product section, else read from INFO server (runs before it). */
        coalesce(
            nullif(max(value) filter (where section = 'product' and key = 'name'), ''),
            nullif(lower(max(value) filter (where section = 'server' and key = 'server_name')), ''),
            case when bool_or(section = 'server' and key = 'valkey_version') then 'valkey' end,
            case when bool_or(section = 'server' and key = 'redis_version') then 'redis' end
        ) as server_product,
        coalesce(
            nullif(max(value) filter (where section = 'product' and key = 'version'), ''),
            max(value) filter (where section = 'server' and key = 'valkey_version'),
            max(value) filter (where section = 'server' and key = 'redis_version')
        ) as server_version,
        max(value) filter (where section = 'server' and key = 'os') as server_os,
        max(value) filter (where section = 'server' and key = 'arch_bits') as arch_bits,
        max(value) filter (where section = 'server' and key = 'run_id') as server_run_id,
        max(value) filter (where section = 'server' and key = 'executable') as server_executable,
        max(value) filter (where section = 'server' and key = 'multiplexing_api')
            as multiplexing_api,
        try_cast(
            max(value) filter (where section = 'server' and key = 'uptime_in_seconds') as bigint
        )
            as uptime_s,
        try_cast(max(value) filter (where section = 'server' and key = 'io_threads_active') as int)
            as io_threads_active,
        max(value) filter (where section = 'memory' and key = 'mem_allocator') as mem_allocator,
        try_cast(max(value) filter (where section = 'memory' and key = 'used_memory') as bigint)
            as used_memory_bytes,
        try_cast(max(value) filter (where section = 'memory' and key = 'maxmemory') as bigint)
            as maxmemory_bytes,
        /* INFO stats evicted_keys, since the server started (null before stats were kept). */
        try_cast(max(value) filter (where section = 'stats' and key = 'evicted_keys') as bigint)
            as evicted_keys,
        try_cast(max(value) filter (where section = 'clients' and key = 'connected_clients') as int)
            as connected_clients,
        try_cast(max(value) filter (where section = 'persistence' and key = 'aof_enabled') as int)
            as aof_enabled,
        /* A setting CONFIG GET could not read (denied, CONFIG renamed) is stored as
           'unavailable: <error>': null here, and named in config_unavailable_keys so that
           reports say "unknown (CONFIG not permitted)" instead of guessing. */
        {%- for key, alias in [
            ('save', 'config_save'), ('appendonly', 'config_appendonly'),
            ('appendfsync', 'config_appendfsync'), ('maxmemory-policy', 'maxmemory_policy'),
            ('io-threads', 'config_io_threads'),
        ] %}
        max(value) filter (
            where section = 'config' and key = '{{ key }}' and value not like 'unavailable:%'
        ) as {{ alias }},
        {%- endfor %}
        string_agg(key, ', ' order by key) filter (
            where section = 'config' and value like 'unavailable:%'
        ) as config_unavailable_keys,
        coalesce(bool_or(
            section = 'config' and key in ('save', 'appendonly') and value like 'unavailable:%'
        ), false) as persistence_unknown,
        try_cast(
            max(value) filter (
                where section = 'config' and key = 'slowlog-log-slower-than'
            ) as bigint
        ) as slowlog_log_slower_than_us,
        try_cast(max(value) filter (where section = 'config' and key = 'slowlog-max-len') as bigint)
            as slowlog_max_len,
        try_cast(
            max(value) filter (
                where section = 'config' and key = 'latency-monitor-threshold'
            ) as bigint
        ) as latency_monitor_threshold_ms,
        max(value) filter (where section = 'probe' and key = 'mode') as mode,
        max(value) filter (where section = 'probe' and key = 'transport') as transport,
        max(value) filter (where section = 'probe' and key = 'prober_on_host') = 'true'
            as prober_on_host,
        max(value) filter (where section = 'probe' and key = 'url') as url,
        nullif(max(value) filter (where section = 'probe' and key = 'same_server_as'), '')
            as same_server_as,
        /* TLS (rediss:// only, else null): verify on/off, the CA file's name (null: the
           system's CAs), a client certificate sent, the name checked when not the URL's. */
        max(value) filter (where section = 'probe' and key = 'tls_verify') = 'true' as tls_verify,
        nullif(max(value) filter (where section = 'probe' and key = 'tls_ca_file'), '')
            as tls_ca_file,
        max(value) filter (where section = 'probe' and key = 'tls_client_cert') = 'true'
            as tls_client_cert,
        nullif(max(value) filter (where section = 'probe' and key = 'tls_server_name'), '')
            as tls_server_name,
        /* What this server is in its environment (yardstick/flows/units.py): server, cluster (the
           environment as a whole), primary or replica; the environment it is a member of
           (null for a configured environment); for a Sentinel-managed master, its name and
           the address the Sentinels named at this run (null for every other environment). */
        nullif(max(value) filter (where section = 'topology' and key = 'kind'), '')
            as topology_kind,
        nullif(max(value) filter (where section = 'topology' and key = 'member_of'), '')
            as member_of,
        nullif(max(value) filter (where section = 'topology' and key = 'node_role'), '')
            as node_role,
        nullif(max(value) filter (where section = 'topology' and key = 'address'), '')
            as server_address,
        nullif(max(value) filter (where section = 'topology' and key = 'sentinel_master'), '')
            as sentinel_master,
        nullif(
            max(value) filter (where section = 'topology' and key = 'sentinel_master_address'), ''
        )
            as sentinel_master_address,
        /* INFO keyspace db0 keys= (0 when INFO cpu was read and db0 is absent: an empty
           database; null for fingerprints before INFO cpu was kept) and INFO cpu
           used_cpu_sys + used_cpu_user (all threads, since the server started), read when
           the fingerprint was taken. */
        coalesce(
            try_cast(regexp_extract(
                max(value) filter (where section = 'keyspace' and key = 'db0'), 'keys=([0-9]+)', 1
            ) as bigint),
            case when bool_or(section = 'cpu') then 0 end
        ) as db0_keys,
        try_cast(max(value) filter (where section = 'cpu' and key = 'used_cpu_sys') as double)
            + try_cast(
                max(value) filter (where section = 'cpu' and key = 'used_cpu_user') as double
            )
            as server_cpu_s,
        max(value) filter (where section = 'prober' and key = 'hostname') as prober_hostname,
        max(value) filter (where section = 'prober' and key = 'os') as prober_os,
        try_cast(max(value) filter (where section = 'prober' and key = 'cores') as int)
            as prober_cores,
        max(value) filter (where section = 'prober' and key = 'cpu_model') as prober_cpu_model,
        try_cast(max(value) filter (where section = 'prober' and key = 'load_1m') as double)
            as prober_load_1m,
        try_cast(max(value) filter (where section = 'prober' and key = 'load_5m') as double)
            as prober_load_5m,
        try_cast(max(value) filter (where section = 'prober' and key = 'load_15m') as double)
            as prober_load_15m,
        max(value) filter (where section = 'prober' and key = 'tool_version') as tool_version,
        max(value) filter (where section = 'embedded' and key = 'path') as embedded_binary,
        max(value) filter (where section = 'embedded' and key = 'version') as embedded_version,
        max(value) filter (where section = 'embedded' and key = 'source') as embedded_source,
        max(value) filter (where section = 'embedded' and key = 'product') as embedded_product,
        /* The wrapped C tools: '7.0.15 /usr/bin/redis-benchmark', 'not found', 'unknown: ...'
           (null for runs from before the fingerprint recorded them). */
        max(value) filter (where section = 'tools' and key = 'redis-benchmark')
            as tool_redis_benchmark,
        max(value) filter (where section = 'tools' and key = 'redis-cli') as tool_redis_cli,
        max(value) filter (where section = 'tools' and key = 'memtier_benchmark')
            as tool_memtier_benchmark,
        string_agg(
            replace(key, ' refused', '') || ' ' || value, '; ' order by key
        ) filter (where section = 'tools' and key like '% refused') as tools_refused,
        /* INFO modules, one 'name ver' per module: 'graph 41603, vectorset 1' (null when
           none is loaded, or for fingerprints from before modules were kept). */
        string_agg(key || ' ' || value, ', ' order by key)
            filter (where section = 'modules') as server_modules,
    from source
    group by run_id, env
),

server_host as (
    /* Host facts describe the server only when the prober runs on its host. */
    select
        *,
        case when prober_on_host then prober_cores end as server_cores,
        case when prober_on_host then prober_cpu_model end as server_cpu_model,
        case when prober_on_host then prober_load_1m end as server_load_1m,
        case when prober_on_host then prober_load_15m end as server_load_15m,
        /* null when save or appendonly could not be read: neither on nor off is known. */
        case when not persistence_unknown then
            coalesce(config_save, '') = '' and coalesce(config_appendonly, 'no') = 'no'
        end as persistence_off,
    from pivoted
),

product_names as (
    select
        *,
        case server_product
            when 'redis' then 'Redis'
            when 'valkey' then 'Valkey'
            when 'keydb' then 'KeyDB'
            else upper(left(server_product, 1)) || substr(server_product, 2)
        end as server_product_name,
    from server_host
)

select
    *,
    /* "Redis 7.0.15", "Valkey 8.1.8": what reports print for the server. */
    server_product_name || ' ' || server_version as server_label,
    /* The embedded binary is the server measured: its product is the server's. */
    coalesce(
        case embedded_product when 'valkey' then 'Valkey' when 'redis' then 'Redis' end,
        case when embedded_binary is not null then server_product_name end
    ) as embedded_product_name,
from product_names

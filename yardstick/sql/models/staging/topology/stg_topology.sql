/* What the environment was made of at each run of the batch (collections included): one row
   per environment and run, its shape, CLUSTER INFO and a Sentinel's view of the master. */
with source as (
    select * from {{ source('lake', 'raw_topology') }}
),

renamed as (
    select
        run_id,
        env,
        shape,                      /* standalone | cluster | sentinel */
        sampled_at,
        cluster_state,              /* ok | fail (clusters only) */
        slots_assigned,
        slots_ok,
        slots_pfail,
        slots_fail,
        known_nodes,
        cluster_size,               /* primaries serving at least one slot */
        current_epoch,
        primaries,
        replicas,
        nodes_down,                 /* not healthy, or not answering INFO */
        migrating_slots,
        importing_slots,
        sentinel_master,
        sentinel_master_address,
        sentinel_flags,
        sentinel_quorum,
        sentinel_other_sentinels,
        sentinel_replicas,
        sentinels_configured,
        sentinel_answered_by,
        nullif(sentinel_failover_state, '') as sentinel_failover_state,
        nullif(problems, '') as problems,
        replica_lag_max_bytes,      /* the thresholds in force (null: runs before them) */
        replica_lag_max_s,
    from source
)

select * from renamed

/* Every server of the environment at each run of the batch (collections included): one row
   per environment, run and server address, with the name its own tables land under. */
with source as (
    select * from {{ source('lake', 'raw_topology_nodes') }}
),

renamed as (
    select
        run_id,
        env,                        /* the environment the server belongs to */
        member,                     /* the env its own tables land under */
        address,                    /* host:port */
        node_id,
        role,                       /* primary | replica */
        primary_address,            /* a replica's primary */
        shard,                      /* the primary's address, for a primary and its replicas */
        coalesce(slots, 0) as slots,
        slot_ranges,
        flags,
        link_state,
        config_epoch,
        health,                     /* online | failed | pfail | loading | unreachable ... */
        coalesce(migrating_slots, 0) as migrating_slots,
        coalesce(importing_slots, 0) as importing_slots,
        sampled_at,
        repl_offset,
        lag_bytes,                  /* primary's offset minus the replica's, read together */
        lag_s,                      /* the primary's view: seconds since the last ack */
        master_link_status,         /* a replica's: up | down */
        master_last_io_s,
        connected_replicas,
        problem,
    from source
)

select * from renamed

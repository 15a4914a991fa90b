/* Measurement steps across history: one row per environment, run and family. */
select * from {{ ref('stg_steps_batch') }}

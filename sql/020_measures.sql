/* The figure catalog and the long table every family's model inserts into.
   A measure row with window_idx null is the run-level value; rows with a window_idx are
   its repetitions, from which n/min/median/max are taken. */
create or replace table figure_catalog (
    figure varchar primary key,
    family varchar,
    position int,                   /* order in reports */
    unit varchar,
    nature varchar,                 /* absolute | ratio */
    not_transferable_because varchar, /* why an absolute holds only here; null for ratios */
    better varchar,                 /* lower | higher | null: direction of improvement */
    description varchar,
);

create or replace table measures (
    run_id varchar,
    env varchar,
    figure varchar,
    subject varchar default '',     /* what the figure is about within the run: a benchmark
                                       cell, a command, a key prefix; '' for the whole env */
    window_idx int,                 /* null: the run-level value */
    value double,
    samples bigint,                 /* raw samples behind the value, when known */
);
/* Families insert by name (`insert into measures by name select ...`), so a family that
   has no subject simply leaves the column out. */

"""redis-yardstick: nightly Redis measurements whose figures say whether they transfer.

Layers, lowest first; a module imports only from its own layer and the ones below it
(tests/test_layers.py checks every import, function-local ones included):

    base      yardstick/__init__.py, errors.py, interrupt.py (the run-wide stop), engine.py (steps
              as task runs in a flow run, plain calls otherwise), locks.py (every file lock)
    access    yardstick/access/   Redis: connect, guard, RESP, the probe, parsing, the scan
    host      yardstick/host/     this machine: embedded servers, forwarder, C tools, stopping
    tasks     yardstick/tasks/    the measurement families, each declaring itself
    storage   yardstick/storage/  schemas, the lake and its lock, compaction, retention, warehouse
    sql       yardstick/sql/      the dbt project (models, seeds, macros): no Python
    settings  yardstick/settings/ the environments file and the profiles
    reports   yardstick/reports/  presentation: render, charts, change points
    flows     yardstick/flows/    Prefect flows: plan, land, nightly, collect, sites
    app       yardstick/app/      the CLI and its Prefect runtime

Every folder is its import path (yardstick/flows/nightly.py is yardstick.flows.nightly).
"""

__version__ = "0.1.0"

# Every connection the tool opens carries this prefix in CLIENT SETNAME, so
# SLOWLOG entries and CLIENT LIST rows it caused can be told apart.
CLIENT_NAME_PREFIX = "yardstick"

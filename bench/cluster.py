"""The cost of measuring a cluster as its nodes: one quick measurement of a Redis Cluster of 3
primaries and 3 replicas on this machine, divided by the same families on one standalone
server (the fan-out: every node measured on its own), and one collection (flows/collect.py)
of the 6 nodes, in seconds and divided by a standalone server's. Figures printed and written
as JSON (--json).

    .venv/bin/python bench/cluster.py [--rounds 3] [--mode read-only|scratch]
        [--families fingerprint,topology,...] [--root DIR] [--json PATH] [--tiny]

A measurement is nightly's `measure-environment` task (the families as task runs, the locks,
landing into a throwaway lake) inside a flow of its own, without the warehouse update and
reports, which cost the same for one server or six: its figure is the environment's measured
duration (EnvOutcome.duration_s). Cluster and standalone alternate within each round, their
order rotated each round. Prefect runs against a private server of its own (as `yardstick
run` does), its state under <root>. The servers are the tests' (tests/topologies.py; the
newest redis-server, YARDSTICK_REDIS_SERVER pins one).

--tiny (tests/test_benches.py): one round of the families that take no measurement
window (no round trip, no key-space scan), one collection: it runs and its JSON holds every
figure, so a schema change cannot break the bench unseen. The bench fails (exit 1) when any
node's measurement or collection did not end ok."""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import Bench, interleaved, load_line, prefect_server  # noqa: E402

# The read-only families a quick nightly run measures on each node.
READ_FAMILIES = [
    "fingerprint", "topology", "round_trip", "slowlog", "latency_monitor", "counters", "keyspace",
]  # fmt: skip
# Those without a measurement window: the fan-out's fixed cost.
TINY_FAMILIES = ["fingerprint", "topology", "slowlog", "latency_monitor", "counters"]
CLUSTER_NODES = 6
FIGURES = (
    "cluster_measure_s",
    "standalone_measure_s",
    "fanout_ratio",
    "fanout_ratio_per_node",
    "collect_cluster_s",
    "collect_standalone_s",
    "collect_ratio",
)


def _private_prefect(root: Path):
    """The app's private Prefect server for this process (as the CLI starts one); returns a
    callable that stops it."""
    from contextlib import ExitStack

    stack = ExitStack()
    quiet = {"PREFECT_LOGGING_LEVEL": "WARNING"}
    stack.enter_context(prefect_server(root / "state" / "prefect", use_here=True, settings=quiet))
    from yardstick.flows.hostlock import PRIVATE_API_VARIABLE

    os.environ[PRIVATE_API_VARIABLE] = "1"
    return stack.close


def _measure_flow():
    """A flow around nightly's measure-environment task: one environment, no warehouse."""
    from prefect import flow

    from yardstick.flows.measure import measure_environment
    from yardstick.settings.profiles import get_profile
    from yardstick.storage import delta
    from yardstick.storage.lakefs import Lake

    @flow(name="bench-cluster-measure")
    def measure(env, lake_dir: str):
        return measure_environment.fn(
            env, get_profile("quick"), delta.new_run_id(), Lake.at(lake_dir), "bench"
        )

    return measure


def main() -> int:
    harness = Bench("cluster", __doc__, rounds=3, tiny="1 round, no measurement windows")
    harness.add_argument("--mode", choices=["read-only", "scratch"], default="read-only")
    harness.add_argument("--families", help="comma-separated (default: the read-only families)")
    harness.add_argument("--root", type=Path, help="work folder (default: a temporary one)")
    args = harness.parse()
    if args.tiny:
        args.rounds = 1
    families = (
        args.families.split(",") if args.families else TINY_FAMILIES if args.tiny else READ_FAMILIES
    )
    root = args.root or Path(tempfile.mkdtemp(prefix="yardstick-bench-cluster-"))
    root.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("YARDSTICK_LOCK_DIR", str(root / "locks"))
    stop_prefect = _private_prefect(root)
    from topologies import start_cluster

    from yardstick.flows.collect import collect
    from yardstick.host.embedded import RedisProcess, newest_redis_server
    from yardstick.settings.config import Environment

    binary = newest_redis_server()
    print(f"{binary.label} ({binary.path}); load {load_line()}; families {','.join(families)}")
    cluster = start_cluster(binary)
    standalone = RedisProcess(binary=binary).start()
    problems: list[str] = []
    try:
        envs = {
            "cluster": Environment(
                name="bench-cluster", url=cluster.seed.url, mode=args.mode, families=families
            ),
            "standalone": Environment(
                name="bench-standalone", url=standalone.url, mode=args.mode, families=families
            ),
        }
        measure = _measure_flow()
        outcomes: dict[str, list] = {name: [] for name in envs}

        def measured(name: str):
            def once() -> float:
                outcome = measure(envs[name], str(root / "lake"))
                outcomes[name].append(outcome)
                for o in outcome.with_members():
                    if o.status != "ok":
                        problems.append(f"measure {o.env}: {o.status} {o.error}")
                return outcome.duration_s

            return once

        measures = interleaved({name: measured(name) for name in envs}, args.rounds)
        members = {len(o.members) for o in outcomes["cluster"]}
        if members != {CLUSTER_NODES}:
            problems.append(f"the cluster was measured as {members} members, not {CLUSTER_NODES}")

        import yaml

        collections: dict[str, list[float]] = {}
        for name, env in envs.items():
            config = root / f"collect-{name}.yaml"
            config.write_text(
                yaml.safe_dump(
                    {"environments": [{"name": env.name, "url": env.url, "mode": "read-only"}]}
                )
            )
            collections[name] = []
            for _ in range(args.rounds):
                started = time.perf_counter()
                state = collect(
                    config_path=str(config), lake_dir=str(root / "lake"), return_state=True
                )
                wall_s = time.perf_counter() - started
                summary = state.result(raise_on_failure=False)
                statuses = [o.status for top in summary.outcomes for o in top.with_members()]
                if not state.is_completed() or set(statuses) != {"ok"}:
                    problems.append(f"collect {name}: {state.message} {statuses}")
                # The flow's own wall (its summary) and the call's, Prefect's flow run included.
                collections[name].append(summary.wall_s)
                collections.setdefault(f"{name}_call", []).append(wall_s)
    finally:
        standalone.stop()
        cluster.stop()
        stop_prefect()

    ratios = [c / s for c, s in zip(measures["cluster"], measures["standalone"], strict=True)]
    collect_ratios = [
        c / s for c, s in zip(collections["cluster"], collections["standalone"], strict=True)
    ]
    figures = {
        "cluster_measure_s": statistics.median(measures["cluster"]),
        "standalone_measure_s": statistics.median(measures["standalone"]),
        "fanout_ratio": statistics.median(ratios),
        # 1.0: a node costs what a standalone server costs; above: the fan-out's overhead.
        "fanout_ratio_per_node": statistics.median(ratios) / CLUSTER_NODES,
        "collect_cluster_s": statistics.median(collections["cluster"]),
        "collect_standalone_s": statistics.median(collections["standalone"]),
        "collect_ratio": statistics.median(collect_ratios),
        "collect_cluster_call_s": statistics.median(collections["cluster_call"]),
    }
    units = {"fanout_ratio": "ratio", "fanout_ratio_per_node": "ratio", "collect_ratio": "ratio"}
    for name, value in figures.items():
        harness.figure(name, value, units.get(name, "s"))
    record = {
        "settings": {
            "rounds": args.rounds,
            "mode": args.mode,
            "families": families,
            "tiny": args.tiny,
            "server": binary.label,
            "nodes": CLUSTER_NODES,
        },
        "figures": figures,
        "measured": {"measure_s": measures, "collect_s": collections},
        "self_check": {"ok": not problems, "problems": problems},
    }
    path = args.json or root / "cluster.json"
    harness.write(path, record)
    print(
        f"measure: cluster {figures['cluster_measure_s']:.2f} s, standalone "
        f"{figures['standalone_measure_s']:.2f} s, ratio {figures['fanout_ratio']:.2f} "
        f"({figures['fanout_ratio_per_node']:.2f} per node; {args.rounds} rounds, median)"
    )
    print(
        f"collect: cluster {figures['collect_cluster_s']:.2f} s, standalone "
        f"{figures['collect_standalone_s']:.2f} s, ratio {figures['collect_ratio']:.2f}"
    )
    print(f"JSON: {path}")
    for problem in problems:
        print(f"problem: {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

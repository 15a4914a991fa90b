"""How a one-shot CLI call should meet Prefect: the ways Prefect 3 offers, side by side.

One collection of one real redis-server (`yardstick collect`'s flow: SLOWLOG, latency monitor,
commandstats) run in a fresh process per call, four ways:

- plain: no Prefect API; the flow's function and its steps called plainly (yardstick/engine.py),
  what `yardstick collect` and `yardstick run` do now without PREFECT_API_URL;
- ephemeral: Prefect's own ephemeral mode (no API URL, PREFECT_SERVER_EPHEMERAL_ENABLED=true):
  Prefect starts a uvicorn subprocess (SubprocessASGIServer) with its SQLite database;
- private: the server the CLI used to start per call (yardstick/app/prefect_server.py), then the
  flow run against it;
- api: a Prefect server already running (a deployment's shared API; the app's own server,
  bench/_harness.prefect_server, started once): the flow run's client work, plus the server's
  CPU during the call (read from /proc).

Each call's CPU-seconds are the child's and every descendant it waited for (wait4), which
includes a server it started; rounds are interleaved and the median kept.

    .venv/bin/python bench/runtime_modes.py [--rounds 3] [--modes plain,ephemeral,private,api]
        [--json PATH] [--tiny]
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import _harness

MODES = ("plain", "ephemeral", "private", "api")

# The flow as a worker's process or the CLI runs it, in a fresh interpreter.
FLOW = """
import sys
from yardstick.app.runtime import configure_prefect
configure_prefect(sys.argv[2])
mode, config, lake = sys.argv[1], sys.argv[3], sys.argv[4]
from yardstick.flows.collect import collect
if mode == "plain":
    result = collect.fn(config_path=config, lake_dir=lake)
elif mode == "private":
    from pathlib import Path
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from yardstick.app.prefect_server import PrivatePrefectServer
    server = PrivatePrefectServer(Path(sys.argv[2]) / "prefect").spawn().wait()
    try:
        with temporary_settings({PREFECT_API_URL: server.api_url}):
            result = collect(config_path=config, lake_dir=lake)
    finally:
        server.stop()
else:
    result = collect(config_path=config, lake_dir=lake)
assert not any(o.status != "ok" for o in result.outcomes), result
"""


def _server_cpu_s(pid: int) -> float:
    """CPU-seconds (user + system) of a running process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_call(mode: str, work: Path, config: Path, api: tuple[str, int] | None) -> dict:
    """One collection in a fresh process; its wall and CPU-seconds (server share included)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env["PREFECT_SERVER_EPHEMERAL_ENABLED"] = "true" if mode == "ephemeral" else "false"
    state = work / f"state-{mode}"
    shutil.rmtree(state, ignore_errors=True)  # a first call, as a one-shot CLI call is
    if mode == "api":
        assert api is not None
        env["PREFECT_API_URL"] = api[0]
        server_before = _server_cpu_s(api[1])
    start = time.perf_counter()
    child = subprocess.Popen(
        [sys.executable, "-c", FLOW, mode, str(state), str(config), str(work / "lake")],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    _, status, usage = os.wait4(child.pid, 0)
    wall_s = time.perf_counter() - start
    stderr = child.stderr.read().decode() if child.stderr else ""
    if status != 0:
        raise SystemExit(f"{mode}: the collection failed:\n{stderr[-2000:]}")
    cpu_s = usage.ru_utime + usage.ru_stime
    server_s = _server_cpu_s(api[1]) - server_before if mode == "api" and api else 0.0
    return {"wall_s": wall_s, "cpu_s": cpu_s + server_s, "server_cpu_s": server_s}


def main() -> None:
    """Measure each mode, print a table, write JSON."""
    harness = _harness.Bench("runtime_modes", __doc__, rounds=3, tiny="the plain mode, 1 round")
    harness.add_argument("--modes", default=",".join(MODES))
    args = harness.parse()
    if args.tiny:
        args.modes, args.rounds = "plain", 1
    modes = [m for m in args.modes.split(",") if m]
    unknown = set(modes) - set(MODES)
    if unknown:
        raise SystemExit(f"--modes: unknown {', '.join(sorted(unknown))} (known: {MODES})")
    from yardstick.host.embedded import RedisProcess

    work = Path(tempfile.mkdtemp(prefix="runtime-modes-"))
    redis = RedisProcess().start()
    api = None
    stack = ExitStack()
    try:
        config = work / "envs.yaml"
        config.write_text(
            f"environments:\n  - name: one\n    url: {redis.url}\n    mode: read-only\n"
        )
        if "api" in modes:
            server = stack.enter_context(_harness.prefect_server(work / "api-home"))
            api = (server.api_url, server.process.pid)
        calls = {m: (lambda m=m: one_call(m, work, config, api)) for m in modes}
        for call in calls.values() if not args.tiny else ():
            call()  # warm the page cache and Python's bytecode once per mode
        rounds = _harness.interleaved(calls, args.rounds)
    finally:
        redis.stop()
        stack.close()
        shutil.rmtree(work, ignore_errors=True)
    figures = {
        mode: {
            key: statistics.median(r[key] for r in runs)
            for key in ("wall_s", "cpu_s", "server_cpu_s")
        }
        for mode, runs in rounds.items()
    }
    plain_cpu_s = figures.get("plain", {}).get("cpu_s")
    print(f"one collection of one server, median of {args.rounds}; load {_harness.load_line()}")
    print("| mode | wall s | CPU-s (all processes) | of which a server | CPU ÷ plain |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for mode, f in figures.items():
        ratio = f"{f['cpu_s'] / plain_cpu_s:.2f}" if plain_cpu_s else ""
        print(
            f"| {mode} | {f['wall_s']:.2f} | {f['cpu_s']:.2f} | {f['server_cpu_s']:.2f} | {ratio} |"
        )
    for mode, f in figures.items():
        harness.figure(f"{mode}/wall_s", f["wall_s"], "s")
        harness.figure(f"{mode}/cpu_s", f["cpu_s"], "CPU-s")
    harness.write(args.json, {"rounds": rounds, "figures": figures})


if __name__ == "__main__":
    main()

"""How a one-shot CLI call should meet Prefect: the ways Prefect 3 offers, side by side.

One collection of one real redis-server (`yardstick collect`'s flow: SLOWLOG, latency monitor,
commandstats) run in a fresh process per call, four ways:

- plain: no Prefect API; the flow's function and its steps called plainly (yardstick/engine.py),
  what `yardstick collect` and `yardstick run` do now without PREFECT_API_URL;
- ephemeral: Prefect's own ephemeral mode (no API URL, PREFECT_SERVER_EPHEMERAL_ENABLED=true):
  Prefect starts a uvicorn subprocess (SubprocessASGIServer) with its SQLite database;
- private: the server the CLI used to start per call (yardstick/app/prefect_server.py), then the
  flow run against it;
- api: a Prefect server already running (a deployment's shared API): the flow run's client
  work, plus the server's CPU during the call (read from /proc).

Each call's CPU-seconds are the child's and every descendant it waited for (wait4), which
includes a server it started; rounds are interleaved and the median kept.

    .venv/bin/python bench/runtime_modes.py [--rounds 3] [--modes plain,ephemeral,private,api]
        [--json PATH]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common

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


def start_api(work: Path) -> tuple[subprocess.Popen, str]:
    """A Prefect server of its own on a free port (a deployment's shared API)."""
    port = _common.free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PREFECT_HOME=str(work / "api-home"), PREFECT_UI_ENABLED="0")
    server = subprocess.Popen(
        [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1",
         "--port", str(port), "--no-services"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/api"
    import urllib.request

    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{url}/health", timeout=2).read()
            return server, url
        except OSError:
            time.sleep(0.5)
    server.kill()
    raise SystemExit("the Prefect server did not start within 180 s")


def _server_pid(server: subprocess.Popen) -> int:
    """The process serving the API (`prefect server start` runs uvicorn in a child)."""
    children = Path(f"/proc/{server.pid}/task/{server.pid}/children")
    pids = [int(p) for p in children.read_text().split()] if children.exists() else []
    return pids[0] if pids else server.pid


def main() -> None:
    """Measure each mode, print a table, write JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    unknown = set(modes) - set(MODES)
    if unknown:
        raise SystemExit(f"--modes: unknown {', '.join(sorted(unknown))} (known: {MODES})")
    from yardstick.host.embedded import RedisProcess

    work = Path(tempfile.mkdtemp(prefix="runtime-modes-"))
    redis = RedisProcess().start()
    api = None
    try:
        config = work / "envs.yaml"
        config.write_text(
            f"environments:\n  - name: one\n    url: {redis.url}\n    mode: read-only\n"
        )
        if "api" in modes:
            process, url = start_api(work)
            api = (url, _server_pid(process))
        calls = {m: (lambda m=m: one_call(m, work, config, api)) for m in modes}
        for call in calls.values():
            call()  # warm the page cache and Python's bytecode once per mode
        rounds = _common.interleaved(calls, args.rounds)
    finally:
        redis.stop()
        if api is not None:
            process.terminate()
            process.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)
    figures = {
        mode: {
            key: statistics.median(r[key] for r in runs)
            for key in ("wall_s", "cpu_s", "server_cpu_s")
        }
        for mode, runs in rounds.items()
    }
    plain_cpu_s = figures.get("plain", {}).get("cpu_s")
    print(f"one collection of one server, median of {args.rounds}; load {_common.load_line()}")
    print("| mode | wall s | CPU-s (all processes) | of which a server | CPU ÷ plain |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for mode, f in figures.items():
        ratio = f"{f['cpu_s'] / plain_cpu_s:.2f}" if plain_cpu_s else ""
        print(
            f"| {mode} | {f['wall_s']:.2f} | {f['cpu_s']:.2f} | {f['server_cpu_s']:.2f} | {ratio} |"
        )
    if args.json:
        _common.write_json(
            args.json,
            {**_common.environment_record(), "rounds": rounds, "figures": figures},
        )


if __name__ == "__main__":
    main()

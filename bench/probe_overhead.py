"""Probe overhead, two ways, on one scratch server.

Paced (as the tool runs it): the probe paced like `redis-cli --latency` (one PING every
10 ms) runs at the same time as `redis-cli --latency`, so both see the same machine state;
the figure is probe mean ÷ redis-cli mean (goal ≤ 1.2). redis-cli times each PING with a
millisecond clock, so it reports only min/max/avg; its average is still unbiased (a sample
reads 1 ms exactly when a millisecond tick falls inside it), and it is compared with the
probe's mean, not its p50. The probe's p50 at the tool's own 1 ms pacing is printed beside it.

Back to back: probe p50 ÷ `redis-benchmark -t ping -c 1` p50 in alternating rounds, with
redis-py's ping() for scale. Pacing changes the round trip itself (an idle CPU wakes up for
each request), which is why the paced comparison is the one that describes the tool."""

from __future__ import annotations

import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import redis

from yardstick.access.probe import probe_socket, probe_window
from yardstick.host.embedded import RedisProcess
from yardstick.host.tools import find_tool, run_tool
from yardstick.tasks.throughput import parse_benchmark_csv

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import Bench  # noqa: E402 - beside this file, not a package

# redis-cli's --latency mode sleeps this long between PINGs (LATENCY_SAMPLE_RATE).
CLI_LATENCY_INTERVAL_S = 0.010


def probe_rtts_us(port: int, window_s: float, interval_s: float = 0.0) -> list[float]:
    """RTTs of the lean probe (pre-encoded PING on the raw socket) at the given pacing."""
    client = redis.Redis(host="127.0.0.1", port=port)
    try:
        with probe_socket(client) as sock:
            return list(probe_window(sock, window_s, interval_s))
    finally:
        client.close()


def probe_p50_us(port: int, window_s: float) -> float:
    """p50 of the lean probe, back to back."""
    return statistics.median(probe_rtts_us(port, window_s))


def cli_latency_mean_us(cli_path: str, port: int, window_s: float) -> tuple[float, int]:
    """`redis-cli --latency --raw -i window_s`: its average RTT (µs) and sample count."""
    out = subprocess.run(
        [cli_path, "-p", str(port), "--latency", "--raw", "-i", str(window_s)],
        capture_output=True,
        text=True,
        timeout=window_s + 30,
        check=True,
    ).stdout.split()
    # --raw prints "min max avg samples", in milliseconds.
    return float(out[2]) * 1000, int(out[3])


def paced_round(cli_path: str, port: int, window_s: float) -> dict[str, float]:
    """The paced probe and redis-cli --latency side by side over the same window."""
    result: dict[str, float] = {}

    def run_cli() -> None:
        result["cli_mean_us"], result["cli_samples"] = cli_latency_mean_us(cli_path, port, window_s)

    thread = threading.Thread(target=run_cli)
    thread.start()
    rtts = probe_rtts_us(port, window_s, CLI_LATENCY_INTERVAL_S)
    thread.join()
    result["probe_mean_us"] = statistics.fmean(rtts)
    result["probe_p50_us"] = statistics.median(rtts)
    result["probe_samples"] = len(rtts)
    return result


def redis_py_p50_us(port: int, window_s: float) -> float:
    """p50 of redis-py's ping(), back to back."""
    client = redis.Redis(host="127.0.0.1", port=port)
    samples = []
    deadline = time.perf_counter() + window_s
    while time.perf_counter() < deadline:
        start = time.perf_counter_ns()
        client.ping()
        samples.append((time.perf_counter_ns() - start) / 1000)
    client.close()
    return statistics.median(samples)


def benchmark_p50_us(tool_path: str, port: int, requests: int) -> float:
    """p50 of `redis-benchmark -t ping -c 1` (PING_MBULK: the same encoding as the probe)."""
    out = run_tool(
        [tool_path, "-p", str(port), "-t", "ping", "-c", "1", "-n", str(requests), "--csv"],
        timeout_s=120,
    )
    row = next(r for r in parse_benchmark_csv(out) if r["test"] == "PING_MBULK")
    return row["p50_ms"] * 1000


def paced(server: RedisProcess, rounds: int, window_s: float) -> list[float]:
    """Print the paced comparison, round by round, and its median ratio; the ratios."""
    cli = find_tool("redis-cli")
    if cli is None:
        print("paced: redis-cli not installed, skipped")
        return []
    print(
        f"paced: probe every {CLI_LATENCY_INTERVAL_S * 1000:.0f} ms beside "
        f"redis-cli {cli.version_text} --latency, {window_s:.0f} s windows"
    )
    print("round  probe_mean_us  cli_mean_us  probe/cli  probe_p50_us  probe_1ms_p50_us")
    ratios = []
    for round_idx in range(rounds):
        row = paced_round(cli.path, server.port, window_s)
        at_1ms = statistics.median(probe_rtts_us(server.port, min(window_s, 5.0), 0.001))
        ratio = row["probe_mean_us"] / row["cli_mean_us"] if row["cli_mean_us"] else float("nan")
        ratios.append(ratio)
        print(
            f"{round_idx:5d}  {row['probe_mean_us']:13.1f}  {row['cli_mean_us']:11.1f}  "
            f"{ratio:9.2f}  {row['probe_p50_us']:12.1f}  {at_1ms:16.1f}"
        )
    print(
        f"paced median probe/redis-cli (means) {statistics.median(ratios):.2f} "
        f"(min {min(ratios):.2f}, max {max(ratios):.2f})"
    )
    return ratios


def main() -> None:
    """Run the paced comparison, then the back-to-back rounds, and print ratios."""
    harness = Bench("probe_overhead", __doc__, rounds=5, tiny="1 round of 0.2 s windows")
    harness.add_argument("--window-s", type=float, default=2.0)
    harness.add_argument("--paced-window-s", type=float, default=20.0)
    harness.add_argument("--requests", type=int, default=50_000)
    args = harness.parse()
    if args.tiny:
        args.rounds, args.window_s, args.paced_window_s, args.requests = 1, 0.2, 0.5, 2000
    tool = find_tool("redis-benchmark")
    if tool is None:
        raise SystemExit("redis-benchmark not installed")
    with RedisProcess() as server:
        print(
            f"server {server.binary.path} {server.binary.version_text}, "
            f"redis-benchmark {tool.version_text}, port {server.port}"
        )
        paced_ratios = paced(server, args.rounds, args.paced_window_s)
        print("back to back:")
        print("round  probe_p50_us  bench_p50_us  redis_py_p50_us  probe/bench  redis_py/bench")
        ratios, py_ratios = [], []
        for round_idx in range(args.rounds):
            probe = probe_p50_us(server.port, args.window_s)
            bench = benchmark_p50_us(tool.path, server.port, args.requests)
            py = redis_py_p50_us(server.port, args.window_s)
            ratios.append(probe / bench)
            py_ratios.append(py / bench)
            print(
                f"{round_idx:5d}  {probe:12.1f}  {bench:12.1f}  {py:15.1f}  "
                f"{probe / bench:11.2f}  {py / bench:14.2f}"
            )
        print(
            f"median probe/bench {statistics.median(ratios):.2f} "
            f"(min {min(ratios):.2f}, max {max(ratios):.2f}); "
            f"median redis-py/bench {statistics.median(py_ratios):.2f}"
        )
    if paced_ratios:
        harness.figure("paced_probe_over_cli", statistics.median(paced_ratios), "ratio", 1.2)
    harness.figure("probe_over_benchmark_p50", statistics.median(ratios), "ratio")
    harness.figure("redis_py_over_benchmark_p50", statistics.median(py_ratios), "ratio")
    harness.write(args.json, {"paced_ratios": paced_ratios, "ratios": ratios,
                              "redis_py_ratios": py_ratios})  # fmt: skip


if __name__ == "__main__":
    main()

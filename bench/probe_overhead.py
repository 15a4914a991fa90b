"""Probe overhead: the round-trip probe's PING p50 ÷ `redis-benchmark -t ping -c 1` p50,
measured in the same minute on the same scratch server (target ≤ 1.2). redis-py's
ping() is shown beside it for scale. Rounds alternate the instruments so drift cancels."""

from __future__ import annotations

import argparse
import statistics
import time

import redis

from yardstick.embedded import RedisProcess
from yardstick.tasks.roundtrip import probe_socket, probe_window
from yardstick.tasks.throughput import parse_benchmark_csv
from yardstick.tools import find_tool, run_tool


def probe_p50_us(port: int, window_s: float) -> float:
    """p50 of the lean probe (pre-encoded PING on the raw socket), back to back."""
    client = redis.Redis(host="127.0.0.1", port=port)
    try:
        with probe_socket(client) as sock:
            return statistics.median(probe_window(sock, window_s, 0.0))
    finally:
        client.close()


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


def main() -> None:
    """Alternate the three instruments for a few rounds and print their p50s and ratios."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--window-s", type=float, default=2.0)
    parser.add_argument("--requests", type=int, default=50_000)
    args = parser.parse_args()
    tool = find_tool("redis-benchmark")
    if tool is None:
        raise SystemExit("redis-benchmark not installed")
    with RedisProcess() as server:
        print(f"server {server.binary.path} {server.binary.version_text}, "
              f"redis-benchmark {tool.version_text}, port {server.port}")
        print("round  probe_p50_us  bench_p50_us  redis_py_p50_us  probe/bench  redis_py/bench")
        ratios, py_ratios = [], []
        for round_idx in range(args.rounds):
            probe = probe_p50_us(server.port, args.window_s)
            bench = benchmark_p50_us(tool.path, server.port, args.requests)
            py = redis_py_p50_us(server.port, args.window_s)
            ratios.append(probe / bench)
            py_ratios.append(py / bench)
            print(f"{round_idx:5d}  {probe:12.1f}  {bench:12.1f}  {py:15.1f}  "
                  f"{probe / bench:11.2f}  {py / bench:14.2f}")
        print(f"median probe/bench {statistics.median(ratios):.2f} "
              f"(min {min(ratios):.2f}, max {max(ratios):.2f}); "
              f"median redis-py/bench {statistics.median(py_ratios):.2f}")


if __name__ == "__main__":
    main()

"""Key-space scan speed against the C tool: `redis-cli --memkeys` and the tool's scan on the
same scratch server (1,000,000 keys of mixed types and prefixes), alternated in the same
minute. Prints keys/s of each, their ratio, both byte totals, and the server busy share
(INFO commandstats difference of each one's own commands ÷ its wall time) during each.

    .venv/bin/python bench/memkeys.py [--keys N] [--rounds R] [--busy-share S]

Target: the tool's keys/s ≥ 1.5 × redis-cli's, with equal byte totals, within its budget.
redis-cli runs unpaced; the tool is paced to --busy-share of the server's time."""

from __future__ import annotations

import argparse
import os
import random
import re
import resource
import socket
import statistics
import subprocess
import time
from dataclasses import dataclass

from yardstick.config import Environment
from yardstick.connect import open_client
from yardstick.embedded import RedisProcess
from yardstick.info import parse_commandstats, parse_info
from yardstick.keyscan import ScanBudget, scan_keyspace
from yardstick.prefixes import prefix_rule
from yardstick.tasks.keyspace import keys_table
from yardstick.tools import find_tool

TARGET_RATIO = 1.5
# redis-cli --memkeys sends SCAN, TYPE and MEMORY USAGE (and one DBSIZE).
CLI_COMMANDS = {"scan", "type", "memory|usage", "memory", "dbsize"}
TOOL_COMMANDS = {
    "scan", "type", "memory|usage", "memory", "object|encoding", "object",
    "strlen", "llen", "hlen", "scard", "zcard", "xlen",
}
SUMMARY_RE = re.compile(r"^(\d+) (\w+?)s? with (\d+) bytes", re.MULTILINE)


def _resp(*args: bytes) -> bytes:
    """One command in RESP."""
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def load(port: int, keys: int, seed: int = 7) -> float:
    """Write `keys` keys of mixed types and prefixes over one pipelined socket; seconds."""
    rng = random.Random(seed)
    start = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port)) as sock:
        batch: list[bytes] = []
        for i in range(keys):
            kind = i % 20
            if kind < 8:  # 40 % short strings
                batch.append(_resp(b"SET", b"user:%08d" % i, b"u" * rng.randint(8, 40)))
            elif kind < 12:  # 20 % larger strings
                batch.append(_resp(b"SET", b"cache:page:%08d" % i, b"c" * rng.randint(60, 400)))
            elif kind < 13:  # counters, int-encoded
                batch.append(_resp(b"SET", b"counter:%08d" % i, b"%d" % rng.randint(0, 10**6)))
            elif kind < 15:  # hashes: listpack or hashtable depending on value sizes
                fields = []
                for f in range(rng.randint(2, 16)):
                    fields += [b"f%d" % f, b"h" * rng.randint(4, 120)]
                batch.append(_resp(b"HSET", b"session:%08d" % i, *fields))
            elif kind < 17:  # lists
                elements = [b"e" * rng.randint(3, 60) for _ in range(rng.randint(1, 40))]
                batch.append(_resp(b"RPUSH", b"queue:%08d" % i, *elements))
            elif kind < 18:  # sets: intset or hashtable
                members = [b"%d" % rng.randint(0, 9999) for _ in range(rng.randint(1, 20))]
                batch.append(_resp(b"SADD", b"tags:%08d" % i, *members))
            elif kind < 19:  # sorted sets
                pairs = []
                for m in range(rng.randint(1, 30)):
                    pairs += [b"%d" % rng.randint(0, 1000), b"m%d" % m]
                batch.append(_resp(b"ZADD", b"board:%08d" % i, *pairs))
            else:  # keys without a prefix
                batch.append(_resp(b"SET", b"k%08d" % i, b"x" * 16))
            if len(batch) >= 5000:
                sock.sendall(b"".join(batch))
                batch = []
        sock.sendall(b"".join(batch) + _resp(b"ECHO", b"loaded-marker"))
        seen = b""
        while not seen.endswith(b"loaded-marker\r\n"):
            chunk = sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("server closed the connection while loading")
            seen = seen[-64:] + chunk
            if b"-ERR" in chunk:
                raise RuntimeError("a load command failed")
    return time.perf_counter() - start


@dataclass
class Run:
    """One scan by one tool: keys, seconds, bytes, and the server time it took."""

    tool: str
    keys: int
    wall_s: float
    total_bytes: int
    busy_share: float  # own commands' commandstats usec ÷ wall time
    cpu_share: float  # server process CPU (all clients) ÷ wall time
    client_cpu_s: float  # the scanning process's own CPU (user + system)
    extra: str = ""

    @property
    def keys_per_s(self) -> float:
        """Keys scanned per second."""
        return self.keys / self.wall_s

    @property
    def cpu_us_per_key(self) -> tuple[float, float]:
        """(client, server) CPU µs per key: what a scan costs whatever else the host runs."""
        return (1e6 * self.client_cpu_s / self.keys,
                1e6 * self.cpu_share * self.wall_s / self.keys)


def _counters(client, commands: set[str]) -> tuple[int, float]:
    """(usec of `commands`, server CPU seconds) now."""
    usec = sum(s.usec for s in parse_commandstats(client.info("commandstats"))
               if s.command in commands)
    cpu = parse_info(client.info("cpu"))["cpu"]
    return usec, float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"])


def run_cli(cli: str, port: int, client) -> Run:
    """redis-cli --memkeys, timed from outside; totals from its summary lines."""
    usec0, cpu0 = _counters(client, CLI_COMMANDS)
    children0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    out = subprocess.run(
        [cli, "-h", "127.0.0.1", "-p", str(port), "--memkeys"],
        capture_output=True, text=True, check=True, timeout=1800,
    ).stdout
    wall_s = time.perf_counter() - start
    children1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    usec1, cpu1 = _counters(client, CLI_COMMANDS)
    sampled = int(re.search(r"Sampled (\d+) keys", out).group(1))
    total = sum(int(m.group(3)) for m in SUMMARY_RE.finditer(out))
    cli_cpu_s = (children1.ru_utime - children0.ru_utime) + (
        children1.ru_stime - children0.ru_stime
    )
    return Run("redis-cli --memkeys", sampled, wall_s, total, (usec1 - usec0) / 1e6 / wall_s,
               (cpu1 - cpu0) / wall_s, cli_cpu_s)


def run_tool(port: int, client, busy_share: float, scan_count: int) -> Run:
    """The tool's scan through a read-only environment (guarded connection)."""
    env = Environment(name="bench", url=f"redis://127.0.0.1:{port}/0", mode="read-only")
    scanner = open_client(env, "keyspace")
    _, cpu0 = _counters(client, TOOL_COMMANDS)
    own0 = time.process_time()
    start = time.perf_counter()
    result = scan_keyspace(
        scanner, ScanBudget(max_keys=10**9, busy_share=busy_share, max_wall_s=1800),
        scan_count=scan_count, prefix_of=prefix_rule(":", 1),
    )
    wall_s = time.perf_counter() - start
    own_cpu_s = time.process_time() - own0
    _, cpu1 = _counters(client, TOOL_COMMANDS)
    table_start = time.perf_counter()
    keys_table(result)  # what the task adds before landing: the Arrow table of every key
    table_s = time.perf_counter() - table_start
    scanner.close()
    busy_us = sum(s.usec for s in result.own_after) - sum(s.usec for s in result.own_before)
    return Run(
        "yardstick scan", len(result.keys), wall_s,
        sum(v for v in result.memory_usage_bytes if v is not None), busy_us / 1e6 / wall_s,
        (cpu1 - cpu0) / wall_s, own_cpu_s,
        extra=f"stop {result.stop_reason}, paused {result.paused_s:.2f} s, "
        f"{result.rounds} rounds, {result.guesses_wrong} length guesses corrected, "
        f"+{table_s:.2f} s to build the Arrow table of every key",
    )


def main() -> None:
    """Load, then alternate redis-cli and the tool; print each run and the medians."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--busy-share", type=float, default=0.5,
                        help="the tool's budget: share of the server's time (default 0.5)")
    parser.add_argument("--scan-count", type=int, default=1000)
    args = parser.parse_args()

    cli = find_tool("redis-cli")
    if cli is None:
        raise SystemExit("redis-cli not found (Debian: apt-get install redis-tools)")
    with RedisProcess() as server:
        print(f"redis-server {server.binary.version_text} ({server.binary.path}) on "
              f"127.0.0.1:{server.port}; redis-cli {cli.version_text} ({cli.path})")
        print(f"host: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at start")
        client = open_client(
            Environment(name="bench", url=server.url, mode="scratch"), "bench-observer"
        )
        load_s = load(server.port, args.keys)
        print(f"loaded {client.dbsize():,} keys in {load_s:.1f} s "
              f"(used_memory {parse_info(client.info('memory'))['memory']['used_memory']} B)")
        runs: list[Run] = []
        for round_idx in range(args.rounds):
            for run in (run_cli(cli.path, server.port, client),
                        run_tool(server.port, client, args.busy_share, args.scan_count)):
                runs.append(run)
                client_us, server_us = run.cpu_us_per_key
                print(f"  round {round_idx + 1}: {run.tool:20} {run.keys:>9,} keys "
                      f"{run.wall_s:6.2f} s {run.keys_per_s:>9,.0f} keys/s "
                      f"{run.total_bytes:>12,} B  busy {run.busy_share:6.1%}  "
                      f"server CPU {run.cpu_share:6.1%}  CPU µs/key client {client_us:.2f} "
                      f"server {server_us:.2f}  {run.extra}")
        print(f"load average {os.getloadavg()[0]:.2f} at the end")

    def median(tool: str, attr: str) -> float:
        return statistics.median(getattr(r, attr) for r in runs if r.tool == tool)

    cli_kps, tool_kps = median("redis-cli --memkeys", "keys_per_s"), median(
        "yardstick scan", "keys_per_s")
    # Each round's pair ran back to back: their ratio shares the host's load of that minute.
    pairs = [t.keys_per_s / c.keys_per_s for c, t in zip(runs[0::2], runs[1::2], strict=True)]
    totals = {r.total_bytes for r in runs}
    ratio = tool_kps / cli_kps
    tool_busy = max(r.busy_share for r in runs if r.tool == "yardstick scan")
    print()
    print(f"redis-cli --memkeys: {cli_kps:,.0f} keys/s (median of {args.rounds}), busy share "
          f"{median('redis-cli --memkeys', 'busy_share'):.1%}, unpaced")
    print(f"yardstick scan:      {tool_kps:,.0f} keys/s (median of {args.rounds}), busy share "
          f"{median('yardstick scan', 'busy_share'):.1%} (max {tool_busy:.1%}, budget "
          f"{args.busy_share:.0%})")
    print(f"ratio: {ratio:.2f}× (target ≥ {TARGET_RATIO}×): "
          f"{'met' if ratio >= TARGET_RATIO else 'NOT met'}; per round "
          f"{', '.join(f'{p:.2f}×' for p in pairs)}")
    for tool in ("redis-cli --memkeys", "yardstick scan"):
        chosen = [r.cpu_us_per_key for r in runs if r.tool == tool]
        print(f"CPU per key, {tool}: client {statistics.median(c for c, _ in chosen):.2f} µs, "
              f"server {statistics.median(s for _, s in chosen):.2f} µs (median)")
    print(f"byte totals: {'equal' if len(totals) == 1 else 'DIFFER'} "
          f"({', '.join(f'{t:,}' for t in sorted(totals))})")
    print(f"within budget: {'yes' if tool_busy <= args.busy_share else 'NO'}")


if __name__ == "__main__":
    main()

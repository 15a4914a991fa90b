"""Tonight's verdict told to people: one Prefect event per environment of a run, which a Prefect
automation turns into a notification (Slack, e-mail, webhook: see docs/verdict.md)."""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.events import emit_event

from yardstick.storage import warehouse

# A payload stays readable and small: the moved figures, worst first, up to this many.
MAX_FIGURES = 50
# Event names per overall verdict (the sql/models/reports/history/verdicts.sql `verdict` column).
EVENTS = {
    "regression": "yardstick.regression",
    "environment changed": "yardstick.environment-changed",
    "unconfirmed": "yardstick.unconfirmed",
    "improvement": "yardstick.improvement",
    "steady": "yardstick.steady",
    "not judged": "yardstick.not-judged",
    "missing": "yardstick.missing",  # a site whose run never ran: missing_reason says why
}
_COUNTS = (
    "figures",
    "judged",
    "regressions",
    "new_regressions",
    "standing_regressions",
    "improvements",
    "changed",
    "unconfirmed",
    "environment_changed",
    "noisy",
    "new",
    "new_series",
)


def verdict_events(warehouse_path: str, run_id: str | None = None) -> list[dict]:
    """The events to emit: one per environment of `run_id` (each environment's latest full
    run when None), as emit_event keyword arguments."""
    con = warehouse.connect_read_only(warehouse_path)
    try:
        where, params = ("where run_id = ?", [run_id]) if run_id else ("", [])
        cursor = con.execute(f"select * from verdicts {where} order by env", params)
        names = [d[0] for d in cursor.description]
        summaries = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
        events = []
        for summary in summaries:
            moved = con.execute(
                "select figure, subject, verdict, nature, unit, value, baseline_median,"
                " change_share, noise_share, first_night, standing, recent_n, reference_n,"
                " noise_sigma_share, change_score, p_value, single_p_value, change_since,"
                " evidence, verdict_test, causes, cause_list from report_changes"
                " where env = ? and run_id = ? and verdict in"
                " ('regression', 'improvement', 'changed', 'unconfirmed')",
                [summary["env"], summary["run_id"]],
            ).fetchall()
            crashed = con.execute(
                "select run_id, why from crashed_runs where env = ? order by run_id",
                [summary["env"]],
            ).fetchall()
            event = _event(summary, moved, crashed)
            event["payload"].update(_topology_payload(con, summary["env"], summary["run_id"]))
            events.append(event)
        return events
    finally:
        con.close()


def _topology_payload(con, env: str, run_id: str) -> dict:
    """What changed in the environment's servers and which replicas lag beyond its
    thresholds (empty for an environment of one server)."""
    cursor = con.execute(
        "select address as replica, primary_address as primary, lag_bytes, lag_s,"
        " lag_max_bytes, lag_max_s from report_topology_nodes"
        " where env = ? and run_id = ? and lagging order by address",
        [env, run_id],
    )
    names = [d[0] for d in cursor.description]
    lagging = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    change = con.execute(
        "select topology_change from report_topology_change where env = ? and run_id = ?",
        [env, run_id],
    ).fetchone()
    return {
        # replica, primary, lag_bytes, lag_s and the thresholds, as the columns name them.
        "replicas_lagging": lagging,
        "topology_change": change[0] if change else None,
    }


def lag_event(spec: dict) -> dict | None:
    """A `yardstick.replica-lag` event beside an environment's verdict event when some of its
    replicas lag beyond its thresholds (an automation can page on it alone)."""
    lagging = spec["payload"].get("replicas_lagging")
    if not lagging:
        return None
    return {
        "event": "yardstick.replica-lag",
        "resource": spec["resource"],
        "related": spec["related"],
        "payload": {"env": spec["payload"]["env"], "replicas_lagging": lagging},
    }


def _event(summary: dict, moved: list[tuple], crashed: list[tuple]) -> dict:
    """emit_event arguments for one environment's verdict."""
    env = summary["env"]
    figures = [
        {
            "figure": figure,
            "subject": subject,
            "verdict": verdict,
            "nature": nature,
            "unit": unit,
            "value": value,
            "baseline": baseline,
            "change_pct": round(share * 100, 2) if share is not None else None,
            "noise_band_pct": round(band * 100, 2) if band is not None else None,
            "new_tonight": bool(first),
            "standing": bool(standing),  # said before tonight and still there
            # The evidence: how many runs the change rests on, against how many, the noise,
            # the test's score and p-value (this run's alone when unconfirmed), since when.
            "runs": recent_n,
            "reference_runs": reference_n,
            "noise_sigma_pct": round(sigma * 100, 2) if sigma is not None else None,
            "score": round(score, 2) if score is not None else None,
            "p_value": single_p if verdict == "unconfirmed" else p_value,
            "since": since.isoformat() if since is not None else None,
            "evidence": evidence,
            "test": test,  # 'several-run' or 'scan': the test that said the change
            # What else moved: "likely: …" or "nothing else moved" (marts.change_causes).
            "causes": causes,
            "cause_list": [_cause(c) for c in cause_list or []],
        }
        for (
            figure, subject, verdict, nature, unit, value, baseline, share, band, first,
            standing, recent_n, reference_n, sigma, score, p_value, single_p, since, evidence,
            test, causes, cause_list,
        ) in moved
    ]  # fmt: skip
    return {
        "event": EVENTS.get(summary["verdict"], "yardstick.verdict"),
        "resource": {
            "prefect.resource.id": f"yardstick.environment.{env}",
            "prefect.resource.name": env,
            "yardstick.verdict": summary["verdict"],
        },
        "related": [
            {
                "prefect.resource.id": f"yardstick.run.{summary['run_id']}",
                "prefect.resource.role": "run",
            }
        ],
        "payload": {
            "env": env,
            "run_id": summary["run_id"],
            "profile": summary["profile"],
            "verdict": summary["verdict"],
            "missing_reason": summary.get("missing_reason"),
            **{name: summary[name] for name in _COUNTS},
            "moved": figures[:MAX_FIGURES],
            "moved_left_out": max(0, len(figures) - MAX_FIGURES),
            "crashed_runs": [{"run_id": run, "why": why} for run, why in crashed],
        },
    }


def _cause(cause: dict) -> dict:
    """One likely cause as JSON: its time as ISO 8601, its shares rounded."""
    out = dict(cause)
    if out.get("moved_at") is not None:
        out["moved_at"] = out["moved_at"].isoformat()
    for name in ("move_share", "robust_z", "same_run_ratio"):
        if out.get(name) is not None:
            out[name] = round(out[name], 4)
    return out


def outcome_events(outcomes: list, run_id: str, profile: str, why: str | None) -> list[dict]:
    """The events to emit when the warehouse cannot say tonight's verdicts (`why`): one per
    environment from its outcome (flows/outcome.EnvOutcome): `missing` with the reason for a
    missing site's, else `not judged` with how its run ended."""
    events = []
    for outcome in outcomes:
        missing = outcome.status == "missing"
        summary = {
            "env": outcome.env,
            "run_id": run_id,
            "profile": profile,
            "verdict": "missing" if missing else "not judged",
            "missing_reason": outcome.error if missing else None,
            **dict.fromkeys(_COUNTS, 0),
        }
        event = _event(summary, [], [])
        event["payload"].update(
            status=outcome.status,
            error=outcome.error,
            landed=outcome.landed,
            not_judged_because=why,
        )
        events.append(event)
    return events


def message(payload: dict) -> tuple[str, str]:
    """(subject, body) of one environment's verdict, for a notification block."""
    subject = f"redis-yardstick: {payload['verdict']} on {payload['env']}"
    if payload.get("missing_reason"):
        return subject, f"Run {payload['run_id']}: missing: {payload['missing_reason']}"
    if payload.get("not_judged_because"):
        ended = payload["status"] + (f" ({payload['error']})" if payload.get("error") else "")
        return subject, (
            f"Run {payload['run_id']} ({payload['profile']}): {ended}; not judged: "
            f"{payload['not_judged_because']}"
        )
    lines = [
        f"Run {payload['run_id']} ({payload['profile']}): {payload['regressions']} regression(s),"
        f" {payload['improvements'] + payload['changed']} improvement(s),"
        f" {payload['unconfirmed']} unconfirmed; {payload['judged']} of {payload['figures']}"
        " figures judged."
    ]
    for f in payload["moved"]:
        subject_part = f" [{f['subject']}]" if f["subject"] else ""
        lines.append(
            f"- {f['verdict']}: {f['figure']}{subject_part} {f['change_pct']:+.1f} %"
            + (f": {f['evidence']}" if f.get("evidence") else "")
            + (f"; {f['causes']}" if f.get("causes") else "")
        )
    lines += [f"- crashed run {c['run_id']}: {c['why']}" for c in payload["crashed_runs"]]
    if payload.get("topology_change"):
        lines.append(f"- the servers changed: {payload['topology_change']}")
    lines += [
        f"- replica {r['replica']} lagging: {r['lag_bytes']} bytes, {r['lag_s']} s behind"
        f" {r['primary']} (thresholds {r['lag_max_bytes']} bytes, {r['lag_max_s']} s)"
        for r in payload.get("replicas_lagging") or []
    ]
    return subject, "\n".join(lines)


def notify(block_name: str, verdicts: list[str], specs: list[dict]) -> int:
    """Send one message per environment whose verdict is in `verdicts` through a saved Prefect
    notification block; return how many were sent."""
    from prefect.blocks.core import Block

    chosen = [spec["payload"] for spec in specs if spec["payload"]["verdict"] in verdicts]
    if not chosen:
        return 0
    block = Block.load(block_name)
    for payload in chosen:
        subject, body = message(payload)
        block.notify(body=body, subject=subject)
    return len(chosen)


@task(name="announce-verdicts", cache_policy=NO_CACHE)
def announce_verdicts(
    warehouse_path: str | None,
    run_id: str,
    notify_settings: dict | None = None,
    fallback: list[dict] | None = None,
) -> list[str]:
    """Emit one Prefect event per environment of this run with its verdict (an automation on
    `yardstick.regression` notifies people), and with `notify_settings` (the environments
    file's `notify:`) send the chosen verdicts through a notification block; return the
    events' names. Without a warehouse to read (None, or one that fails), the `fallback`
    events (outcome_events: what the run itself knows) go out instead, so a missing site is
    still told. Never fails the run."""
    logger = get_run_logger()
    emitted = []
    try:
        if warehouse_path is None:
            specs = fallback or []
        else:
            specs = verdict_events(warehouse_path, run_id)
    except Exception as exc:  # a failed announcement fails nothing
        said = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if not fallback:
            logger.warning("verdict events not emitted: %s", said)
            return emitted
        logger.warning("verdicts not read (%s): each environment's outcome sent instead", said)
        specs = fallback
    # An environment whose run did not land (the warehouse has none of it) is told too.
    judged = {spec["payload"]["env"] for spec in specs}
    specs = specs + [
        spec
        for spec in fallback or []
        if spec["payload"]["env"] not in judged
        and (not spec["payload"]["landed"] or spec["payload"]["verdict"] == "missing")
    ]
    for spec in specs:
        emit_event(**spec)
        lagging = lag_event(spec)
        if lagging is not None:
            emit_event(**lagging)
            emitted.append(lagging["event"])
        payload = spec["payload"]
        logger.info(
            "%s: %s (%d regressions, %d of %d figures judged)",
            payload["env"],
            payload["verdict"],
            payload["regressions"],
            payload["judged"],
            payload["figures"],
        )
        emitted.append(spec["event"])
    if notify_settings:
        try:
            sent = notify(notify_settings["block"], notify_settings["verdicts"], specs)
        except Exception as exc:  # a wrong block name or a webhook down: said, not raised
            logger.warning(
                "notification block %s: %s", notify_settings["block"], str(exc).splitlines()[0]
            )
        else:
            if sent:
                logger.info("%d message(s) sent through %s", sent, notify_settings["block"])
    return emitted

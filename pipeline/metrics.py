"""The Prometheus textfile a run leaves behind for node_exporter.

Written atomically (prometheus-client writes a temporary file and renames it).
``last_success`` is carried forward from the previous file across failed runs,
so a staleness alert measures time since the last good run, not the last run.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, write_to_textfile
from prometheus_client.parser import text_string_to_metric_families

__all__ = ["previous_last_success", "write_metrics"]

_PREFIX = "mailledger_sync"
_COUNTERS = (
    "uids_seen",
    "processed",
    "vanished",
    "errors",
    "bodies_fetched",
    "bodies_checked",
    "known_skipped",
    "new_messages",
    "duplicates",
    "conflicts_other_source",
    "malformed",
    "bytes_read",
)
# Every full body downloaded is one of these two (the report line's ``bodies=``
# is their sum).
_HELP = {
    "bodies_fetched": "Last run: bodies downloaded and stored as messages, per account.",
    "bodies_checked": "Last run: bodies downloaded to confirm that known UIDs still name"
    " the same messages, per account.",
}


def previous_last_success(path: Path) -> float | None:
    """The last-success timestamp recorded in an existing textfile, if any."""
    try:
        text = path.read_text()
    except OSError:
        return None
    try:
        for family in text_string_to_metric_families(text):
            if family.name == f"{_PREFIX}_last_success_timestamp_seconds":
                for sample in family.samples:
                    return float(sample.value)
    except ValueError:
        return None
    return None


def write_metrics(path: Path, report: dict[str, Any], now: datetime, *, succeeded: bool) -> None:
    """Write the run's metrics; ``report`` is ``RunReport.as_dict()`` with its exit
    code, ``succeeded`` whether the run counts as a success (no error; an ALARM
    alone does not fail a run)."""
    reg = CollectorRegistry()
    ts = now.timestamp()
    code = int(report["exit_code"])
    Gauge(
        f"{_PREFIX}_last_run_timestamp_seconds", "When the last sync run ended.", registry=reg
    ).set(ts)
    last_ok = ts if succeeded else previous_last_success(path)
    if last_ok is not None:
        Gauge(
            f"{_PREFIX}_last_success_timestamp_seconds",
            "When the last sync run without errors ended (carried across failures).",
            registry=reg,
        ).set(last_ok)
    Gauge(
        f"{_PREFIX}_last_exit_code",
        "Exit code of the last run (0 ok, 1 error, 3 alarm).",
        registry=reg,
    ).set(code)
    Gauge(
        f"{_PREFIX}_alarms",
        "ALARMs raised by the last run (UIDVALIDITY changes, broken servers).",
        registry=reg,
    ).set(len(report["alarms"]))
    Gauge(f"{_PREFIX}_balanced", "1 when the last run's counts balanced.", registry=reg).set(
        1 if report["balanced"] else 0
    )
    gauges = {
        name: Gauge(
            f"{_PREFIX}_{name}",
            _HELP.get(name, f"Last run: {name.replace('_', ' ')} per account."),
            ["account"],
            registry=reg,
        )
        for name in _COUNTERS
    }
    account_errors = Gauge(
        f"{_PREFIX}_account_errors",
        "1 when the account failed as a whole.",
        ["account"],
        registry=reg,
    )
    folder_errors = Gauge(
        f"{_PREFIX}_folder_errors", "Folders that failed, per account.", ["account"], registry=reg
    )
    uidv = Gauge(
        f"{_PREFIX}_uidvalidity_changes",
        "UIDVALIDITY changes seen, per account.",
        ["account"],
        registry=reg,
    )
    for name, acc in report["accounts"].items():
        for key, g in gauges.items():
            g.labels(account=name).set(acc["counts"].get(key, 0))
        account_errors.labels(account=name).set(1 if acc["error"] else 0)
        folder_errors.labels(account=name).set(acc["folder_errors"])
        uidv.labels(account=name).set(
            sum(
                1 for f in acc["folders"].values() if f.get("alarm") and "UIDVALIDITY" in f["alarm"]
            )
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    write_to_textfile(str(path), reg)

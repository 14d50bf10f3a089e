"""The exit codes of ``mailledger``, and the one place a report becomes one.

0 success; 1 an error of any message, folder or account, or an unbalanced run;
2 a usage or configuration error; 3 completed, but an ALARM was raised; 130
interrupted. The library reports what happened; only the command line turns
that into a code (exceptions are mapped in ``main``, ``pipeline.cli.entry``).
"""

from __future__ import annotations

from typing import Any, Protocol

__all__ = [
    "EXIT_ALARM",
    "EXIT_ERROR",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "exit_code",
    "with_exit",
]

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_ALARM = 0, 1, 2, 3
EXIT_INTERRUPTED = 130


class Outcome(Protocol):
    """What a run reports that decides its exit code (a sync's or a dispatch's report)."""

    @property
    def failed(self) -> bool: ...


def exit_code(report: Outcome) -> int:
    """1 when the run failed, else 3 when it raised an ALARM (a report with
    ``alarms``), else 0."""
    if report.failed:
        return EXIT_ERROR
    return EXIT_ALARM if getattr(report, "alarms", None) else EXIT_OK


def with_exit(report: dict[str, Any], code: int) -> dict[str, Any]:
    """A report's JSON with the exit code this command gives it, after the run's
    identity (``run_id`` and the mode: ``applied`` / ``dry_run``)."""
    head = [k for k in ("run_id", "applied", "dry_run") if k in report]
    return {**{k: report[k] for k in head}, "exit_code": code, **report}

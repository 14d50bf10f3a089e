"""Job mail: finishes every message except those whose subject says "keep"."""

from __future__ import annotations

from collections.abc import Sequence
from email.message import EmailMessage

from handlers import record

CALLS: list[list[tuple[str, str]]] = []


def process_jobs(pairs: Sequence[tuple[str, EmailMessage]]) -> list[str]:
    CALLS.append([(mid, str(msg["subject"])) for mid, msg in pairs])
    record("jobs", pairs)
    # angle brackets or not: both are accepted back
    return [f"<{mid}>" for mid, msg in pairs if "keep" not in str(msg["subject"])]


def forgetful(pairs: Sequence[tuple[str, EmailMessage]]) -> None:
    """Forgets to return what it finished: nothing may be deleted."""
    CALLS.append([(mid, str(msg["subject"])) for mid, msg in pairs])

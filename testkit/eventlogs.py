"""Stores whose log is filled with generated events (no mail, no projections): for
what reads only the log, such as ``publish delta``, at any size and file count."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from pathlib import Path

from stores.events import CursorMoved, Event, MessageDeleted, MessageSeen
from stores.log import EventLog

__all__ = ["append_events", "generated_events"]

_T0 = datetime(2026, 1, 1, tzinfo=UTC)


def generated_events(first: int, n: int, tag: str = "t") -> list[Event]:
    """``n`` events numbered from ``first``: message sightings with headers,
    addresses and references (and hostile text: control characters, right-to-left
    marks), a deletion every 50th and a cursor move every 100th."""
    out: list[Event] = []
    for i in range(first, first + n):
        at = _T0 + timedelta(seconds=i)
        mid = f"m{i}.{tag}@gen.example.org"
        if i % 100 == 99:
            out.append(
                CursorMoved(
                    run_id=f"run-{tag}",
                    recorded_at=at,
                    source=f"imap:{tag}",
                    folder="INBOX",
                    uidvalidity=1,
                    cursor_from=i - 99,
                    cursor_to=i,
                    uidnext=i + 1,
                    mode="delta",
                    reason="contiguous prefix",
                )
            )
        elif i % 50 == 49:
            out.append(
                MessageDeleted(
                    run_id=f"run-{tag}",
                    recorded_at=at,
                    message_id=f"m{i - 1}.{tag}@gen.example.org",
                    actor="test",
                    reason="a handler finished with it",
                )
            )
        else:
            out.append(
                MessageSeen(
                    run_id=f"run-{tag}",
                    recorded_at=at,
                    source=f"imap:{tag}",
                    folder="INBOX",
                    uidvalidity=1,
                    uid=i,
                    message_id=mid,
                    sha256=hashlib.sha256(mid.encode()).hexdigest(),
                    size=1000 + i,
                    headers=(("Subject", f"topic {i // 7}\x1b[31m \u202e"), ("X-N", str(i))),
                    date_utc=at,
                    date_offset_min=60,
                    from_addr=f"sender{i % 13}@example.com",
                    to_addrs=(f"a{i % 5}@example.net", f"b{i % 3}@example.net"),
                    in_reply_to=f"m{i - 1}.{tag}@gen.example.org" if i % 3 else None,
                    references=(f"m{i - 2}.{tag}@gen.example.org",) if i % 3 else (),
                    subject=f"Re: topic {i // 7}",
                )
            )
    return out


def append_events(store: Path, n: int, *, batch: int = 500, tag: str = "t") -> int:
    """Append ``n`` generated events to the log of ``store`` (created if absent) in
    commits of ``batch`` events, each its own file (no merging); returns the last seq."""
    log = EventLog(Path(store) / "log", durable=False, merge_small=False)
    log.create()
    last = log.last_seq()
    done = 0
    while done < n:
        k = min(batch, n - done)
        log.append(generated_events(last + 1, k, tag))
        last += k
        done += k
    return last

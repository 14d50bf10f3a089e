"""Mailing-list mail: raises on a subject with "boom"; a generator as the default."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from email.message import EmailMessage

from handlers import record

CALLS: list[list[tuple[str, str]]] = []
DEFAULT_CALLS: list[list[tuple[str, str]]] = []


def process(pairs: Sequence[tuple[str, EmailMessage]]) -> list[str]:
    CALLS.append([(mid, str(msg["subject"])) for mid, msg in pairs])
    if any("boom" in str(msg["subject"]) for _, msg in pairs):
        raise RuntimeError("the list archive is down")
    record("lists", pairs)
    return [mid for mid, _ in pairs]


def inbox(pairs: Sequence[tuple[str, EmailMessage]]) -> Iterator[str]:
    DEFAULT_CALLS.append([(mid, str(msg["subject"])) for mid, msg in pairs])
    record("inbox", pairs)
    for mid, msg in pairs:
        assert isinstance(msg, EmailMessage)
        yield mid

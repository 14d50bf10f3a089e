"""What a run knows of the store, kept small: the digests that stand for ids and
places in its sets, the contents on record at places whose message was deleted,
and the flags on record at a place."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from typing import Any

from pipeline.parse import ParsedMessage
from pipeline.store import MessageStore

__all__ = ["deleted_among", "digest", "flags_on_record", "with_id"]


def deleted_among(
    store: MessageStore, rows: list[dict[str, Any]]
) -> dict[tuple[Any, ...], set[str]]:
    """The contents at the location ``rows`` whose message is no longer stored, by place
    (``MessageStore.deleted_contents`` of those rows only)."""
    if not rows:
        return {}
    stored = store.stored_ids(sorted({r["message_id"] for r in rows}), as_writer=True)
    out: dict[tuple[Any, ...], set[str]] = {}
    for r in rows:
        if r["message_id"] not in stored:
            where = (r["folder"], r["uidvalidity"], r["uid"], r["uidl"])
            out.setdefault(where, set()).add(r["sha256"])
    return out


def digest(*parts: Any) -> bytes:
    """A 128-bit digest of ``parts`` (strings, ints, None) that stands for them in
    the sets of what a run has recorded: equal parts, equal digests; a collision
    between two of the few million a run holds is a chance of one in 2**90."""
    text = repr(parts).encode("utf-8", "surrogatepass")
    return hashlib.blake2b(text, digest_size=16).digest()


def flags_on_record(row: Mapping[str, Any]) -> tuple[str, ...] | None:
    """The flags on record in a ``locations`` row (None: none known, or a row read
    without them)."""
    flags = row.get("flags")
    return None if flags is None else tuple(flags)


def with_id(p: ParsedMessage, message_id: str) -> ParsedMessage:
    return dataclasses.replace(p, message_id=message_id, synthetic_id=True)

"""What every fold reads: the columns of the log's events it folds, the event
types each projection follows, and the events of a batch after a given seq."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import duckdb
import pyarrow as pa

from stores.errors import LogIntegrityError
from stores.events import SCHEMA

__all__ = [
    "DELETED",
    "FLAGS",
    "FOLD_SCHEMA",
    "MOVED",
    "SEEN",
    "STAGE",
    "STREAM_ROWS",
    "UIDV",
    "VANISHED",
    "batch_types",
    "new_events",
    "pc",
]

# What a fold reads of the log: everything but the decoded headers (they stay in
# the log; ``MessageStore.get`` reads them from there).
FOLD_SCHEMA = pa.schema([field for field in SCHEMA if field.name != "headers"])

SEEN = "message-seen"
DELETED = "message-deleted"
VANISHED = "location-vanished"
MOVED = "cursor-moved"
UIDV = "uidvalidity-changed"
FLAGS = "flags-changed"

# The scratch database a rebuild attaches to stage the log and its intermediate tables.
STAGE = "_replay_stage"
# Rows handed to Python at a time (derived columns, thread components).
STREAM_ROWS = 1 << 17


def pc() -> Any:
    """pyarrow.compute, imported when a fold first needs it (0.1 s a command that
    only reads)."""
    import pyarrow.compute

    return pyarrow.compute


def new_events(chunks: Iterable[pa.Table], applied: int) -> Iterator[pa.Table]:
    """The events of ``chunks`` (consecutive, in seq order) after seq ``applied``;
    a gap before the first of them is an error."""
    last = applied
    for chunk in chunks:
        if chunk.num_rows == 0:
            continue
        seqs = chunk.column("seq")
        first = seqs[0].as_py()
        if seqs[-1].as_py() <= last:
            continue
        if first > last + 1:
            raise LogIntegrityError(f"projections at seq {last} cannot apply a batch from {first}")
        if first <= last:
            chunk = chunk.filter(pc().greater(seqs, last))
        last = chunk.column("seq")[-1].as_py()
        yield chunk


def batch_types(con: duckdb.DuckDBPyConnection) -> set[str]:
    """The event types in the staged ``_batch``: which projections have work."""
    return {r[0] for r in con.execute("SELECT DISTINCT type FROM _batch").fetchall()}

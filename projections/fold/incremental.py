"""The incremental fold: a batch of committed events folded into the tables as
they stand, in one transaction with the last seq it holds.

Its cost follows the batch: it reads the rows the batch touches (its ids, their
threads, their locations, their index entries) through the indexes with literal
keys, never a scan of a table whose size follows the store, unless the batch is
itself so large that one scan is cheaper than its probes (``fold.probes``).
Events at or below the applied seq are skipped, so applying a batch twice
changes nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

import duckdb
import pyarrow as pa

from projections.fold.batch import DELETED, batch_types, new_events
from projections.fold.cursors import CURSOR_EVENTS, fold_cursors
from projections.fold.locations import LOCATION_EVENTS, fold_locations
from projections.fold.messages import MESSAGE_EVENTS, fold_messages
from projections.fold.meta import applied_seq, set_meta

__all__ = ["apply", "apply_chunks"]


def apply(con: duckdb.DuckDBPyConnection, batch: pa.Table) -> int:
    """Fold committed events (seq order) into the tables; returns the last applied seq."""
    return apply_chunks(con, [batch])


def apply_chunks(con: duckdb.DuckDBPyConnection, chunks: Iterable[pa.Table]) -> int:
    """Fold consecutive chunks of committed events as one batch, in one transaction.

    The chunks are staged into a DuckDB table first (which spills to disk under
    the memory limit) and folded once: one fold of everything pending is cheaper
    than one per chunk. Events at or below the applied seq are skipped; a gap
    before the first new event is an error. The fold appends to the deltas of the
    split tables (``fold.deltas``).
    """
    applied = applied_seq(con)
    con.execute("BEGIN TRANSACTION")
    try:
        last = _stage(con, chunks, applied)
        if last > applied:
            types = batch_types(con)
            if types & MESSAGE_EVENTS:
                fold_messages(con, deletions=DELETED in types)
            if types & LOCATION_EVENTS:
                fold_locations(con)
            if types & CURSOR_EVENTS:
                fold_cursors(con)
            set_meta(con, "applied_seq", last)
        con.execute("DROP TABLE IF EXISTS _batch")
        con.execute("COMMIT")
    except BaseException:
        # a failed COMMIT (a full disk) has ended the transaction already: the
        # ROLLBACK's own error must not hide the real one
        with contextlib.suppress(duckdb.Error):
            con.execute("ROLLBACK")
        raise
    return max(last, applied)


def _stage(con: duckdb.DuckDBPyConnection, chunks: Iterable[pa.Table], applied: int) -> int:
    """Copy the events after seq ``applied`` into the temp table ``_batch``; returns
    the last seq staged (``applied`` when there is none)."""
    last = applied
    created = False
    for chunk in new_events(chunks, applied):
        if "headers" in chunk.column_names:
            chunk = chunk.drop_columns(["headers"])  # never folded: they stay in the log
        con.register("_chunk", chunk)
        try:
            if created:
                con.execute("INSERT INTO _batch BY NAME SELECT * FROM _chunk")
            else:
                con.execute("CREATE OR REPLACE TEMP TABLE _batch AS SELECT * FROM _chunk")
                created = True
        finally:
            con.unregister("_chunk")
        last = chunk.column("seq")[-1].as_py()
    return last

"""The deltas of the split tables (``projections.tables.SPLIT_TABLES``): when and
how the rows the folds appended move into the bases.

A fold appends to the deltas, whose indexes stay small: its COMMIT then costs
what it would into an empty store, whatever the size of the base. The deltas are
moved into the bases by ``compact`` and by a fold that leaves them past
``MERGE_SHARE`` of their base (and ``MERGE_MIN`` messages): a store that syncs
for years without a replay keeps its deltas within a share of the whole, and
the memory of a fold's COMMIT with them. The move itself is one transaction
after the fold's (the fold never waits on it, nor fails with it): the base's
indexes take the rows, which loads them (as every fold did before the split).
Should that not fit in DuckDB's memory limit, the move is rolled back and the
rows stay in the deltas, where every reader finds them; a replay puts them in
the bases.
"""

from __future__ import annotations

import contextlib
import logging

import duckdb

from projections.tables import SPLIT_TABLES, base_of, delta_of

__all__ = ["MERGE_MIN", "MERGE_SHARE", "delta_sizes", "merge_deltas", "merge_due"]

log = logging.getLogger("mailledger.projections")

# A fold moves the deltas into the bases once the messages delta holds at least
# MERGE_MIN rows and more than 1/MERGE_SHARE of the messages base's.
MERGE_MIN = 50_000
MERGE_SHARE = 4


def delta_sizes(con: duckdb.DuckDBPyConnection) -> tuple[int, int]:
    """(rows of the messages base, as DuckDB estimates them; rows of its delta)."""
    base = con.execute(
        "SELECT estimated_size FROM duckdb_tables()"
        " WHERE database_name = current_database() AND table_name = ?",
        [base_of("messages")],
    ).fetchall()
    delta = con.execute(f"SELECT count(*) FROM {delta_of('messages')}").fetchall()
    return (int(base[0][0]) if base else 0), int(delta[0][0])


def merge_due(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether the deltas are large enough to be moved (``MERGE_MIN``, ``MERGE_SHARE``)."""
    base, delta = delta_sizes(con)
    return delta >= MERGE_MIN and delta * MERGE_SHARE > base


def merge_deltas(con: duckdb.DuckDBPyConnection) -> bool:
    """Move every delta's rows into its base, in one transaction; False when
    DuckDB's memory limit refused it (nothing moved, nothing lost)."""
    con.execute("BEGIN TRANSACTION")
    try:
        for name in SPLIT_TABLES:
            con.execute(f"INSERT INTO {base_of(name)} SELECT * FROM {delta_of(name)}")
            con.execute(f"DELETE FROM {delta_of(name)}")
        con.execute("COMMIT")
    except duckdb.OutOfMemoryException as exc:
        with contextlib.suppress(duckdb.Error):
            con.execute("ROLLBACK")
        log.warning(
            "the projections' deltas were not merged into their bases (%s): they stay"
            " where every query finds them; a replay, or compact with more memory, merges them",
            exc,
        )
        return False
    except BaseException:
        with contextlib.suppress(duckdb.Error):
            con.execute("ROLLBACK")
        raise
    return True

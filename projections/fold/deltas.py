"""The deltas of the split tables (``projections.tables.SPLIT_TABLES``); the Bloom
filters that keep lookups of new keys out of the bases are ``projections.filters``.

A fold appends to the deltas, whose indexes stay small: its COMMIT then costs
what it would into an empty store, whatever the size of the base. The rows move
into the bases when the projections are rebuilt: ``replay``, and ``compact``
when the deltas hold any (``Projector.merge_deltas``). Not in place: inserting
250,000 rows into the bases of 1,000,000 messages loads their indexes whole, and
under the writer's 512 MB DuckDB refused it, then failed its own rollback and
closed the database; a rebuild writes the bases afresh within the replay's
memory budget, beside the file, and swaps them in whole. A store that is never
compacted keeps every later row in its deltas: its folds then cost what they
did before the split (never more), and every query finds the rows.
"""

from __future__ import annotations

import duckdb

from projections.filters import STAMP, filters_made, new_stamp
from projections.fold.meta import meta_value, set_meta
from projections.tables import SPLIT_TABLES, delta_of

__all__ = ["delta_rows", "stamp_filters"]


def delta_rows(con: duckdb.DuckDBPyConnection) -> int:
    """Rows in all the deltas (0: everything is in the bases)."""
    return sum(
        int(con.execute(f"SELECT count(*) FROM {delta_of(name)}").fetchall()[0][0])
        for name in SPLIT_TABLES
    )


def stamp_filters(con: duckdb.DuckDBPyConnection, *, fresh: bool = False) -> None:
    """Give the bases' filters a new stamp (``filters.STAMP``): ``fresh``, filters
    a rebuild just made; else only when they have none (a store rebuilt before the
    stamps has filters as good as any, unchanged since its rebuild like its bases,
    but every process would read them at every lookup)."""
    if not fresh:
        if meta_value(con, STAMP) is not None or not filters_made(con):
            return
        if not con.execute("SELECT count(*) FROM base_filters").fetchall()[0][0]:
            return
    set_meta(con, STAMP, new_stamp())

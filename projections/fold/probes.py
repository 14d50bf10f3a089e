"""How a fold reads and deletes the rows a batch touches: through the indexes with
literal keys while that is cheaper (``projections.lookup``), by one scan or join
when the batch is so large that the scan costs less."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import duckdb
import pyarrow as pa

from projections.filters import in_base
from projections.lookup import INDEX_KEYS_MAX, rows_where_in, sql_literals
from projections.tables import SPLIT_TABLES, base_of, delta_of, parts_of

__all__ = [
    "PROBE_RATIO",
    "delete_where_in",
    "one_statement",
    "probed",
    "register_table",
    "values_of",
]


def values_of(con: duckdb.DuckDBPyConnection, sql: str) -> set[str]:
    """The distinct values of the first column ``sql`` selects."""
    return {r[0] for r in con.execute(sql).fetchall()}


def register_table(con: duckdb.DuckDBPyConnection, name: str, rows: pa.Table) -> None:
    """``rows`` as the temp table ``name`` (a copy: it outlives the Arrow table)."""
    con.register("_rows", rows)
    try:
        con.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS SELECT * FROM _rows")
    finally:
        con.unregister("_rows")


# A fold probes the indexes of a large table for up to this many keys (in
# statements of INDEX_KEYS_MAX literals) rather than scan it: its COMMIT loads the
# index whole anyway (random keys touch every part of it), where a scan adds the
# table's columns to DuckDB's buffer pool. Into 1,000,000 messages, 10,000 ids
# scanned from ``messages`` took 1.0 s and 259 MiB of the pool, ``thread_nodes``
# 71 MiB more: the fold's peak RSS 692-702 -> 625-635 MiB, its wall +0.8-1.4 s.
# A table of fewer than PROBE_RATIO rows a key is scanned: a 10k sync into an
# empty store spent 2-7 s (under load) in the probes of its second fold.
_PROBE_MAX = 20_000


PROBE_RATIO = 50


def one_statement(keys: int) -> bool:
    """Whether ``keys`` keys are few enough to be spelled as the literals of one
    statement (``INDEX_KEYS_MAX``)."""
    return keys <= INDEX_KEYS_MAX


def _probe_worth(con: duckdb.DuckDBPyConnection, table: str, keys: int) -> bool:
    """Whether ``keys`` (more than one statement's literals) are probed in chunks."""
    if keys > _PROBE_MAX:
        return False
    rows = con.execute(
        "SELECT sum(estimated_size) FROM duckdb_tables()"
        " WHERE database_name = current_database() AND list_contains(?, table_name)",
        [list(parts_of(table))],
    ).fetchall()
    return bool(rows) and (rows[0][0] or 0) >= PROBE_RATIO * keys


def probed(
    con: duckdb.DuckDBPyConnection,
    table: str,
    column: str,
    values: Sequence[Any],
    columns: str = "*",
) -> pa.Table:
    """``rows_where_in``, its keys probed through the index in chunks when that is
    worth it (``_probe_worth``). Of a split table, the base is asked only for the
    keys its filter lets through (``filters.in_base``)."""
    keys = sorted(set(values))
    if table not in SPLIT_TABLES:
        return _probed(con, table, table, column, keys, columns)
    found = [
        _probed(con, table, part, column, wanted, columns)
        for part, wanted in (
            (base_of(table), in_base(con, table, column, keys)),
            (delta_of(table), keys),
        )
    ]
    return pa.concat_tables(found)


def _probed(
    con: duckdb.DuckDBPyConnection,
    table: str,
    part: str,
    column: str,
    keys: list[Any],
    columns: str,
) -> pa.Table:
    """``probed`` of the physical table ``part`` (of ``table``)."""
    if one_statement(len(keys)) or not _probe_worth(con, part, len(keys)):
        return rows_where_in(con, part, column, keys, columns)
    return pa.concat_tables(
        rows_where_in(con, part, column, keys[i : i + INDEX_KEYS_MAX], columns)
        for i in range(0, len(keys), INDEX_KEYS_MAX)
    )


def delete_where_in(
    con: duckdb.DuckDBPyConnection, table: str, column: str, values: Sequence[Any], source: str
) -> None:
    """Delete the rows of ``table`` (each of its parts) whose ``column`` is in
    ``values`` (probed as literals through the index, ``INDEX_KEYS_MAX`` at a
    time, when few or when ``_probe_worth``; else joined from ``source``, SQL
    that selects them)."""
    if not values:
        return
    keys = sorted(set(values))
    for part in parts_of(table):
        wanted = keys
        if part == base_of(table) and table in SPLIT_TABLES:
            wanted = in_base(con, table, column, keys)
            if not wanted:
                continue
        few = one_statement(len(wanted)) or _probe_worth(con, part, len(wanted))
        if few and sql_literals(wanted) is not None:
            for i in range(0, len(wanted), INDEX_KEYS_MAX):
                listed = sql_literals(wanted[i : i + INDEX_KEYS_MAX])
                con.execute(f"DELETE FROM {part} WHERE {column} IN ({listed})")
        else:
            con.execute(f"DELETE FROM {part} WHERE {column} IN ({source})")

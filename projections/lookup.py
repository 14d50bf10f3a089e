"""Point lookups that follow the work: a few keys read through an index, many by a scan.

DuckDB answers ``column IN (literal, ...)`` on an ART-indexed column with an index
scan, but never a join: ``IN (SELECT ...)`` or a join with a registered table
reads the whole table. So a lookup of a few keys (a one-message fold, a
``find`` of a few hits) spells them as literals, and its cost follows the keys;
a lookup of many keys (a replay-sized fold) joins, and its cost is one scan,
which is then cheaper than thousands of index probes (measured on 1,000,000
messages, every probe cold as in a fresh command: 1 id 3 ms, 100 ids 25 ms,
1,000 ids 55 ms, 10,000 ids 260 ms; a scan 95-110 ms whatever the count).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import duckdb
import pyarrow as pa

from projections.filters import in_base
from projections.tables import SPLIT_TABLES, base_of, delta_of, each_part, parts_of

__all__ = ["INDEX_KEYS_MAX", "rows_where_in", "sql_literals"]

# Keys up to this many are probed through the index; more are joined (a scan).
# DuckDB itself takes an index scan for at most 2,048 values (index_scan_max_count).
INDEX_KEYS_MAX = 1000


def _literal(value: Any) -> str | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str) and "\x00" not in value:
        return "'" + value.replace("'", "''") + "'"
    return None


def sql_literals(values: Sequence[Any]) -> str | None:
    """``values`` as a comma-separated SQL list of literals (None: one cannot be
    spelled as a literal, and the caller must join instead)."""
    out = []
    for v in values:
        lit = _literal(v)
        if lit is None:
            return None
        out.append(lit)
    return ", ".join(out)


def rows_where_in(
    con: duckdb.DuckDBPyConnection,
    table: str,
    column: str,
    values: Sequence[Any],
    columns: str = "*",
    *,
    value_type: pa.DataType | None = None,
    index_max: int = INDEX_KEYS_MAX,
) -> pa.Table:
    """The rows of ``table`` whose ``column`` is one of ``values`` (its ``columns``).

    Each part of the table (``tables.parts_of``) is asked for its keys: up to
    ``index_max`` distinct values are probed as literals (an index scan when
    ``column`` has an ART index); more, or values that cannot be literals, are
    joined from a registered table (one scan of that part). The base of a split
    table is asked only for the keys its Bloom filter lets through
    (``filters.in_base``): most keys a sync asks about are new, and looking them
    up in a large base's index loads it (500 new location keys against 1,000,000:
    38 ms a batch of a sync), or scans it when they are many (10,000 Message-IDs).
    The literal probes go in one query (DuckDB binds each query anew: one per
    part would cost a point lookup twice that).
    """
    keys = sorted(set(values))
    if not keys:
        return con.sql(each_part(table, columns, "false")).to_arrow_table()
    if table in SPLIT_TABLES:
        parts = [(base_of(table), in_base(con, table, column, keys)), (delta_of(table), keys)]
    else:
        parts = [(part, keys) for part in parts_of(table)]
    probes: list[str] = []
    found: list[pa.Table] = []
    for part, wanted in parts:
        listed = sql_literals(wanted) if wanted and len(wanted) <= index_max else None
        if listed is not None:
            probes.append(f"SELECT {columns} FROM {part} WHERE {column} IN ({listed})")
        elif wanted:
            found.append(_joined(con, part, column, wanted, columns, value_type))
    if probes:
        found.insert(0, con.sql(" UNION ALL ".join(probes)).to_arrow_table())
    return found[0] if len(found) == 1 else pa.concat_tables(found)


def _joined(
    con: duckdb.DuckDBPyConnection,
    part: str,
    column: str,
    keys: list[Any],
    columns: str,
    value_type: pa.DataType | None,
) -> pa.Table:
    """The rows of the physical table ``part`` whose ``column`` is in ``keys``, by a
    join with them registered (one scan of ``part``)."""
    name = f"_q_{column.strip(chr(34))}"
    con.register(name, pa.table({"v": pa.array(keys, value_type or pa.string())}))
    try:
        return con.sql(
            f"SELECT {columns} FROM {part} WHERE {column} IN (SELECT v FROM {name})"
        ).to_arrow_table()
    finally:
        con.unregister(name)

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

from projections.tables import each_part

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

    Up to ``index_max`` distinct values are probed as literals (an index scan when
    ``column`` has an ART index); more, or values that cannot be literals, are
    joined from a registered table (one scan of ``table``).
    """
    keys = sorted(set(values))
    if keys and len(keys) <= index_max:
        listed = sql_literals(keys)
        if listed is not None:
            sql = each_part(table, columns, f"{column} IN ({listed})")
            return con.sql(sql).to_arrow_table()
    name = f"_q_{column.strip(chr(34))}"
    con.register(name, pa.table({"v": pa.array(keys, value_type or pa.string())}))
    try:
        return con.sql(
            each_part(table, columns, f"{column} IN (SELECT v FROM {name})")
        ).to_arrow_table()
    finally:
        con.unregister(name)

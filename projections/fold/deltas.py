"""The deltas of the split tables (``projections.tables.SPLIT_TABLES``) and the
Bloom filters that keep a fold's lookups out of the bases.

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

from typing import Any

import duckdb
import pyarrow as pa

from projections.tables import FILTERS, SPLIT_TABLES, base_of, delta_of

__all__ = ["build_filters", "delta_rows", "in_base"]


def delta_rows(con: duckdb.DuckDBPyConnection) -> int:
    """Rows in all the deltas (0: everything is in the bases)."""
    return sum(
        int(con.execute(f"SELECT count(*) FROM {delta_of(name)}").fetchall()[0][0])
        for name in SPLIT_TABLES
    )


# -- what the bases may hold ------------------------------------------------------
# A fold looks up the keys its events touch (their ids, their locations), most of
# them new: looking a new key up in a base's index still walks it, and loads what
# it walks (10,000 new ids into 1,000,000: 2.8 s of a 4.8 s fold, and most of its
# 280 MiB). A Bloom filter of each base's keys, made with the base by the
# rebuild, says which keys the base cannot hold: those are looked up in the
# delta only. (``base_filters``: a row per filter, its bits a BITSTRING;
# FILTER_BITS bits a key and FILTER_HASHES hashes: 0.24% of absent keys pass.)
# Every row of a base is in its filter, since rows enter a base only in a
# rebuild, which makes the filters last; a filter made by another DuckDB's
# ``hash`` (the ``probe`` column) is not used.
FILTER_BITS = 16
FILTER_HASHES = 4
# Fewer keys are looked up in the base's index at once: reading the filter (2 MB
# at 1,000,000 messages) costs more than a few probes (a one-message fold: 63 ms
# in 7 filter reads).
FILTER_FROM = 64
_FILTERS = {  # filter: the base's key column it holds
    # every stored message is a thread node: the one filter serves messages too,
    # and thread ids (a thread's id is one of its nodes')
    "ids": (base_of("thread_nodes"), "message_id"),
    "locations": (base_of("locations"), "loc_key"),
}
_FILTER_OF = {
    ("messages", "message_id"): "ids",
    ("thread_nodes", "message_id"): "ids",
    ("thread_nodes", "thread_id"): "ids",
    ("locations", "loc_key"): "locations",
}
_PROBE = "hash('mailledger-filter', 1)"


def _positions(value: str, m: str) -> list[str]:
    return [f"(hash({value}, {i}) % {m})" for i in range(1, FILTER_HASHES + 1)]


def build_filters(con: duckdb.DuckDBPyConnection) -> None:
    """Make the filters of the bases as they stand (in the caller's transaction)."""
    con.execute(f"CREATE TABLE IF NOT EXISTS base_filters ({FILTERS})")
    for name, (table, column) in _FILTERS.items():
        n = con.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0]
        m = min(max(1024, FILTER_BITS * int(n)), 2**31 - 1)  # (get_bit takes an INTEGER)
        con.execute("DELETE FROM base_filters WHERE name = ?", [name])
        con.execute(
            f"INSERT INTO base_filters SELECT ?, {m}, {_PROBE},"
            f" (SELECT bitstring_agg(p, 0, {m - 1}) FROM (SELECT DISTINCT"
            f" unnest([{', '.join(_positions(column, str(m)))}])::BIGINT AS p FROM {table}))",
            [name],
        )


def in_base(con: duckdb.DuckDBPyConnection, table: str, column: str, keys: list[Any]) -> list[Any]:
    """Those of ``keys`` that the base of ``table`` may hold in ``column`` (every
    one of them when no filter serves that column)."""
    name = _FILTER_OF.get((table, column))
    if name is None or len(keys) < FILTER_FROM or not isinstance(keys[0], str):
        return keys
    made = con.execute(  # (not in a file made before the filters)
        "SELECT count(*) FROM duckdb_tables()"
        " WHERE database_name = current_database() AND table_name = 'base_filters'"
    ).fetchall()[0][0]
    if not made:
        return keys
    found = con.execute(
        "SELECT m, bits IS NULL FROM base_filters WHERE name = ? AND probe = " + _PROBE,
        [name],
    ).fetchall()
    if not found:
        return keys
    if found[0][1]:  # (an empty base)
        return []
    con.register("_filter_keys", pa.table({"v": pa.array(keys, pa.string())}))
    try:
        tests = " AND ".join(f"get_bit(f.bits, {p}::INTEGER) = 1" for p in _positions("k.v", "f.m"))
        rows = con.execute(
            f"SELECT k.v FROM _filter_keys k, base_filters f WHERE f.name = ? AND {tests}",
            [name],
        ).fetchall()
    finally:
        con.unregister("_filter_keys")
    return sorted(r[0] for r in rows)

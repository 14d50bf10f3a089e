"""The Bloom filters of the split tables' bases (``projections.tables.SPLIT_TABLES``):
which keys a base cannot hold, so that a lookup of new keys (most of what a sync
or a fold asks) leaves the base's index alone. Made with the bases by every
rebuild (``projections.fold.bulk``); read by the fold's probes and by the point
lookups of ``projections.lookup``.
"""

from __future__ import annotations

import secrets
from typing import Any

import duckdb

from projections.tables import FILTERS, FILTERS_STAMP, base_of

__all__ = [
    "FILTER_BITS",
    "FILTER_FROM",
    "FILTER_HASHES",
    "STAMP",
    "build_filters",
    "filters_made",
    "in_base",
    "new_stamp",
]


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


# The filters of the last rebuild this process read, by the stamp that rebuild left
# in ``meta`` (``STAMP``): a sync asks about every batch of 500 keys in a hold of
# its own, and reading a filter anew (2 MB at 1,000,000 messages) took it 20-40 ms
# a batch. A filter never changes under its stamp: rows enter a base only in a
# rebuild, which writes new filters and a new stamp (a store rebuilt before the
# stamps has none, and its filters are read at every lookup until the next).
STAMP = FILTERS_STAMP
_READ: dict[tuple[int, str], tuple[int, bytes | None]] = {}


def new_stamp() -> int:
    """The stamp of filters just made (kept in ``meta`` under ``STAMP``)."""
    return secrets.randbits(62)


def in_base(con: duckdb.DuckDBPyConnection, table: str, column: str, keys: list[Any]) -> list[Any]:
    """Those of ``keys`` that the base of ``table`` may hold in ``column`` (every
    one of them when no filter serves that column)."""
    name = _FILTER_OF.get((table, column))
    if name is None or len(keys) < FILTER_FROM or not isinstance(keys[0], str):
        return keys
    stamp = con.execute("SELECT max(value) FROM meta WHERE key = ?", [STAMP]).fetchall()[0][0]
    read = _READ.get((stamp, name)) if stamp is not None else None
    if read is None:
        read = _read(con, name)
        if read is None:
            return keys
        if stamp is not None:
            for other in [k for k in _READ if k[0] != stamp]:
                del _READ[other]  # (only the last rebuild's)
            _READ[(stamp, name)] = read
    m, bits = read
    return _passing(con, keys, m, bits) if bits is not None else []  # (None: an empty base)


def filters_made(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether the file has the table of filters (not one made before them)."""
    return bool(
        con.execute(
            "SELECT count(*) FROM duckdb_tables()"
            " WHERE database_name = current_database() AND table_name = 'base_filters'"
        ).fetchall()[0][0]
    )


def _read(con: duckdb.DuckDBPyConnection, name: str) -> tuple[int, bytes | None] | None:
    """The filter ``name`` as (m, its bits as a BLOB, None for an empty base); None
    when there is none this DuckDB can use."""
    if not filters_made(con):
        return None
    found = con.execute(
        "SELECT m, bits::BLOB FROM base_filters WHERE name = ? AND probe = " + _PROBE, [name]
    ).fetchall()
    if not found:
        return None
    m, bits = found[0]
    return int(m), None if bits is None else bytes(bits)


def _passing(con: duckdb.DuckDBPyConnection, keys: list[Any], m: int, bits: bytes) -> list[Any]:
    """Those of ``keys`` whose every position (DuckDB's hashes, as the filter was
    made with) is set in ``bits``: the BITSTRING as a BLOB, its ``m`` bits padded
    on the left with zeros to whole bytes."""
    pad = 8 * len(bits) - m
    found = con.execute(
        f"SELECT v, {', '.join(_positions('v', str(m)))} FROM (SELECT unnest(?::VARCHAR[]) AS v)",
        [keys],
    ).fetchall()
    return sorted(
        v
        for v, *positions in found
        if all(bits[(p + pad) >> 3] >> (7 - ((p + pad) & 7)) & 1 for p in positions)
    )

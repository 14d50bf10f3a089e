"""The ``meta`` table: what the projection tables keep about themselves (the last
seq folded, the version they follow, the DuckDB hash they were built with, the
thread and ghost counts), read and written by key."""

from __future__ import annotations

import duckdb

__all__ = [
    "add_meta",
    "applied_seq",
    "fresh_probe",
    "hash_matches",
    "hash_probe",
    "meta_value",
    "meta_values",
    "projection_version",
    "set_meta",
]

# The ``header_index.kh`` keys are DuckDB's own hash: a DuckDB whose hash of this
# probe differs from the one that built the tables has them rebuilt (``hash_matches``).
_HASH_PROBE = "hash('mailledger header_index')"


def meta_value(con: duckdb.DuckDBPyConnection, key: str) -> int | None:
    """The value kept under ``key`` (None: not kept, or no tables)."""
    try:
        rows = con.execute("SELECT value FROM meta WHERE key = ?", [key]).fetchall()
    except duckdb.CatalogException:
        return None
    return int(rows[0][0]) if rows else None


def set_meta(con: duckdb.DuckDBPyConnection, key: str, value: int) -> None:
    """Keep ``value`` under ``key``, replacing what was there."""
    con.execute("DELETE FROM meta WHERE key = ?", [key])
    con.execute("INSERT INTO meta VALUES (?, ?)", [key, value])


def add_meta(con: duckdb.DuckDBPyConnection, key: str, delta: int) -> None:
    """Add ``delta`` to the value under ``key`` (a count a fold keeps up)."""
    if delta:
        set_meta(con, key, (meta_value(con, key) or 0) + delta)


def applied_seq(con: duckdb.DuckDBPyConnection) -> int:
    """The last seq folded into these tables (0 for none)."""
    return meta_value(con, "applied_seq") or 0


def projection_version(con: duckdb.DuckDBPyConnection) -> int | None:
    """The PROJECTION_VERSION the tables were built with (None: no tables)."""
    return meta_value(con, "projection_version")


def fresh_probe(con: duckdb.DuckDBPyConnection) -> int:
    """The hash probe as ``con``'s DuckDB computes it now (``hash_probe`` caches it)."""
    return int(con.execute(f"SELECT ({_HASH_PROBE} >> 2)::BIGINT").fetchall()[0][0])


def hash_matches(con: duckdb.DuckDBPyConnection) -> bool:
    """True when this DuckDB hashes index keys as the one that built the tables."""
    return meta_value(con, "hash_probe") == hash_probe(con)


def meta_values(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """Every value the tables keep about themselves (``applied_seq``,
    ``projection_version``, ``hash_probe``), read in one query: a reader opening
    the file asks for three of them, and the four queries they took (the probe
    too) were 1.8 ms of every one-shot read. Empty when there are no tables."""
    try:
        rows = con.execute("SELECT key, value FROM meta").fetchall()
    except duckdb.CatalogException:
        return {}
    return {key: int(value) for key, value in rows}


_PROBES: dict[str, int] = {}


def hash_probe(con: duckdb.DuckDBPyConnection) -> int:
    """What this process's DuckDB gives for the hash probe (``hash_matches``): asked
    once per DuckDB version, the library a process runs does not change under it."""
    version = duckdb.__version__
    if version not in _PROBES:
        _PROBES[version] = fresh_probe(con)
    return _PROBES[version]

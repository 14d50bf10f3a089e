"""The projection tables: their DDL, indexes, and the schema version they follow."""

from __future__ import annotations

import logging
import time

import duckdb
import pyarrow as pa

from projections.snapshot import PROJECTION_VERSION
from stores.events import SCHEMA

__all__ = [
    "FILTERS",
    "FILTERS_STAMP",
    "PROJECTION_VERSION",
    "SPLIT_TABLES",
    "TABLES",
    "VIEWS",
    "base_of",
    "column_types",
    "create_indexes",
    "create_query_views",
    "create_tables",
    "delta_of",
    "drop_tables",
    "each_part",
    "events_source",
    "events_sql",
    "fingerprint",
    "missing_indexes",
    "parts_of",
    "sql_string",
]

log = logging.getLogger("mailledger.projections")


_RAW = "USING COMPRESSION uncompressed"

TABLES: dict[str, str] = {
    "meta": "key VARCHAR NOT NULL, value BIGINT NOT NULL",
    # The decoded headers stay in the log (the event at ``seq``); a copy here would
    # be 40% of the file and of every replay's writing. ``MessageStore.get`` and the
    # ``message_headers`` query view join them back.
    # Columns of ids and hashes, unique per row, are stored uncompressed (``_RAW``):
    # DuckDB's string compression halves them at most, and its analysis and
    # encoding were an eighth of a replay's time. Measured on 100,000 messages (8 alternating
    # replays each): 2.00 s -> 1.76 s median for 19 MB more (the file 122 -> 141 MB,
    # against 1.13 GB of mail).
    "messages": f"""
        message_id VARCHAR {_RAW} NOT NULL,
        seq BIGINT NOT NULL,
        source VARCHAR, folder VARCHAR, uidvalidity BIGINT, uid BIGINT, uidl VARCHAR {_RAW},
        size BIGINT, sha256 VARCHAR {_RAW},
        subject VARCHAR,
        subject_key VARCHAR,
        date_iso VARCHAR,
        date_key VARCHAR,
        date_utc TIMESTAMPTZ,
        date_offset_min INTEGER,
        from_addr VARCHAR,
        to_addrs VARCHAR[],
        in_reply_to VARCHAR {_RAW},
        "references" VARCHAR[],
        list_id VARCHAR,
        synthetic_id BOOLEAN,
        defects VARCHAR[],
        indexed_at TIMESTAMPTZ
    """,
    # One row per index entry: a normalized (header, value) a message carries. ``kh``
    # is DuckDB's hash of header, 0x1F, value (``key_hash``), ART-indexed: ``find``
    # probes it and reads only its hits. A row per entry, never a row per value
    # holding every id that carries it: a frequent sender's row would grow with
    # the store, and every fold touching it would rewrite it (PROJECTION_VERSION 5
    # did; a one-message fold into 1,000,000 messages rewrote rows of 100,000 ids).
    "header_index": f"""
        kh UBIGINT NOT NULL,
        header VARCHAR NOT NULL,
        value VARCHAR NOT NULL,
        message_id VARCHAR {_RAW} NOT NULL
    """,
    # A row per stored message a deletion removed: its winning ``seq`` (as
    # ``messages.seq`` had it) and the ``message-deleted`` event's seq. What
    # followers of ``messages`` kept outside it (the full-text index, keyed by
    # seq) read to take out what went since the seq they hold, by seq, without an
    # index of Message-IDs of their own. Every removal, as folding the events one
    # at a time would make them, whatever the batches (a message seen and deleted
    # in one batch too): a replay makes the same rows.
    "removals": "seq BIGINT NOT NULL, deleted_seq BIGINT NOT NULL",
    "thread_edges": "child VARCHAR NOT NULL, parent VARCHAR NOT NULL, kind VARCHAR NOT NULL",
    "thread_nodes": f"message_id VARCHAR {_RAW} NOT NULL, thread_id VARCHAR NOT NULL",
    "locations": f"""
        loc_key VARCHAR NOT NULL,
        source VARCHAR, folder VARCHAR, uidvalidity BIGINT, uid BIGINT, uidl VARCHAR,
        sha256 VARCHAR {_RAW} NOT NULL,
        message_id VARCHAR {_RAW} NOT NULL,
        first_seq BIGINT NOT NULL,
        last_seq BIGINT NOT NULL,
        seen_at TIMESTAMPTZ,
        vanished_seq BIGINT,
        vanished BOOLEAN NOT NULL,
        -- the flags last shown there (NULL: none known) and the event that showed them
        flags VARCHAR[],
        flags_seq BIGINT
    """,
    "cursors": """
        account VARCHAR NOT NULL, folder VARCHAR NOT NULL,
        uidvalidity BIGINT, last_uid BIGINT, uidnext BIGINT,
        mode VARCHAR, seq BIGINT NOT NULL, updated_at TIMESTAMPTZ
    """,
}

# The tables an incremental fold appends to are each kept in two parts, a view
# of their union under the table's name for every reader: ``NAME_base``, written
# by a rebuild, and ``NAME_delta``, where each fold puts the rows it adds (a fold
# deletes from both). An ART index takes its rows into memory as a COMMIT inserts
# into it, and random keys (hashes, Message-IDs) touch all of it: a fold of
# 10,000 messages into 1,000,000 loaded the base's indexes whole (the sync's peak
# 458 -> 846 MiB), a fold of 10 rows 9 MiB of them. Into the small delta's
# indexes it costs what it would into an empty store. A rebuild (``replay``,
# ``compact``) writes every row into the bases (``projections.fold.deltas``).
SPLIT_TABLES = ("messages", "header_index", "thread_nodes", "locations")


def base_of(name: str) -> str:
    """The part of table ``name`` a rebuild writes (``name`` itself when it is not split)."""
    return f"{name}_base" if name in SPLIT_TABLES else name


def delta_of(name: str) -> str:
    """The part of table ``name`` an incremental fold appends to."""
    return f"{name}_delta" if name in SPLIT_TABLES else name


def parts_of(name: str) -> tuple[str, ...]:
    """The physical tables whose rows table ``name`` holds."""
    return (base_of(name), delta_of(name)) if name in SPLIT_TABLES else (name,)


def each_part(name: str, columns: str, where: str) -> str:
    """SQL of ``columns`` of the rows of table ``name`` that match ``where``, asked
    of each of its parts (a ``?`` in ``where`` then takes its value once a part).

    What a point lookup reads instead of the table's view: DuckDB binds a view
    again at every query, and this one (every column of two tables) cost a lookup
    by Message-ID 1.0 ms where each part asked in turn costs 0.5 (at 1,000,000)."""
    return " UNION ALL ".join(
        f"SELECT {columns} FROM {part} WHERE {where}" for part in parts_of(name)
    )


def _union(name: str) -> str:
    return " UNION ALL ".join(f"SELECT * FROM {part}" for part in parts_of(name))


# The point lookups people wait on (get/raw, find, walk_thread) and those an
# incremental fold makes (the ids, keys, threads and locations a batch touches)
# get an ART index, on both parts of a split table: a fold of one message then
# reads what it touches, never the whole store. Everything else is a scan or a
# hash join; each index costs replay time and disk.
_LOOKUPS = {
    "messages_id": ("messages", "message_id"),
    "header_index_kh": ("header_index", "kh"),
    "thread_nodes_id": ("thread_nodes", "message_id"),
    "thread_nodes_thread": ("thread_nodes", "thread_id"),
    "locations_key": ("locations", "loc_key"),
}
_INDEXES = {
    name + ("" if part == base_of(table) else "_delta"): f"{part}({column})"
    for name, (table, column) in _LOOKUPS.items()
    for part in parts_of(table)
}

VIEWS: dict[str, str] = {}

# What ``mailledger query`` offers besides the tables, kept in the projection file
# too (``create_query_views``), so that stock DuckDB opening it read-only (its CLI,
# a notebook, a BI tool) finds the same names. One text for both.
MESSAGE_HEADERS_SQL = "SELECT m.message_id, e.headers FROM messages m JOIN events e USING (seq)"
THREAD_MACRO_SQL = (
    "thread(id) AS TABLE"
    " SELECT m.* FROM messages m JOIN thread_nodes n USING (message_id)"
    " WHERE n.thread_id = (SELECT thread_id FROM thread_nodes"
    "   WHERE message_id = coalesce(nullif(regexp_replace("
    "regexp_extract(id, '<([^<>]*)>', 1), '\\s', '', 'g'), ''), trim(id, '<> ')))"
    " ORDER BY m.date_iso NULLS LAST, m.message_id"
)


def sql_string(text: str) -> str:
    """``text`` as an SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def column_types(con: duckdb.DuckDBPyConnection, schema: pa.Schema) -> list[tuple[str, str]]:
    """(name, DuckDB type) of each column of the Arrow ``schema``, as DuckDB reads it."""
    con.register("_empty_columns", schema.empty_table())
    try:
        cols = con.execute("DESCRIBE SELECT * FROM _empty_columns").fetchall()
    finally:
        con.unregister("_empty_columns")
    return [(name, kind) for name, kind, *_ in cols]


def events_sql(con: duckdb.DuckDBPyConnection, files: str | list[str] | None) -> str:
    """The query of the ``events`` view over the log's Parquet ``files`` (a list of
    paths, or a glob that matches them); None or an empty list: no events yet, an
    empty relation of the log's columns (a view over a glob that matches nothing
    would not even be created)."""
    if isinstance(files, str):
        return f"SELECT * FROM read_parquet({sql_string(files)}, union_by_name = true)"
    if files:
        # (by name: files written before a column was added lack it)
        listed = ", ".join(map(sql_string, files))
        return f"SELECT * FROM read_parquet([{listed}], union_by_name = true)"
    typed = ", ".join(
        f'CAST(NULL AS {kind}) AS "{name}"' for name, kind in column_types(con, SCHEMA)
    )
    return f"SELECT {typed} WHERE false"


def create_query_views(
    con: duckdb.DuckDBPyConnection, events: str, *, source: str = "", temp: bool = False
) -> None:
    """The ``events`` view (over ``events``, an ``events_sql``), the
    ``message_headers`` view and the ``thread(id)`` macro: ``temp`` for this
    connection only, else kept in the database file. ``source`` is noted on the
    ``events`` view (``events_source`` reads it back): what it reads, so that a
    caller can tell when it must be made again (the store moved)."""
    kind = "TEMP " if temp else ""
    con.execute(f"CREATE OR REPLACE {kind}VIEW events AS {events}")
    con.execute(f"CREATE OR REPLACE {kind}VIEW message_headers AS {MESSAGE_HEADERS_SQL}")
    con.execute(f"CREATE OR REPLACE {kind}MACRO {THREAD_MACRO_SQL}")
    if not temp:
        con.execute(f"COMMENT ON VIEW events IS {sql_string(source)}")


def events_source(con: duckdb.DuckDBPyConnection) -> str | None:
    """The ``source`` the database file's ``events`` view was made with (None: it
    has none, the file predates it)."""
    rows = con.execute(
        "SELECT comment FROM duckdb_views() WHERE database_name = current_database()"
        " AND schema_name = 'main' AND view_name = 'events'"
    ).fetchall()
    return (rows[0][0] or "") if rows else None


def create_tables(con: duckdb.DuckDBPyConnection) -> None:
    """Every projection table (both parts of a split one, and its view), those
    missing; the indexes of a delta part with it (a base's come after its rows)."""
    for name, cols in TABLES.items():
        for part in parts_of(name):
            con.execute(f"CREATE TABLE IF NOT EXISTS {part} ({cols})")
        if name in SPLIT_TABLES:
            con.execute(f"CREATE OR REPLACE VIEW {name} AS {_union(name)}")
            create_indexes(con, delta_of(name))
    for name, sql in VIEWS.items():
        con.execute(f"CREATE OR REPLACE VIEW {name} AS {sql}")
    con.execute(f"CREATE TABLE IF NOT EXISTS base_filters ({FILTERS})")


# The Bloom filters of the bases' keys (``projections.fold.deltas``): a row per
# filter, none until a rebuild or a merge makes them (every key may then be in a base).
FILTERS = "name VARCHAR NOT NULL, m UBIGINT NOT NULL, probe UBIGINT NOT NULL, bits BIT"


def drop_tables(con: duckdb.DuckDBPyConnection, name: str) -> None:
    """Table ``name``: its view and both parts when it is split."""
    if name in SPLIT_TABLES:
        con.execute(f"DROP VIEW IF EXISTS {name}")
    for part in parts_of(name):
        con.execute(f"DROP TABLE IF EXISTS {part}")


def create_indexes(con: duckdb.DuckDBPyConnection, table: str | None = None) -> list[str]:
    """The point-lookup indexes (of the physical table ``table`` only, when given);
    returns those that could not be made for lack of memory.

    DuckDB builds an ART index in memory, whole (it cannot spill one): under a
    small budget a large table's index may not fit. The table is then left
    without it, rather than the rebuild failing: every query on it stays right,
    and those the index served scan the table instead (``missing_indexes``
    tells; a replay with more memory brings the index back).
    """
    missing = []
    for name, target in _INDEXES.items():
        if table is None or target.startswith(f"{table}("):
            try:
                start = time.perf_counter()
                con.execute(f"CREATE INDEX IF NOT EXISTS {name} ON {target}")
                log.debug("index %s %.2f s", name, time.perf_counter() - start)
            except duckdb.OutOfMemoryException:
                missing.append(name)
    return missing


def missing_indexes(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The point-lookup indexes these tables lack (a rebuild short of memory)."""
    have = {
        r[0]
        for r in con.execute(
            "SELECT index_name FROM duckdb_indexes() WHERE database_name = current_database()"
        ).fetchall()
    }
    return [name for name in _INDEXES if name not in have]


# The ``meta`` key of a rebuild's random stamp on its Bloom filters
# (``projections.filters``): a fact of that build, not of the log, so left out of
# the fingerprint (an incremental build and a replay of the same log differ there).
FILTERS_STAMP = "filters_made"


def fingerprint(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """A digest per projection table over its rows, independent of row order.

    The row count, the column names and types, and the (exact, 128-bit) sum of
    DuckDB's hash of every whole row: equal multisets of rows give equal
    digests. Two projection databases are compared by the same DuckDB in the
    same process (``verify``: an incremental build against a fresh replay), so
    the hash function is the same on both sides; the scan runs inside DuckDB
    and costs no memory in Python, even for a large store.
    """
    import hashlib

    out: dict[str, str] = {}
    for name in TABLES:
        cols = con.execute(
            "SELECT column_name, data_type FROM information_schema.columns"
            " WHERE table_name = ? AND table_schema = 'main'"
            " AND table_catalog = current_database() ORDER BY ordinal_position",
            [name],
        ).fetchall()
        kept = f" WHERE key <> '{FILTERS_STAMP}'" if name == "meta" else ""
        count, total = con.execute(
            f"SELECT count(*), coalesce(sum(hash(t)::HUGEINT), 0) FROM {name} t{kept}"
        ).fetchall()[0]
        h = hashlib.sha256(repr((cols, count, str(total))).encode())
        out[name] = h.hexdigest()
    return out

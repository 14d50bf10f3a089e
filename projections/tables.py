"""The projection tables: their DDL, indexes, and the schema version they follow."""

from __future__ import annotations

import duckdb

__all__ = [
    "PROJECTION_VERSION",
    "TABLES",
    "VIEWS",
    "create_indexes",
    "create_tables",
    "fingerprint",
]

# Bump when a table's shape or a fold's rule changes; a store whose projections
# carry another version is rebuilt by replay (projections are disposable).
PROJECTION_VERSION = 5

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
    # One row per normalized (header, value), its ``key`` (header, 0x1F, value):
    # the Message-IDs that carry it in one string, sorted (code point order) and
    # separated by a space (no stored id holds whitespace). ``find`` reads one row
    # and splits it, where a list of row numbers had to be joined with every
    # message (1-2.5 ms on 100,000 messages, growing with the store); one string,
    # not a VARCHAR[], because a list of strings costs DuckDB more to build and
    # store. The view ``header_index`` shows one row per (header, value, id).
    "header_keys": "key VARCHAR NOT NULL, message_ids VARCHAR NOT NULL",
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
        vanished BOOLEAN NOT NULL
    """,
    "cursors": """
        account VARCHAR NOT NULL, folder VARCHAR NOT NULL,
        uidvalidity BIGINT, last_uid BIGINT, uidnext BIGINT,
        mode VARCHAR, seq BIGINT NOT NULL, updated_at TIMESTAMPTZ
    """,
}

# Only the point lookups people wait on get an ART index (get/raw, find,
# walk_thread); everything else is a scan or a hash join, which DuckDB does
# fast, and each index costs replay time and disk.
_INDEXES = {
    "messages_id": "messages(message_id)",
    "header_keys_key": "header_keys(key)",
    "thread_nodes_id": "thread_nodes(message_id)",
}

VIEWS = {
    "header_index": "SELECT split_part(key, chr(31), 1) AS header,"
    " key[strlen(split_part(key, chr(31), 1)) + 2:] AS value,"
    " unnest(string_split(message_ids, ' ')) AS message_id FROM header_keys",
}


def create_tables(con: duckdb.DuckDBPyConnection) -> None:
    for name, cols in TABLES.items():
        con.execute(f"CREATE TABLE IF NOT EXISTS {name} ({cols})")
    for name, sql in VIEWS.items():
        con.execute(f"CREATE OR REPLACE VIEW {name} AS {sql}")


def create_indexes(con: duckdb.DuckDBPyConnection, table: str | None = None) -> None:
    """The point-lookup indexes (of ``table`` only, when given)."""
    for name, target in _INDEXES.items():
        if table is None or target.startswith(f"{table}("):
            con.execute(f"CREATE INDEX IF NOT EXISTS {name} ON {target}")


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
        count, total = con.execute(
            f"SELECT count(*), coalesce(sum(hash(t)::HUGEINT), 0) FROM {name} t"
        ).fetchall()[0]
        h = hashlib.sha256(repr((cols, count, str(total))).encode())
        out[name] = h.hexdigest()
    return out

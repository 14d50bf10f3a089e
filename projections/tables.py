"""The projection tables: their DDL, indexes, and the schema version they follow."""

from __future__ import annotations

import duckdb

__all__ = ["PROJECTION_VERSION", "TABLES", "create_indexes", "create_tables", "fingerprint"]

# Bump when a table's shape or a fold's rule changes; a store whose projections
# carry another version is rebuilt by replay (projections are disposable).
PROJECTION_VERSION = 1

_HEADER = "STRUCT(name VARCHAR, value VARCHAR)[]"

TABLES: dict[str, str] = {
    "meta": "key VARCHAR NOT NULL, value BIGINT NOT NULL",
    "messages": f"""
        message_id VARCHAR NOT NULL,
        seq BIGINT NOT NULL,
        source VARCHAR, folder VARCHAR, uidvalidity BIGINT, uid BIGINT, uidl VARCHAR,
        size BIGINT, sha256 VARCHAR,
        headers {_HEADER},
        subject VARCHAR,
        subject_key VARCHAR,
        date_iso VARCHAR,
        date_key VARCHAR,
        date_utc TIMESTAMPTZ,
        date_offset_min INTEGER,
        from_addr VARCHAR,
        to_addrs VARCHAR[],
        in_reply_to VARCHAR,
        "references" VARCHAR[],
        list_id VARCHAR,
        synthetic_id BOOLEAN,
        defects VARCHAR[],
        indexed_at TIMESTAMPTZ
    """,
    "header_index": "key VARCHAR NOT NULL, header VARCHAR NOT NULL, value VARCHAR NOT NULL,"
    " message_id VARCHAR NOT NULL",
    "thread_edges": "child VARCHAR NOT NULL, parent VARCHAR NOT NULL, kind VARCHAR NOT NULL",
    "thread_nodes": "message_id VARCHAR NOT NULL, thread_id VARCHAR NOT NULL",
    "locations": """
        loc_key VARCHAR NOT NULL,
        source VARCHAR, folder VARCHAR, uidvalidity BIGINT, uid BIGINT, uidl VARCHAR,
        sha256 VARCHAR NOT NULL,
        message_id VARCHAR NOT NULL,
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

_INDEXES = {
    "messages_id": "messages(message_id)",
    "messages_sha": "messages(sha256)",
    "header_index_key": "header_index(key)",
    "header_index_msg": "header_index(message_id)",
    "thread_edges_child": "thread_edges(child)",
    "thread_edges_parent": "thread_edges(parent)",
    "thread_nodes_id": "thread_nodes(message_id)",
    "thread_nodes_thread": "thread_nodes(thread_id)",
    "locations_key": "locations(loc_key)",
    "locations_uidl": "locations(uidl)",
    "locations_sha": "locations(sha256)",
}


def create_tables(con: duckdb.DuckDBPyConnection) -> None:
    for name, cols in TABLES.items():
        con.execute(f"CREATE TABLE IF NOT EXISTS {name} ({cols})")


def create_indexes(con: duckdb.DuckDBPyConnection) -> None:
    for name, target in _INDEXES.items():
        con.execute(f"CREATE INDEX IF NOT EXISTS {name} ON {target}")


def fingerprint(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """A sha256 per projection table over its rows in a canonical order.

    Two projection databases with equal fingerprints hold the same rows, whatever
    order they were inserted in; ``verify`` compares an incremental build with a
    fresh replay this way.
    """
    import hashlib
    import json

    out: dict[str, str] = {}
    for name in TABLES:
        table = con.sql(f"SELECT * FROM {name} ORDER BY ALL").to_arrow_table()
        h = hashlib.sha256()
        for col in table.column_names:
            h.update(col.encode())
            h.update(json.dumps(table.column(col).to_pylist(), default=str).encode())
        out[name] = h.hexdigest()
    return out

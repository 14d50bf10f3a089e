"""The header index: one row per normalized (header, value) a message carries,
keyed by DuckDB's hash of the pair (``kh``), written and removed with the
message rows it indexes."""

from __future__ import annotations

import duckdb

from projections.fold.probes import one_statement
from projections.lookup import sql_literals
from projections.tables import parts_of

__all__ = ["INSERT_ENTRIES", "KEY_SEP", "delete_entries", "entries", "key_hash"]

KEY_SEP = "\x1f"


# ``header_index.kh``: DuckDB's hash of header, 0x1F, value. The hash is
# DuckDB's own (fast, vectorized); a DuckDB whose hash differs from the one that
# built the tables has them rebuilt (``hash_matches``).
_KH = f"hash(header || '{KEY_SEP}' || value)"


def key_hash(con: duckdb.DuckDBPyConnection, header: str, value: str) -> int:
    """The ``kh`` of a normalized (header, value), computed by DuckDB: a query that
    compares ``kh`` with this number (a literal) is an index scan, where
    ``kh = hash(?)`` would not be (a parameter is not folded before the scan is
    planned)."""
    return int(con.execute("SELECT hash(?)", [f"{header}{KEY_SEP}{value}"]).fetchall()[0][0])


# The value(s) each indexed header takes in a message row.
_INDEXED = {
    "subject": "subject_key",
    "from": "from_addr",
    "to": "unnest(list_distinct(to_addrs))",
    "date": "date_key",
    "in-reply-to": "in_reply_to",
    "references": 'unnest(list_distinct("references"))',
    "list-id": "list_id",
}


def entries(src: str) -> str:
    """SQL of the index entries of the message rows in ``src``: distinct
    (header, value, Message-ID) triples (an address in both To and Cc counts once)."""
    pairs = " UNION ALL ".join(
        f"SELECT '{h}' AS header, {value} AS value, message_id FROM {src}"
        for h, value in _INDEXED.items()
    )
    return f"SELECT header, value, message_id FROM ({pairs}) WHERE value IS NOT NULL"


# The rows of the entries in {src}, into {table} (a part of header_index).
INSERT_ENTRIES = f"INSERT INTO {{table}} SELECT {_KH}, header, value, message_id FROM {{src}}"


def delete_entries(con: duckdb.DuckDBPyConnection) -> None:
    """Remove the header_index entries of the rows in ``_removed``.

    Their keys' hashes are probed through the index (the rows found are those of
    every message carrying those keys, filtered to the removed ones by row id);
    a removal with more keys than that is worth is one scan instead.
    """
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE _old_keys AS SELECT DISTINCT {_KH} AS kh, message_id"
        f" FROM ({entries('_removed')})"
    )
    khs = [r[0] for r in con.execute("SELECT DISTINCT kh FROM _old_keys").fetchall()]
    for part in parts_of("header_index"):
        if one_statement(len(khs)):
            found = con.sql(
                f"SELECT rowid AS r, kh, message_id FROM {part} WHERE kh IN ({sql_literals(khs)})"
            ).to_arrow_table()
            con.register("_found", found)
            rowids = [
                r[0]
                for r in con.execute(
                    "SELECT r FROM _found JOIN _old_keys USING (kh, message_id)"
                ).fetchall()
            ]
            con.unregister("_found")
            if rowids:
                con.execute(f"DELETE FROM {part} WHERE rowid IN ({sql_literals(rowids)})")
        else:
            con.execute(
                f"DELETE FROM {part} WHERE message_id IN (SELECT message_id FROM _old_keys)"
                " AND (kh, message_id) IN (SELECT kh, message_id FROM _old_keys)"
            )
    con.execute("DROP TABLE _old_keys")

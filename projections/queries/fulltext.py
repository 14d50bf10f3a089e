"""The reads the full-text projection makes: of ``messages`` (which messages it
must hold: the winning seq and blob of each) and of its own SQLite file (the
documents it holds, the matches of an FTS5 expression, its fingerprint)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

import apsw
import duckdb
import pyarrow as pa

__all__ = [
    "held_docs",
    "match_seqs",
    "text_fingerprint",
    "winners",
    "winners_after",
    "winners_of",
]


def winners(con: duckdb.DuckDBPyConnection) -> pa.RecordBatchReader:
    """``seq``, ``message_id``, ``sha256`` of every stored message, seq order, streamed."""
    return con.sql("SELECT seq, message_id, sha256 FROM messages ORDER BY seq").to_arrow_reader(
        1 << 14
    )


def winners_after(con: duckdb.DuckDBPyConnection, seq: int) -> list[tuple[int, str, str]]:
    """``(seq, message_id, sha256)`` of the stored messages whose winning event
    is after ``seq``, in seq order."""
    rows = con.execute(
        "SELECT seq, message_id, sha256 FROM messages WHERE seq > ? ORDER BY seq", [seq]
    ).fetchall()
    return [(int(s), str(m), str(h)) for s, m, h in rows]


def winners_of(con: duckdb.DuckDBPyConnection, ids: Iterable[str]) -> dict[str, int]:
    """The winning seq of each of the Message-IDs ``ids`` still stored."""
    wanted = sorted(set(ids))
    if not wanted:
        return {}
    table = pa.table({"message_id": pa.array(wanted, pa.string())})
    con.register("_fulltext_ids", table)
    try:
        rows = con.execute(
            "SELECT message_id, seq FROM messages WHERE message_id IN"
            " (SELECT message_id FROM _fulltext_ids)"
        ).fetchall()
    finally:
        con.unregister("_fulltext_ids")
    return {str(m): int(s) for m, s in rows}


def held_docs(text: apsw.Connection, ids: Iterable[str]) -> dict[str, tuple[int, str, bool]]:
    """``message_id -> (seq, sha256, has_text)`` of the documents the index holds
    for ``ids``."""
    found: dict[str, tuple[int, str, bool]] = {}
    for message_id in set(ids):
        for seq, sha, has_text in text.execute(
            "SELECT seq, sha256, has_text FROM docs WHERE message_id = ?", (message_id,)
        ):
            found[message_id] = (int(seq), str(sha), bool(has_text))
    return found


def match_seqs(text: apsw.Connection, expression: str) -> list[int]:
    """The seq (rowid) of every document matching the FTS5 ``expression``."""
    rows = text.execute("SELECT rowid FROM text WHERE text MATCH ?", (expression,))
    return [int(r[0]) for r in rows]


def text_fingerprint(text: apsw.Connection) -> dict[str, Any]:
    """Digests of what the index holds: its documents, and every term with the
    documents and occurrences it has in each column (equal for two indexes that
    were given the same text, however they were built)."""
    docs = hashlib.sha256()
    for seq, message_id, sha, has_text in text.execute(
        "SELECT seq, message_id, sha256, has_text FROM docs ORDER BY seq"
    ):
        docs.update(f"{seq}\t{message_id}\t{sha}\t{has_text}\n".encode())
    terms = hashlib.sha256()
    for term, col, doc, cnt in text.execute(
        "SELECT term, col, doc, cnt FROM temp.text_terms ORDER BY term, col"
    ):
        terms.update(f"{term}\t{col}\t{doc}\t{cnt}\n".encode())
    return {"docs": docs.hexdigest(), "terms": terms.hexdigest()}

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
    "BUCKET",
    "DATED",
    "UNDATED",
    "Match",
    "bucket_start",
    "doc_key",
    "held_docs",
    "match_best",
    "match_page",
    "match_ranked",
    "match_seqs",
    "match_window",
    "next_key",
    "removed_between",
    "taken_keys",
    "text_fingerprint",
    "winners",
    "winners_after",
]


# a message's date in whole seconds since the epoch (floored: before 1970 too)
_SECONDS = "CAST(floor(epoch(date_utc)) AS BIGINT)"


def winners(con: duckdb.DuckDBPyConnection) -> pa.RecordBatchReader:
    """``seq``, ``message_id``, ``sha256``, ``date`` (whole seconds) of every stored
    message, streamed in the order of their first keys (``doc_key``): FTS5 writes
    its pending terms out as a segment whenever a rowid comes below the last one,
    so a build given them in seq order wrote a segment at almost every message."""
    return con.sql(
        "SELECT seq, message_id, sha256, date FROM"
        f" (SELECT seq, message_id, sha256, {_SECONDS} AS date FROM messages)"
        f" ORDER BY {_FIRST_KEY}, seq"
    ).to_arrow_reader(1 << 14)


def winners_after(
    con: duckdb.DuckDBPyConnection, seq: int
) -> list[tuple[int, str, str, int | None]]:
    """``(seq, message_id, sha256, date)`` of the stored messages whose winning
    event is after ``seq``, in seq order."""
    rows = con.execute(
        f"SELECT seq, message_id, sha256, {_SECONDS} FROM messages WHERE seq > ? ORDER BY seq",
        [seq],
    ).fetchall()
    return [(int(s), str(m), str(h), None if d is None else int(d)) for s, m, h, d in rows]


def removed_between(con: duckdb.DuckDBPyConnection, after: int, upto: int) -> list[int]:
    """The winning seqs, at or below ``after``, of the stored messages that
    deletions after seq ``after`` and up to ``upto`` removed (``removals``)."""
    rows = con.execute(
        "SELECT seq FROM removals WHERE deleted_seq > ? AND deleted_seq <= ? AND seq <= ?",
        [after, upto, after],
    ).fetchall()
    return sorted(int(seq) for (seq,) in rows)


def held_docs(text: apsw.Connection, seqs: Iterable[int]) -> dict[int, tuple[int, str, bool]]:
    """``seq -> (key, sha256, has_text)`` of the documents the index holds for the
    messages of ``seqs`` (each asked through the unique index on ``docs.seq``)."""
    found: dict[int, tuple[int, str, bool]] = {}
    for seq in sorted(set(seqs)):
        for key, sha, has_text in text.execute(
            "SELECT key, sha256, has_text FROM docs WHERE seq = ?", (seq,)
        ):
            found[seq] = (int(key), str(sha), bool(has_text))
    return found


def taken_keys(text: apsw.Connection, keys: Iterable[int]) -> set[int]:
    """Which of ``keys`` already name a document."""
    wanted = sorted(set(keys))
    if not wanted:
        return set()
    marks = ",".join("?" * len(wanted))
    return {int(k) for (k,) in text.execute(f"SELECT key FROM docs WHERE key IN ({marks})", wanted)}


# -- document keys --------------------------------------------------------------
# A document's rowid (its key) orders the index by week: the week its date falls
# in times 2**24, plus the seq modulo 2**24 (the next free slot of the same week
# when two messages would share it: a store of more than 16 million events).
# FTS5 reads a doclist in rowid order, so "the newest 50 matches" read the
# newest weeks' matches, not every match; within a week ``docs.date`` orders
# them. Undated messages sit below every dated one. ``docs`` maps a key to the
# message's seq (its row in ``messages``). Weeks, not seconds: FTS5 stores the
# gap between two keys of a doclist as a varint, and second keys made the index
# 0.575x the text at 1,000,000 messages against 0.42x keyed by seq.
WEEK = 7 * 24 * 3600
BUCKET = 1 << 24  # the keys of one week
UNDATED = -(1 << 62)  # undated keys: UNDATED + seq
DATED = -(1 << 61)  # every dated key is at or above this
_DATE_LIMIT = (1 << 37) - 1  # seconds (about 4,300 years either side of 1970)


def doc_key(seq: int, date: int | None) -> int:
    """The first key a message of ``seq`` dated ``date`` (whole seconds) may take."""
    if date is None:
        return UNDATED + seq
    return (max(-_DATE_LIMIT, min(date, _DATE_LIMIT)) // WEEK) * BUCKET + seq % BUCKET


# ``doc_key`` in SQL, of the columns ``seq`` and ``date`` (``_SECONDS``): the
# clamped date less its remainder in the week (floored, before 1970 too)
_CLAMPED = f"greatest({-_DATE_LIMIT}, least(date, {_DATE_LIMIT}))"
_FIRST_KEY = (
    f"CASE WHEN date IS NULL THEN {UNDATED} + seq ELSE"
    f" (({_CLAMPED} - (({_CLAMPED} % {WEEK}) + {WEEK}) % {WEEK}) // {WEEK}) * {BUCKET}"
    f" + seq % {BUCKET} END"
)


def next_key(key: int) -> int:
    """The key tried after ``key`` is taken: the next slot of the same week (or of
    the undated)."""
    if key < DATED:
        return key + 1
    return key - key % BUCKET + (key + 1) % BUCKET


def bucket_start(key: int) -> int:
    """The lowest key of the week ``key`` falls in (for an undated key: the
    lowest undated key)."""
    return UNDATED if key < DATED else key - key % BUCKET


# a match joined to its document (FTS5 first: it drives, docs is read by key)
_MATCHED = "FROM text CROSS JOIN docs d ON d.key = text.rowid WHERE text MATCH ?"
_ROW = "text.rowid, d.seq, d.message_id, d.date"
Match = tuple[int, int, str, int | None]
"""``(key, seq, message_id, date)`` of a matching document (its date in whole
seconds, None when undated)."""


def _bm25(weights: Iterable[float]) -> str:
    """FTS5's bm25 of a match, its columns weighted by ``weights``."""
    return "bm25(text, " + ", ".join(f"{float(w)!r}" for w in weights) + ")"


def match_seqs(text: apsw.Connection, expression: str) -> list[int]:
    """The seq of every document matching the FTS5 ``expression``."""
    rows = text.execute(f"SELECT d.seq {_MATCHED}", (expression,))
    return [int(r[0]) for r in rows]


def match_ranked(
    text: apsw.Connection, expression: str, weights: Iterable[float]
) -> list[tuple[int, float]]:
    """``(seq, score)`` of every document matching ``expression``: FTS5's bm25 with
    the columns weighted by ``weights`` (lower is better)."""
    rows = text.execute(f"SELECT d.seq, {_bm25(weights)} {_MATCHED}", (expression,))
    return [(int(seq), float(score)) for seq, score in rows]


def match_best(
    text: apsw.Connection, expression: str, weights: Iterable[float], limit: int, offset: int
) -> list[str]:
    """The Message-IDs of the documents matching ``expression`` ranked by bm25
    (columns weighted by ``weights``), then newest, undated last, then by id:
    ``limit`` of them after the first ``offset`` (ranked by SQLite itself: only
    the page comes back)."""
    sql = (
        f"SELECT d.message_id {_MATCHED} ORDER BY {_bm25(weights)},"
        " d.date IS NULL, d.date DESC, d.message_id LIMIT ? OFFSET ?"
    )
    return [str(m) for (m,) in text.execute(sql, (expression, limit, offset))]


def _matches(rows: Iterable[tuple[Any, ...]]) -> list[Match]:
    return [(int(k), int(s), str(m), None if d is None else int(d)) for k, s, m, d in rows]


def match_window(text: apsw.Connection, expression: str, low: int, high: int) -> list[Match]:
    """The documents matching ``expression`` whose key is in ``[low, high)``."""
    sql = f"SELECT {_ROW} {_MATCHED} AND text.rowid >= ? AND text.rowid < ?"
    return _matches(text.execute(sql, (expression, low, high)))


def match_page(
    text: apsw.Connection, expression: str, newest: bool, beyond: int, count: int
) -> list[Match]:
    """The next ``count`` documents matching ``expression`` going from key
    ``beyond`` (not included) towards older (``newest``) or newer keys, in key
    order."""
    if newest:
        sql = f"SELECT {_ROW} {_MATCHED} AND text.rowid < ? ORDER BY text.rowid DESC LIMIT ?"
    else:
        sql = f"SELECT {_ROW} {_MATCHED} AND text.rowid > ? ORDER BY text.rowid LIMIT ?"
    return _matches(text.execute(sql, (expression, beyond, count)))


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

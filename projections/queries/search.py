"""``search``: a compiled query (``search_sql``) run over the projections, shaped
as the command prints it: the matching messages, their threads, or a count.

A page of messages (``--limit``) is read in two steps, so that its cost follows
the page, not the matches: first the ids of the page in order (for a query of
the full-text index, a date window of the index at a time, newest or oldest
first, until the page is full: the index is keyed by date), then the columns of
those ids alone, through the ``message_id`` index. Everything else is one DuckDB
query over the whole match."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Literal

import apsw
import duckdb
import pyarrow as pa

from projections.lookup import INDEX_KEYS_MAX, rows_where_in, sql_literals
from projections.queries.fulltext import (
    BUCKET,
    DATED,
    UNDATED,
    Match,
    bucket_start,
    match_best,
    match_page,
    match_ranked,
    match_seqs,
    match_window,
)
from projections.queries.locations import message_flags_among
from projections.queries.search_sql import IN_THREAD, SearchPlan

__all__ = [
    "RANK_WEIGHTS",
    "ExportRow",
    "Output",
    "Sort",
    "export_page",
    "search_sql",
    "search_table",
]

#: A match an export writes: (seq, message_id, sha256, size, from_addr, date as Unix
#: seconds or None, the sha256 of its variants, its flags or None).
ExportRow = tuple[int, str, str, int, str | None, int | None, list[str], list[str] | None]

Output = Literal["summary", "messages", "threads", "count"]
Sort = Literal["newest", "oldest", "relevance"]

# undated messages last whichever way, then by id: a stable order for --offset
_ORDER = {
    "newest": "{d} DESC NULLS LAST, {i}",
    "oldest": "{d} ASC NULLS LAST, {i}",
    # FTS5's bm25 summed over the query's text terms (lower is better), then newest
    "relevance": "{r} ASC NULLS LAST, {d} DESC NULLS LAST, {i}",
}
RANK_WEIGHTS = (4.0, 1.0, 2.0, 2.0, 0.0, 2.0, 2.0)
"""bm25's weight of each column of the index (subject, body, names, filenames,
flags, from_names, to_names): a word in the subject counts four times one in the
body."""
_RANK = "_rank"  # the table of (seq, score) a relevance search reads

_MESSAGES = (
    "SELECT m.message_id, m.date_iso, m.from_addr, m.subject FROM messages m{join}"
    " WHERE {where} ORDER BY {order}{page}"
)
_IDS = "SELECT m.message_id FROM messages m WHERE {where} ORDER BY {order}{page}"
# (the matches first, then their order: a condition on message_id is read
# through the index only outside ``ORDER BY … LIMIT``)
_IDS_BY_ID = (
    "WITH m AS MATERIALIZED (SELECT m.message_id, m.date_utc FROM messages m WHERE {where})"
    " SELECT m.message_id FROM m ORDER BY {order}{page}"
)
_SUMMARY = "message_id, date_iso, from_addr, subject"
_PAGED = 1_000  # the largest page (limit + offset) read in two steps
FIRST_WINDOW = 256  # matches of the first date window (at least twice the page)

# One row per thread holding a match: how many of its messages match, how many
# it stores, the newest (or oldest) match's date, and the subject of its first
# stored message.
_THREADS = """
WITH hits AS (
    SELECT n.thread_id, m.date_utc, m.date_iso{score} FROM messages m
    JOIN thread_nodes n ON n.message_id = m.message_id{join} WHERE {where}
), found AS (
    SELECT thread_id, count(*) AS matched, {pick}(date_utc) AS date_utc,
           {pick_by}(date_iso, date_utc) AS date_iso, min(score) AS score
    FROM hits GROUP BY thread_id
), stored AS (
    SELECT n.thread_id, count(*) AS messages,
           arg_min(m.subject, (m.date_utc IS NULL, m.date_utc, m.message_id)) AS subject
    FROM thread_nodes n JOIN messages m ON m.message_id = n.message_id
    WHERE n.thread_id IN (SELECT thread_id FROM found) GROUP BY n.thread_id
)
SELECT f.thread_id, f.matched, s.messages, f.date_iso, s.subject
FROM found f JOIN stored s USING (thread_id)
ORDER BY {order}{page}
"""


def search_sql(
    plan: SearchPlan,
    output: Output,
    sort: Sort = "newest",
    limit: int | None = None,
    offset: int = 0,
) -> str:
    """The one query that answers ``plan`` as ``output`` asks (``relevance``: by
    the ``_rank`` table of scores a search registers; a query with no text to
    rank is sorted newest first)."""
    page = _page(limit, offset)
    if output == "count":
        return f"SELECT count(*) AS count FROM messages m WHERE {plan.where}"
    if sort == "relevance" and not plan.text.keys() - plan.names:
        sort = "newest"
    ranked = sort == "relevance"
    join = f" LEFT JOIN {_RANK} r ON r.seq = m.seq" if ranked else ""
    if output == "threads":
        oldest = sort == "oldest"
        return _THREADS.format(
            where=plan.where,
            join=join,
            score=", r.score" if ranked else ", NULL::DOUBLE AS score",
            pick="min" if oldest else "max",
            pick_by="arg_min" if oldest else "arg_max",
            order=_ORDER[sort].format(d="f.date_utc", i="f.thread_id", r="f.score"),
            page=page,
        ).strip()
    order = _ORDER[sort].format(d="m.date_utc", i="m.message_id", r="r.score")
    return _MESSAGES.format(join=join, where=plan.where, order=order, page=page)


def _page(limit: int | None, offset: int) -> str:
    return (f" LIMIT {int(limit)}" if limit is not None else "") + (
        f" OFFSET {int(offset)}" if offset else ""
    )


def search_table(
    con: duckdb.DuckDBPyConnection,
    plan: SearchPlan,
    output: Output,
    sort: Sort = "newest",
    limit: int | None = None,
    offset: int = 0,
    text: apsw.Connection | None = None,
) -> pa.Table:
    """The answer to ``plan``, as an Arrow table: for ``summary`` and ``messages``
    a row per matching message (message_id, date_iso, from_addr, subject), for
    ``threads`` a row per thread (thread_id, matched, messages, date_iso,
    subject), for ``count`` one row holding the count. ``text``: the full-text
    index, caught up with ``con``, when the plan reads it."""
    with _threads_read(con, plan) as plan:
        return _search(con, plan, output, sort, limit, offset, text)


def _search(
    con: duckdb.DuckDBPyConnection,
    plan: SearchPlan,
    output: Output,
    sort: Sort,
    limit: int | None,
    offset: int,
    text: apsw.Connection | None,
) -> pa.Table:
    ranked_page = sort == "relevance" and plan.only_text and output in ("summary", "messages")
    if ranked_page and limit is not None and text is not None:
        # (ranked by SQLite: only the page comes back)
        expression = plan.text[plan.drive or ""]
        return _rows_of(con, match_best(text, expression, RANK_WEIGHTS, limit, offset))
    paged = limit is not None and limit + offset <= _PAGED and sort != "relevance"
    if paged and output in ("summary", "messages"):
        assert limit is not None
        if plan.drive is not None and text is not None:
            ids = _by_windows(con, plan, text, sort == "newest", limit + offset)[offset:]
        else:
            order = _ORDER[sort].format(d="m.date_utc", i="m.message_id")
            with _text_matches(con, plan, text):
                ids_sql = _IDS_BY_ID if plan.by_id else _IDS
                sql = ids_sql.format(where=plan.where, order=order, page=_page(limit, offset))
                ids = [str(r[0]) for r in con.execute(sql).fetchall()]
        return _rows_of(con, ids[:limit])
    with _text_matches(con, plan, text, ranked=sort == "relevance"):
        return con.sql(search_sql(plan, output, sort, limit, offset)).to_arrow_table()


def _rows_of(con: duckdb.DuckDBPyConnection, ids: list[str]) -> pa.Table:
    """The summary columns of the messages ``ids``, in that order (read through
    the ``message_id`` index: DuckDB plans an index scan for a list of literals)."""
    if not ids:
        empty = _MESSAGES.format(join="", where="false", order="m.message_id", page="")
        return con.sql(empty).to_arrow_table()
    table = rows_where_in(con, "messages", "message_id", ids, _SUMMARY)
    at = {m: i for i, m in enumerate(table.column("message_id").to_pylist())}
    return table.take(pa.array([at[m] for m in ids if m in at], pa.int64()))


def _by_windows(
    con: duckdb.DuckDBPyConnection,
    plan: SearchPlan,
    text: apsw.Connection,
    newest: bool,
    need: int,
) -> list[str]:
    """The ids of the first ``need`` matches of ``plan`` (fewer when fewer match),
    newest (or oldest) first, undated last: read a window of the full-text
    index's keys at a time, the driving text table's next matches (four times as
    many each window) and the rest of the last one's week (a window holds whole
    weeks: its matches all come before the next window's)."""
    drive = plan.text[plan.drive or ""]
    found: list[str] = []
    chunk = max(FIRST_WINDOW, 2 * need)
    beyond: int | None = (1 << 63) - 1 if newest else DATED - 1  # (exclusive)
    while len(found) < need and beyond is not None:
        page = match_page(text, drive, newest, beyond, chunk)
        full = len(page) == chunk
        if newest:
            low = bucket_start(page[-1][0]) if full else UNDATED
            rest = match_window(text, drive, low, page[-1][0]) if full else []
            window, beyond = (low, beyond), (low if full and low != UNDATED else None)
        elif full:
            high = bucket_start(page[-1][0]) + BUCKET
            rest = match_window(text, drive, page[-1][0] + 1, high)
            window, beyond = (beyond + 1, high), high - 1
        else:  # the dated matches are all read: the undated ones are the last window
            rest = match_window(text, drive, UNDATED, DATED)
            found += _window(con, plan, text, newest, page, (beyond + 1, 1 << 62))
            page, window, beyond = [], (UNDATED, DATED), None
        found += _window(con, plan, text, newest, page + rest, window)
        chunk *= 4
    return found[:need]


def _window(
    con: duckdb.DuckDBPyConnection,
    plan: SearchPlan,
    text: apsw.Connection,
    newest: bool,
    driven: list[Match],
    window: tuple[int, int],
) -> list[str]:
    """The ids of the matches among ``driven`` (the driving table's matches whose
    key is in ``window``, ``[low, high)``), in order."""
    if not driven:
        return []
    if plan.only_text:  # the index's matches are the answer, docs.date their order
        sign = -1 if newest else 1
        driven.sort(key=lambda r: (r[3] is None, sign * (r[3] or 0), r[2]))
        return [r[2] for r in driven]
    for name, expression in plan.text.items():
        rows = driven if name == plan.drive else match_window(text, expression, *window)
        con.register(name, pa.table({"seq": pa.array([r[1] for r in rows], pa.int64())}))
    try:
        order = _ORDER["newest" if newest else "oldest"].format(d="m.date_utc", i="m.message_id")
        sql = _IDS.format(where=plan.where, order=order, page="")
        return [str(r[0]) for r in con.execute(sql).fetchall()]
    finally:
        for name in plan.text:
            con.unregister(name)


@contextlib.contextmanager
def _threads_read(con: duckdb.DuckDBPyConnection, plan: SearchPlan) -> Iterator[SearchPlan]:
    """``plan`` with each thread it reads spelled as the literal list of the
    thread's Message-IDs (read through the ``thread_nodes`` indexes), so that
    DuckDB reads them through the ``message_id`` index (a thread of 10 messages
    at 1,000,000 messages: 75-100 ms as subqueries, 2 ms spelled); a thread too
    large to spell is registered as a table under its name."""
    if not plan.threads:
        yield plan
        return
    where, tables = plan.where, []
    for name, msgid in plan.threads.items():
        ids = _thread_ids(con, msgid)
        listed = sql_literals(ids) if 0 < len(ids) <= INDEX_KEYS_MAX else None
        if listed is None:
            con.register(name, pa.table({"message_id": pa.array(ids, pa.string())}))
            tables.append(name)
        else:  # (the condition after its alias: ``m.`` or a subquery's ``m1.``)
            where = where.replace(IN_THREAD.format(m="", name=name), f".message_id IN ({listed})")
    try:
        yield dataclasses.replace(plan, where=where, threads={})
    finally:
        for name in tables:
            con.unregister(name)


def _thread_ids(con: duckdb.DuckDBPyConnection, msgid: str) -> list[str]:
    """The Message-IDs of the thread holding ``msgid`` (none: no such message)."""
    found = rows_where_in(con, "thread_nodes", "message_id", [msgid], "thread_id")
    threads = found.column("thread_id").to_pylist()
    if not threads:
        return []
    members = rows_where_in(con, "thread_nodes", "thread_id", threads, "message_id")
    return sorted(members.column("message_id").to_pylist())


@contextlib.contextmanager
def _text_matches(
    con: duckdb.DuckDBPyConnection,
    plan: SearchPlan,
    text: apsw.Connection | None,
    *,
    ranked: bool = False,
) -> Iterator[None]:
    """The seqs each full-text term of ``plan`` matches, registered on ``con`` under
    the names its SQL reads them by (none: the plan reads no text); ``ranked``:
    also ``_rank``, each matching seq's bm25 summed over the terms it matches."""
    if not plan.text:
        yield
        return
    if text is None:
        raise ValueError("this plan reads the full-text index: pass its connection")
    scores: dict[int, float] = {}
    for name, expression in plan.text.items():
        if ranked and name not in plan.names:
            matched = match_ranked(text, expression, RANK_WEIGHTS)
            for seq, score in matched:
                scores[seq] = scores.get(seq, 0.0) + score
            seqs = pa.array([seq for seq, _ in matched], pa.int64())
        else:
            seqs = pa.array(match_seqs(text, expression), pa.int64())
        con.register(name, pa.table({"seq": seqs}))
    names = [*plan.text, *([_RANK] if ranked else [])]
    if ranked:
        rank = {"seq": pa.array(list(scores), pa.int64()), "score": list(scores.values())}
        con.register(_RANK, pa.table(rank))
    try:
        yield
    finally:
        for name in names:
            con.unregister(name)


# A page of the matches an export writes, in the order the store received them
# (``seq``: unique and never null, so a page starts where the last one ended
# whatever was folded between them), each with the other contents seen under its
# Message-ID since it was stored (``last_seq >= seq``: not those of a copy
# deleted before it came back, whose blobs a purge may have erased), in the
# order they came. The page is cut first, so its locations are a join against
# at most ``limit`` ids, however many messages match.
_EXPORT_PAGE = (
    "WITH page AS (SELECT m.seq, m.message_id, m.sha256, m.size, m.from_addr,"
    " CAST(epoch(m.date_utc) AS BIGINT) AS date_epoch"
    " FROM messages m WHERE ({where}) AND m.seq > {after} ORDER BY m.seq LIMIT {limit}){others}"
    ", shown AS ({flags})"
    " SELECT p.seq, p.message_id, p.sha256, p.size, p.from_addr, p.date_epoch, {variants},"
    " shown.flags FROM page p{join} LEFT JOIN shown USING (message_id) ORDER BY p.seq"
)
_EXPORT_VARIANTS = (
    ", other AS (SELECT l.message_id, l.sha256, min(l.first_seq) AS first_seq"
    " FROM locations l JOIN page p ON l.message_id = p.message_id"
    " WHERE l.sha256 <> p.sha256 AND l.last_seq >= p.seq GROUP BY l.message_id, l.sha256),"
    " lists AS (SELECT message_id, list(sha256 ORDER BY first_seq, sha256) AS variants"
    " FROM other GROUP BY message_id)"
)


def export_page(
    con: duckdb.DuckDBPyConnection,
    plan: SearchPlan,
    after: int,
    limit: int,
    variants: bool = False,
    text: apsw.Connection | None = None,
) -> list[ExportRow]:
    """Up to ``limit`` matches of ``plan`` stored after seq ``after``, in seq order:
    (seq, message_id, sha256, size, from_addr, date as Unix seconds or None, the
    sha256 of the other contents stored under that Message-ID when ``variants``,
    else [], the message's flags or None: ``queries.locations.MESSAGE_FLAGS``). An
    export reads page by page, so that it never holds the store (nor
    every match) while it writes. ``text``: as ``search_table``'s."""
    with _threads_read(con, plan) as plan, _text_matches(con, plan, text):
        sql = _EXPORT_PAGE.format(
            where=plan.where,
            after=int(after),
            limit=int(limit),
            others=_EXPORT_VARIANTS if variants else "",
            variants="coalesce(lists.variants, []::VARCHAR[])" if variants else "[]::VARCHAR[]",
            join=" LEFT JOIN lists USING (message_id)" if variants else "",
            flags=message_flags_among("SELECT message_id FROM page"),
        )
        rows: list[ExportRow]
        rows = con.execute(sql).fetchall()
    return rows

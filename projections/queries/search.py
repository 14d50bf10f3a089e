"""``search``: a compiled query (``search_sql``) run as one DuckDB query over
the projections, shaped as the command prints it: the matching messages, their
threads, or a count."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Literal

import apsw
import duckdb
import pyarrow as pa

from projections.queries.fulltext import match_seqs
from projections.queries.search_sql import SearchPlan

__all__ = ["Output", "Sort", "export_page", "search_sql", "search_table"]

Output = Literal["summary", "messages", "threads", "count"]
Sort = Literal["newest", "oldest"]

# undated messages last whichever way, then by id: a stable order for --offset
_ORDER = {
    "newest": "{d} DESC NULLS LAST, {i}",
    "oldest": "{d} ASC NULLS LAST, {i}",
}

_MESSAGES = (
    "SELECT m.message_id, m.date_iso, m.from_addr, m.subject FROM messages m"
    " WHERE {where} ORDER BY {order}{page}"
)

# One row per thread holding a match: how many of its messages match, how many
# it stores, the newest (or oldest) match's date, and the subject of its first
# stored message.
_THREADS = """
WITH hits AS (
    SELECT n.thread_id, m.date_utc, m.date_iso FROM messages m
    JOIN thread_nodes n ON n.message_id = m.message_id WHERE {where}
), found AS (
    SELECT thread_id, count(*) AS matched, {pick}(date_utc) AS date_utc,
           {pick_by}(date_iso, date_utc) AS date_iso
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
    """The one query that answers ``plan`` as ``output`` asks."""
    page = (f" LIMIT {int(limit)}" if limit is not None else "") + (
        f" OFFSET {int(offset)}" if offset else ""
    )
    if output == "count":
        return f"SELECT count(*) AS count FROM messages m WHERE {plan.where}"
    if output == "threads":
        newest = sort == "newest"
        return _THREADS.format(
            where=plan.where,
            pick="max" if newest else "min",
            pick_by="arg_max" if newest else "arg_min",
            order=_ORDER[sort].format(d="f.date_utc", i="f.thread_id"),
            page=page,
        ).strip()
    order = _ORDER[sort].format(d="m.date_utc", i="m.message_id")
    return _MESSAGES.format(where=plan.where, order=order, page=page)


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
    with _text_matches(con, plan, text):
        return con.sql(search_sql(plan, output, sort, limit, offset)).to_arrow_table()


@contextlib.contextmanager
def _text_matches(
    con: duckdb.DuckDBPyConnection, plan: SearchPlan, text: apsw.Connection | None
) -> Iterator[None]:
    """The seqs each full-text term of ``plan`` matches, registered on ``con`` under
    the names its SQL reads them by (none: the plan reads no text)."""
    if not plan.text:
        yield
        return
    if text is None:
        raise ValueError("this plan reads the full-text index: pass its connection")
    for name, expression in plan.text.items():
        seqs = pa.array(match_seqs(text, expression), pa.int64())
        con.register(name, pa.table({"seq": seqs}))
    try:
        yield
    finally:
        for name in plan.text:
            con.unregister(name)


# A page of the matches an export writes, in the order the store received them
# (``seq``: unique and never null, so a page starts where the last one ended
# whatever was folded between them).
_EXPORT_PAGE = (
    "SELECT m.seq, m.message_id, m.sha256, m.size, m.from_addr,"
    " CAST(epoch(m.date_utc) AS BIGINT) AS date_epoch"
    " FROM messages m WHERE ({where}) AND m.seq > {after} ORDER BY m.seq LIMIT {limit}"
)


def export_page(
    con: duckdb.DuckDBPyConnection,
    plan: SearchPlan,
    after: int,
    limit: int,
    text: apsw.Connection | None = None,
) -> list[tuple[int, str, str, int, str | None, int | None]]:
    """Up to ``limit`` matches of ``plan`` stored after seq ``after``, in seq order:
    (seq, message_id, sha256, size, from_addr, date as Unix seconds or None). An
    export reads page by page, so that it never holds the store (nor every match)
    while it writes. ``text``: as ``search_table``'s."""
    sql = _EXPORT_PAGE.format(where=plan.where, after=int(after), limit=int(limit))
    with _text_matches(con, plan, text):
        rows: list[tuple[int, str, str, int, str | None, int | None]] = con.execute(sql).fetchall()
    return rows

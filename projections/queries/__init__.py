"""Every read of the projection tables, as plain functions of a DuckDB connection.

The connection is one the projector handed out (its tables caught up with the
log, or lagging only what the asking writer committed itself); these functions
never open, fold or release anything. ``MessageStore`` and the commands call them
through the store; the few that need the log's own columns (the decoded headers,
kept only there) take the log too.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from projections.queries.held import held_pool, snapshot_folders
from projections.queries.locations import (
    CURSOR_LOG,
    FEW_PLACES,
    contains_uidl,
    cursor,
    deleted_contents,
    folder_cursors,
    has_places,
    held_shas,
    known_uidls,
    locations_at,
    locations_in,
    uidl_places,
    uidls,
)
from projections.queries.messages import (
    count_stored_shas,
    counts,
    find_ids,
    find_key,
    find_listing,
    has_messages,
    headers_at,
    known_records,
    listing,
    message,
    message_ids,
    message_rows,
    message_sha,
    recipients_after,
    run_sql,
    stored_ids,
    stored_shas,
    thread_of,
    thread_of_id,
)
from projections.queries.threads import ThreadNode, thread_tree

if TYPE_CHECKING:
    from projections.queries.search import ExportRow, Output, Sort, export_page, search_table
    from projections.queries.search_sql import SearchPlan, compile_query

# The search language (its parser and SQL compiler) is imported when first asked
# for: a sync or an import never needs it, and it costs them 25 ms to import.
# (The SQL a search runs, for ``--explain``, is ``queries.search.search_sql``: the
# package's attribute of that name is its module ``search_sql``.)
_SEARCH = {
    "ExportRow": "search",
    "Output": "search",
    "Sort": "search",
    "export_page": "search",
    "search_table": "search",
    "SearchPlan": "search_sql",
    "compile_query": "search_sql",
}

__all__ = [
    "CURSOR_LOG",
    "FEW_PLACES",
    "ExportRow",
    "Output",
    "SearchPlan",
    "Sort",
    "ThreadNode",
    "compile_query",
    "contains_uidl",
    "count_stored_shas",
    "counts",
    "cursor",
    "deleted_contents",
    "export_page",
    "find_ids",
    "find_key",
    "find_listing",
    "folder_cursors",
    "has_messages",
    "has_places",
    "headers_at",
    "held_pool",
    "held_shas",
    "known_records",
    "known_uidls",
    "listing",
    "locations_at",
    "locations_in",
    "message",
    "message_ids",
    "message_rows",
    "message_sha",
    "recipients_after",
    "run_sql",
    "search_table",
    "snapshot_folders",
    "stored_ids",
    "stored_shas",
    "thread_of",
    "thread_of_id",
    "thread_tree",
    "uidl_places",
    "uidls",
]  # fmt: skip


def __getattr__(name: str) -> object:
    module = _SEARCH.get(name)
    if module is None:
        raise AttributeError(name)
    return getattr(importlib.import_module(f"projections.queries.{module}"), name)

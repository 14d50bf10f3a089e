"""A thread as a tree: its nodes (stored messages and ghosts, the ids replied
to that the store does not hold) with one parent each, read from
``thread_nodes``, ``thread_edges`` and the members' ``messages`` rows.

A stored message's parent is one of its edges: its In-Reply-To when it has
that edge, else the nearest of its References (the last in the header's
order). A ghost, or a stored message without edges of its own, takes as parent
the id a reply's References name just before it, as in JWZ threading (the
newest reply's first). A link that would close a
loop is dropped. Roots and each node's children are ordered by date (a ghost
takes its earliest descendant's), undated last, then by id.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import duckdb

from projections.lookup import rows_where_in
from projections.queries.messages import thread_nodes_of

__all__ = ["MEMBER_COLUMNS", "ThreadNode", "thread_tree", "tree_of"]


@dataclass
class ThreadNode:
    """One node of a thread tree: ``missing`` for a ghost, which has no record."""

    message_id: str
    missing: bool
    date_iso: str | None = None
    from_addr: str | None = None
    subject: str | None = None
    children: list[ThreadNode] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """The node and its subtree as JSON-ready nested dicts."""
        return {
            "message_id": self.message_id,
            "missing": self.missing,
            "date_iso": self.date_iso,
            "from_addr": self.from_addr,
            "subject": self.subject,
            "children": [c.as_dict() for c in self.children],
        }


# The columns of a stored member the tree needs.
MEMBER_COLUMNS = 'message_id, date_iso, from_addr, subject, in_reply_to, "references"'


def thread_tree(con: duckdb.DuckDBPyConnection, msg_id: str) -> list[ThreadNode]:
    """The roots of the tree of ``msg_id``'s thread (NotFoundError: not stored);
    more than one when no edge joins two parts under a common ghost.

    Its cost follows the thread: the nodes through the index on their thread,
    the stored members' rows through the index on Message-ID, and each member's
    edges from its own In-Reply-To and References, as the folds write them into
    ``thread_edges`` (which has no index on ``child``: asked for a thread's
    edges, DuckDB read all of its 2,100,000 rows at 1,000,000 messages, 0.18 s)."""
    ids = thread_nodes_of(con, msg_id)
    stored = {
        r["message_id"]: r
        for r in rows_where_in(con, "messages", "message_id", ids, MEMBER_COLUMNS).to_pylist()
    }
    return tree_of(ids, stored)


def tree_of(ids: list[str], stored: dict[str, dict[str, Any]]) -> list[ThreadNode]:
    """The roots of the tree of the thread whose nodes are ``ids``, given the
    ``MEMBER_COLUMNS`` of its stored members by Message-ID (``stored``): the one
    rule of a thread's shape, for one store and for a cluster joining its shards'."""
    rows = [
        stored.get(mid)
        or {"message_id": mid, "date_iso": None, "from_addr": None, "subject": None,
            "in_reply_to": None, "references": None}
        for mid in ids
    ]  # fmt: skip
    for r in rows:
        r["missing"] = r["message_id"] not in stored
    # the edges of each stored member: (child, parent) for its In-Reply-To and each
    # of its References, itself excepted (``fold.threads.EDGES``)
    edges = [
        (mid, parent)
        for mid, r in stored.items()
        for parent in {r["in_reply_to"], *(r["references"] or [])}
        if parent is not None and parent != mid
    ]
    nodes = {
        r["message_id"]: ThreadNode(
            r["message_id"], bool(r["missing"]), r["date_iso"], r["from_addr"], r["subject"]
        )
        for r in rows
    }
    parents: dict[str, set[str]] = {}
    for child, parent in edges:
        if parent in nodes:
            parents.setdefault(child, set()).add(parent)
    # newest first: where links make a loop, a reply keeps its link to the older
    # message and the older one's link back is the one dropped
    rows.sort(key=lambda r: (r["date_iso"] is not None, r["date_iso"] or "", r["message_id"]))
    rows.reverse()
    parent_of: dict[str, str] = {}
    for r in rows:
        mid, own = r["message_id"], parents.get(r["message_id"], set())
        if r["missing"] or not own:
            continue
        if r["in_reply_to"] in own:
            chosen = r["in_reply_to"]
        else:
            order = [p for p in (r["references"] or []) if p in own]
            chosen = order[-1] if order else min(own)
        _link(parent_of, mid, chosen)
    for r in rows:  # the rest: the id just before them in a reply's References
        refs = [p for p in (r["references"] or []) if p in nodes]
        for before, orphan in itertools.pairwise(refs):
            if orphan not in parent_of and (nodes[orphan].missing or orphan not in parents):
                _link(parent_of, orphan, before)
    for child, parent in parent_of.items():
        nodes[parent].children.append(nodes[child])
    roots = [n for mid, n in nodes.items() if mid not in parent_of]
    _sort(roots)
    return roots


def _link(parent_of: dict[str, str], child: str, parent: str) -> None:
    """Make ``parent`` the parent of ``child`` unless it is ``child`` or below it."""
    up: str | None = parent
    while up is not None:
        if up == child:
            return
        up = parent_of.get(up)
    parent_of[child] = parent


def _sort(roots: list[ThreadNode]) -> None:
    """Order ``roots`` and every node's children by date, undated last, then by
    id; a ghost sorts by its earliest descendant's date. (No recursion: a chain
    of replies may be deeper than Python's stack.)"""
    walk, stack = [], list(roots)
    while stack:
        node = stack.pop()
        walk.append(node)
        stack.extend(node.children)
    earliest: dict[str, str | None] = {}

    def key(n: ThreadNode) -> tuple[bool, str, str]:
        date = earliest[n.message_id]
        return (date is None, date or "", n.message_id)

    for node in reversed(walk):  # children before their parent
        node.children.sort(key=key)
        dates = [d for c in node.children if (d := earliest[c.message_id]) is not None]
        own = None if node.missing else node.date_iso
        earliest[node.message_id] = own if own is not None else min(dates, default=None)
    roots.sort(key=key)

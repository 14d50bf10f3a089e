"""The thread graph: ``thread_edges`` (a message's In-Reply-To and References)
and ``thread_nodes`` (every id of the graph, stored or ghost, labelled with its
connected component's smallest id), kept by an incremental fold as the
components a batch touches, built whole by a rebuild."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import duckdb
import pyarrow as pa

from projections.fold.batch import STAGE, STREAM_ROWS, pc
from projections.fold.meta import add_meta, meta_value, set_meta
from projections.fold.probes import delete_where_in, probed
from projections.tables import base_of, delta_of

__all__ = [
    "BULK_EDGES",
    "EDGES",
    "bulk_components",
    "components",
    "count_threads",
    "refresh_threads",
    "thread_counts",
]


# The thread_edges rows of the messages in {src} (``_new`` unless told).
_EDGES_OF = """
SELECT child, parent, min(kind) AS kind FROM (
    SELECT message_id AS child, in_reply_to AS parent, 'in-reply-to' AS kind FROM {src}
    UNION ALL SELECT message_id, unnest("references"), 'references' FROM {src}
) WHERE parent IS NOT NULL AND parent <> child
GROUP BY child, parent
"""


EDGES = _EDGES_OF.format(src="_new")


# ``EDGES`` of a rebuild, whose ``_new`` holds each Message-ID once: a pair
# (child, parent) is then one row's, and its distinct parents are the row's own
# (no GROUP BY of every pair of the store: 1,000,000 messages' 2,100,000 edges,
# 2.6 s -> 1.8 s of CPU); its kind is the least of the kinds it has, in-reply-to
# when the parent is the row's In-Reply-To.
BULK_EDGES = """
SELECT child, parent,
       CASE WHEN parent = in_reply_to THEN 'in-reply-to' ELSE 'references' END AS kind
FROM (
    SELECT message_id AS child, in_reply_to,
           unnest(list_distinct(list_append("references", in_reply_to))) AS parent
    FROM _new
) WHERE parent <> child
"""


def refresh_threads(
    con: duckdb.DuckDBPyConnection, affected: set[str], *, new: set[str], removed: set[str]
) -> None:
    """Recompute the connected components that ``affected`` nodes belong to.

    A component's thread_id is its smallest node id, so the labels depend only
    on the graph, never on the order in which it was built. The work follows the
    threads touched: their nodes are found through the indexes on thread_nodes,
    and their edges come from their stored messages' rows (every edge of a
    component has its child among the component's stored messages). The counts
    of threads and ghosts in ``meta`` change by what changed in those threads
    (``new``: the ids this fold stored; ``removed``: those it deleted).
    """
    if not affected:
        return
    ids = sorted(affected)
    threads = _column(probed(con, "thread_nodes", "message_id", ids, "thread_id"), "thread_id")
    members = _column(probed(con, "thread_nodes", "thread_id", threads, "message_id"), "message_id")
    cand = sorted(affected | set(members))
    # before: the touched threads, and their nodes that were not stored messages
    stored_now = set(
        _column(probed(con, "messages", "message_id", members, "message_id"), "message_id")
    )
    before_ghosts = sum(
        1 for m in members if not ((m in stored_now and m not in new) or m in removed)
    )
    before_threads = len(set(threads))
    con.register("_cand", pa.table({"v": pa.array(cand, pa.string())}))
    try:
        delete_where_in(con, "thread_nodes", "message_id", cand, "SELECT v FROM _cand")
    finally:
        con.unregister("_cand")
    stored = probed(con, "messages", "message_id", cand, 'message_id, in_reply_to, "references"')
    con.register("_stored", stored)
    try:
        edges = con.sql(_EDGES_OF.format(src="_stored")).to_arrow_table()
    finally:
        con.unregister("_stored")
    nodes, labels = components(
        stored.column("message_id"), edges.column("child"), edges.column("parent")
    )
    _insert_nodes(con, nodes, labels, delta_of("thread_nodes"))
    threads_now = len(pc().unique(labels)) if len(labels) else 0
    add_meta(con, "threads", threads_now - before_threads)
    add_meta(con, "ghosts", (len(nodes) - stored.num_rows) - before_ghosts)


def count_threads(con: duckdb.DuckDBPyConnection) -> None:
    """``meta`` threads and ghosts of the whole graph (what folds then keep up)."""
    threads, ghosts = con.execute(
        "SELECT count(DISTINCT thread_id), count(*) FILTER (WHERE m.message_id IS NULL)"
        " FROM thread_nodes n LEFT JOIN messages m USING (message_id)"
    ).fetchall()[0]
    set_meta(con, "threads", int(threads))
    set_meta(con, "ghosts", int(ghosts))


def thread_counts(con: duckdb.DuckDBPyConnection) -> tuple[int, int]:
    """(threads, ghost nodes) of these tables, as the folds keep them."""
    return meta_value(con, "threads") or 0, meta_value(con, "ghosts") or 0


def components(stored: Any, children: Any, parents: Any) -> tuple[pa.Array, pa.Array]:
    """Connected components of the graph whose nodes are ``stored`` and the edges'
    ends: (the nodes sorted, the smallest id of each one's component).

    Ids become integer codes (their rank in sorted order, by Arrow: one hash pass
    to encode them, one sort of the distinct ones), so the union-find runs on
    small ints; uniting by the smaller root keeps every root the smallest code of
    its component, which is then its label. Sorting is by UTF-8 bytes, which is
    code point order. (scipy's connected_components was tried: it is no faster
    here once its import, and numpy's, is paid by every command that folds.)
    """
    parts = [
        v.combine_chunks() if isinstance(v, pa.ChunkedArray) else v
        for v in (stored, children, parents)
    ]
    size = sum(p.nbytes for p in parts)
    kind = pa.large_string() if size >= 2**31 - 1 else pa.string()
    parts = [p if p.type == kind else pc().cast(p, kind) for p in parts]
    encoded = pc().dictionary_encode(pa.concat_arrays(parts))
    order = pc().sort_indices(encoded.dictionary)
    nodes = encoded.dictionary.take(order)
    n_stored, n_edges = len(parts[0]), len(parts[1])
    if n_edges == 0:
        return nodes, nodes
    # rank[code] = the code's position in sorted order (the inverse permutation)
    codes = pc().sort_indices(order).take(encoded.indices)
    ci = codes.slice(n_stored, n_edges).to_pylist()
    pi = codes.slice(n_stored + n_edges).to_pylist()
    roots = _union_roots(len(nodes), zip(ci, pi, strict=True))
    return nodes, nodes.take(pa.array(roots, pa.int64()))


def _union_roots(n: int, pairs: Iterable[tuple[int, int]]) -> list[int]:
    """The root of each of the codes ``0..n-1`` once the ``pairs`` are united.

    Uniting by the smaller root keeps every root the smallest code of its
    component; each walk to a root halves the path it takes. One list of ints,
    about 40 bytes a node. (The walks are written out where a ``find`` function
    would be called: half the time, 1.2 -> 0.6 s for the 2,100,000 edges of
    1,000,000 messages.)"""
    parent = list(range(n))
    for x, y in pairs:
        while parent[x] != x:
            parent[x] = x = parent[parent[x]]
        while parent[y] != y:
            parent[y] = y = parent[parent[y]]
        if x < y:
            parent[y] = x
        elif y < x:
            parent[x] = y
    # each code's root: a smaller code's is final when a larger one's walk meets it
    for i in range(n):
        x = i
        while parent[x] != x:
            parent[x] = x = parent[parent[x]]
        parent[i] = x
    return parent


def bulk_components(c: duckdb.DuckDBPyConnection, edges: str) -> None:
    """``thread_nodes`` of the whole graph: the stored ids of ``_new`` and every
    end of the table ``edges``, each labelled with its component's smallest id.

    Each node gets a dense integer code in DuckDB, and the edges are turned into
    pairs of codes there, joined on DuckDB's 64-bit hash of the ids (a join of
    integers, not of strings); Python unites the pairs, streamed a slice at a
    time, in one list of ints (about 40 bytes a node, never the ids themselves);
    the labels (the smallest id of each component) are computed back in DuckDB.
    Should two ids share a hash (about one store in 10^7 at a million ids), the
    exact fold on the ids themselves runs instead: a collision must never join
    two threads.
    """
    c.execute(
        f"CREATE TABLE {STAGE}._node AS SELECT id, hash(id) AS h,"
        " (row_number() OVER () - 1)::BIGINT AS code FROM"
        f" (SELECT message_id AS id FROM _new UNION SELECT parent FROM {edges})"
    )
    n, distinct = c.execute(f"SELECT count(*), count(DISTINCT h) FROM {STAGE}._node").fetchall()[0]
    if n != distinct:
        _exact_components(c, edges)
        return
    reader = c.sql(
        f"SELECT a.code AS c, b.code AS p FROM {edges} e"
        f" JOIN {STAGE}._node a ON a.h = hash(e.child)"
        f" JOIN {STAGE}._node b ON b.h = hash(e.parent)"
    ).to_arrow_reader(STREAM_ROWS)
    roots = pa.array(_union_roots(n, _pairs(reader)), pa.int64())
    c.register("_roots", pa.table({"code": pa.array(range(n), pa.int64()), "root": roots}))
    c.execute(f"CREATE TABLE {STAGE}._root AS SELECT * FROM _roots")
    c.unregister("_roots")
    del roots
    c.execute(
        f"""
        INSERT INTO {base_of("thread_nodes")}
        WITH r AS (SELECT n.id, r.root FROM {STAGE}._node n JOIN {STAGE}._root r USING (code)),
        l AS (SELECT root, min(id) AS thread_id FROM r GROUP BY root)
        SELECT r.id AS message_id, l.thread_id FROM r JOIN l USING (root)
        """
    )


def _exact_components(c: duckdb.DuckDBPyConnection, edges: str) -> None:
    """``bulk_components`` on the ids themselves (two ids share a hash)."""
    stored = c.sql("SELECT message_id FROM _new").to_arrow_table().column("message_id")
    found = c.sql(f"SELECT child, parent FROM {edges}").to_arrow_table()
    nodes, labels = components(stored, found.column("child"), found.column("parent"))
    _insert_nodes(c, nodes, labels, base_of("thread_nodes"))


def _column(table: pa.Table, name: str) -> list[Any]:
    return list(table.column(name).to_pylist())


def _pairs(reader: Any) -> Iterator[tuple[int, int]]:
    """The (child, parent) code pairs of an Arrow reader of two int columns."""
    for batch in reader:
        yield from zip(batch.column(0).to_pylist(), batch.column(1).to_pylist(), strict=True)


def _insert_nodes(
    con: duckdb.DuckDBPyConnection, nodes: pa.Array, labels: pa.Array, table: str
) -> None:
    """``thread_nodes`` rows, into its part ``table``: each of ``nodes`` with its
    thread id in ``labels``."""
    con.register("_nodes", pa.table({"message_id": nodes, "thread_id": labels}))
    con.execute(f"INSERT INTO {table} SELECT message_id, thread_id FROM _nodes")
    con.unregister("_nodes")

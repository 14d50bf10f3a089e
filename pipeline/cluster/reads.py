"""Reads across a cluster's shards, through their snapshots (``snapshots``): the
answers one store holding all the shards' mail would give.

One in-memory DuckDB connection ATTACHes each shard's newest snapshot READ_ONLY
as ``shard_NNN`` (a live projection file is never opened). On it:

- ``query``: the views a user queries, over every shard: ``messages`` (one row
  per Message-ID, the primary store's rule across shards: the earliest
  ``indexed_at`` wins, ties to the lower shard; with ``shard``, whose copy the
  row is, and ``shards``, every shard holding it), ``header_index`` and
  ``thread_edges`` (the winning copy's rows), ``thread_nodes``, ``locations``,
  ``cursors`` and ``events`` (every shard's rows; ``events`` up to the
  snapshot's seq), each row with its ``shard``, ``message_headers`` and the
  ``thread(id)`` macro (the thread joined across shards by Message-ID). Each
  shard's own tables stay reachable by name (``shard_001.messages``).
- ``search``: the single store's search run on each shard's snapshot, merged:
  by date, or by score for ``--sort=relevance`` (FTS5's bm25 is computed per
  shard, from that shard's term statistics: scores of two shards compare only
  roughly), a Message-ID held by two shards once; ``count`` the distinct ids.
- ``thread``: the component of the reply graph closed over every shard (ids ->
  each shard's threads holding them -> their ids, until nothing is added), drawn
  by the single store's rule (``queries.tree_of``).
- ``show``: the winning copy, from its shard's log and blobs.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb
import pyarrow as pa

from pipeline.cluster.catalog import Catalog, open_catalog
from pipeline.cluster.ranking import bm25_of
from pipeline.cluster.snapshots import Snapshot, holding, newest_snapshot
from projections import queries
from projections.lookup import rows_where_in
from projections.normalize import normalize_msgid
from projections.queries.threads import MEMBER_COLUMNS, tree_of
from projections.tables import events_sql, sql_string
from stores import db
from stores.errors import NotFoundError, UsageError

if TYPE_CHECKING:
    import apsw

__all__ = ["ClusterReads", "ShardSnapshot", "open_reads"]

# the tables of every shard a cluster's ``query`` unions, each row with its shard
_UNIONED = ("thread_nodes", "locations", "cursors")
# ... and those made from a message's own row: only the winning copy's rows (by
# their column naming it), as the one store holding all the mail keeps only those
_OF_THE_WINNER = {"header_index": "message_id", "thread_edges": "child"}
_SEARCH_THREADS = 4  # shards searched at once
_SHARD_NAME = re.compile(r"[A-Za-z0-9_-]+")

# The Message-IDs more than one shard holds (few: the same mail in two accounts),
# each with its shards and the one whose copy the primary store's rule picks (the
# earliest indexed_at, ties to the lower shard): made once when the reads open
# (one GROUP BY of two columns), so that ``messages`` costs a scan of each shard
# and a probe of this small table, not a sort of every row by Message-ID.
_MULTI = """
SELECT message_id, list(shard ORDER BY shard) AS shards,
       arg_min(shard, (indexed_at IS NULL, indexed_at, shard)) AS winner
FROM ({held}) GROUP BY message_id HAVING count(*) > 1
"""
# Every copy of those but the winner: (message_id, shard).
_LOSERS = """
SELECT message_id, shard FROM (SELECT message_id, winner, unnest(shards) AS shard FROM _multi)
WHERE shard <> winner
"""
# One shard's part of ``messages``: its rows but those another shard's copy wins.
_MESSAGES_OF = """
SELECT m.*, {name} AS shard, coalesce(x.shards, [{name}]) AS shards
FROM {alias}.messages m LEFT JOIN _multi x ON x.message_id = m.message_id
WHERE x.message_id IS NULL OR x.winner = {name}
"""
# The thread of ``id`` across shards: the component of the winning copies' edges
# (``thread_edges``) holding it, walked both ways (UNION: each id once, so it ends).
_THREAD_MACRO = """
thread(id) AS TABLE
WITH RECURSIVE comp(mid) AS (
    SELECT coalesce(nullif(regexp_replace(regexp_extract(id, '<([^<>]*)>', 1), '\\s', '', 'g'),
                    ''), trim(id, '<> '))
    UNION
    SELECT l.b FROM comp c JOIN _links l ON l.a = c.mid
)
SELECT m.* FROM messages m WHERE m.message_id IN (SELECT mid FROM comp)
ORDER BY m.date_iso NULLS LAST, m.message_id
"""


class ShardSnapshot:
    """A shard as the cluster's reads see it: its store's place, the snapshot read
    and the DuckDB catalog it is attached as."""

    def __init__(self, name: str, root: Path, snapshot: Snapshot) -> None:
        self.name = name
        self.root = root
        self.snapshot = snapshot
        self.alias = name.replace("-", "_")


class ClusterReads:
    """The reads ``search``, ``thread``, ``show``, ``query`` and ``stats`` make,
    answered from the newest snapshot of every shard of ``catalog``."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self.shards: list[ShardSnapshot] = []
        self._held = contextlib.ExitStack()
        self._texts: dict[str, apsw.Connection] = {}
        self._threads: ThreadPoolExecutor | None = None
        try:
            for name in catalog.shards:
                if not _SHARD_NAME.fullmatch(name):
                    raise UsageError(f"{catalog.root}: not a shard's name: {name!r}")
                root = catalog.shard_path(name)
                snap = self._hold_newest(name, root)
                if snap is not None:
                    self.shards.append(ShardSnapshot(name, root, snap))
            if not self.shards:
                raise NotFoundError(
                    f"{catalog.root}: no shard has a snapshot yet"
                    f" (`mailledger cluster snapshot {catalog.root}` publishes them)"
                )
            self.con = duckdb.connect(":memory:", config=dict(db.CONFIG))
            for shard in self.shards:
                path = sql_string(str(shard.snapshot.projections))
                self.con.execute(f"ATTACH {path} AS {shard.alias} (READ_ONLY)")
            self._define_views()
        except BaseException:
            self.close()
            raise

    def _hold_newest(self, name: str, root: Path) -> Snapshot | None:
        """The shard's newest snapshot, held for this reader (None: an empty shard
        that has none; NotFoundError: a shard with events and no snapshot)."""
        for _ in range(3):  # (removed between the listing and the hold: list again)
            snap = newest_snapshot(root)
            if snap is None:
                if (root / "log").is_dir() and any((root / "log").glob("*.parquet")):
                    raise NotFoundError(
                        f"{name}: no snapshot yet (`mailledger cluster snapshot"
                        f" {self.catalog.root}` publishes one)"
                    )
                return None
            with contextlib.suppress(UsageError):
                return self._held.enter_context(holding(snap))
        raise UsageError(f"{name}: its snapshots keep being replaced; ask again")

    def close(self) -> None:
        if self._threads is not None:
            self._threads.shutdown()
            self._threads = None
        for text in self._texts.values():
            text.close()
        self._texts.clear()
        con = getattr(self, "con", None)
        if con is not None:
            con.close()
        self._held.close()

    def __enter__(self) -> ClusterReads:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the views of ``query`` ---------------------------------------------------------
    def _define_views(self) -> None:
        con = self.con

        def union(table: str) -> str:
            return " UNION ALL ".join(
                f"SELECT *, {sql_string(s.name)} AS shard FROM {s.alias}.{table}"
                for s in self.shards
            )

        held = " UNION ALL ".join(
            f"SELECT message_id, indexed_at, {sql_string(s.name)} AS shard FROM {s.alias}.messages"
            for s in self.shards
        )
        con.execute(f"CREATE TEMP TABLE _multi AS {_MULTI.format(held=held)}")
        con.execute(f"CREATE TEMP TABLE _losers AS {_LOSERS}")
        parts = [_MESSAGES_OF.format(name=sql_string(s.name), alias=s.alias) for s in self.shards]
        con.execute(f"CREATE TEMP VIEW messages AS {' UNION ALL '.join(parts)}")
        for table in _UNIONED:
            con.execute(f"CREATE TEMP VIEW {table} AS {union(table)}")
        for table, key in _OF_THE_WINNER.items():
            con.execute(
                f"CREATE TEMP VIEW {table} AS SELECT t.* FROM ({union(table)}) t"
                f" ANTI JOIN _losers l ON l.message_id = t.{key} AND l.shard = t.shard"
            )
        events = []
        for s in self.shards:
            seq = s.snapshot.seq
            files = [str(f.path) for f in _log_files(s.root) if f.first <= seq]
            events.append(
                f"SELECT *, {sql_string(s.name)} AS shard FROM ({events_sql(con, files)})"
                f" WHERE seq <= {int(seq)}"
            )
        con.execute(f"CREATE TEMP VIEW events AS {' UNION ALL '.join(events)}")
        con.execute(
            "CREATE TEMP VIEW message_headers AS SELECT m.message_id, e.headers"
            " FROM messages m JOIN events e ON e.shard = m.shard AND e.seq = m.seq"
        )
        con.execute(  # (both ways, so that the macro's walk is an equi-join)
            "CREATE TEMP VIEW _links AS SELECT child AS a, parent AS b FROM thread_edges"
            " UNION ALL SELECT parent, child FROM thread_edges"
        )
        con.execute(f"CREATE TEMP MACRO {_THREAD_MACRO}")

    def query(self, sql: str, params: Sequence[Any] | None = None) -> pa.Table:
        """SQL over the cluster's views (see the module's docstring)."""
        return queries.run_sql(self.con, sql, params)

    def _on(self, shard: ShardSnapshot) -> duckdb.DuckDBPyConnection:
        """A connection whose unqualified names are ``shard``'s own tables: what
        the single store's queries read."""
        cur = self.con.cursor()
        cur.execute(f"USE {shard.alias}")
        return cur

    def _text(self, shard: ShardSnapshot) -> apsw.Connection:
        import apsw

        if shard.name not in self._texts:
            path = shard.snapshot.text
            if path is None:
                raise NotFoundError(f"{shard.name}: its snapshot holds no full-text index")
            self._texts[shard.name] = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
        return self._texts[shard.name]

    # -- search -------------------------------------------------------------------------
    def search(
        self,
        plan: queries.SearchPlan,
        output: queries.Output = "summary",
        *,
        sort: queries.Sort = "newest",
        limit: int | None = None,
        offset: int = 0,
    ) -> pa.Table:
        """As ``MessageStore.search``, over every shard: each shard's first
        ``limit + offset`` matches, merged (a Message-ID two shards hold: once, the
        winning copy), then the page."""
        from projections.queries import search_table

        if output == "threads":
            raise UsageError("--output=threads is not supported with --cluster yet")
        ranked = sort == "relevance" and bool(plan.text)
        if sort == "relevance" and not plan.text:
            sort = "newest"
        need = None if limit is None else limit + offset
        texts = [self._text(shard) if plan.text else None for shard in self.shards]

        def one(i: int) -> list[dict[str, Any]]:
            cur = self._on(self.shards[i])
            try:
                if output == "count":
                    page = search_table(cur, plan, "messages", sort, None, 0, texts[i])
                else:
                    page = search_table(cur, plan, "summary", sort, need, 0, texts[i])
                rows: list[dict[str, Any]] = page.to_pylist()
                if ranked and rows:
                    scores = bm25_of(cur, texts[i], plan, [r["message_id"] for r in rows])
                    for r in rows:
                        r["_score"] = scores.get(r["message_id"])
                return rows
            finally:
                cur.close()

        # the shards side by side (DuckDB and SQLite let go of the GIL while they read)
        answers = list(self._pool().map(one, range(len(self.shards))))
        ids = [] if output == "count" else [r["message_id"] for rows in answers for r in rows]
        shared = self._winners(ids)
        found: dict[str, dict[str, Any]] = {}  # id -> the winning copy's row
        best: dict[str, float] = {}  # id -> the best score of its copies
        for i, rows in enumerate(answers):
            for r in rows:
                mid = r["message_id"]
                if r.get("_score") is not None:
                    best[mid] = min(best.get(mid, r["_score"]), r["_score"])
                if mid not in found or shared.get(mid) == self.shards[i].name:
                    found[mid] = r
        for mid, r in found.items():
            r["_score"] = best.get(mid)
        if output == "count":
            return pa.table({"count": pa.array([len(found)], pa.int64())})
        rows = list(found.values())
        rows.sort(key=lambda r: r["message_id"])
        rows.sort(key=lambda r: r["date_iso"] or "", reverse=sort != "oldest")
        rows.sort(key=lambda r: r["date_iso"] is None)  # (undated last, either way)
        if ranked:
            rows.sort(key=lambda r: (r["_score"] is None, r["_score"] or 0.0))
        rows = rows[offset:] if need is None else rows[offset:need]
        columns = ["message_id", "date_iso", "from_addr", "subject"]
        table = pa.table({c: pa.array([r[c] for r in rows], pa.string()) for c in columns})
        return table.select(["message_id"]) if output == "messages" else table

    def _winners(self, ids: list[str]) -> dict[str, str]:
        """Of ``ids``, those more than one shard holds, each with the shard whose copy
        the primary store's rule picks (from ``_multi``, made at open)."""
        if not ids:
            return {}
        rows = self.con.execute(
            "SELECT message_id, winner FROM _multi WHERE message_id IN (SELECT unnest(?))",
            [sorted(set(ids))],
        ).fetchall()
        return {str(m): str(w) for m, w in rows}

    def _pool(self) -> ThreadPoolExecutor:
        if self._threads is None:
            self._threads = ThreadPoolExecutor(max_workers=_SEARCH_THREADS)
        return self._threads

    # -- threads ------------------------------------------------------------------------
    def _component(self, msg_id: str) -> tuple[list[str], dict[str, dict[str, Any]]]:
        """Every node (stored or ghost) of ``msg_id``'s thread joined across the
        shards, and the winning row of each stored one; NotFoundError when no shard
        stores ``msg_id``.

        Each shard's threads holding the ids known so far, until nothing is added:
        a superset (a losing copy's own References join a shard's threads too),
        cut to the component of ``msg_id`` in the graph of the winning copies' edges,
        the graph one store holding all the mail has."""
        ids = {m for m in (msg_id, normalize_msgid(msg_id)) if m}
        asked: list[set[str]] = [set() for _ in self.shards]  # ids each shard was asked
        holding: list[set[str]] = [set() for _ in self.shards]  # its thread_nodes among them
        grown = True
        while grown:  # (a shard is asked only the ids found since it was last asked)
            grown = False
            for i, shard in enumerate(self.shards):
                ask = sorted(ids - asked[i])
                if not ask:
                    continue
                asked[i].update(ask)
                found = self._threads_holding(shard, ask)
                holding[i] |= found
                if found - ids:
                    ids |= found
                    grown = True
        stored = self._stored([sorted(h) for h in holding])
        links: dict[str, set[str]] = {}
        for mid, r in stored.items():
            for parent in {r["in_reply_to"], *(r["references"] or [])}:
                if parent is not None and parent != mid:
                    links.setdefault(mid, set()).add(parent)
                    links.setdefault(parent, set()).add(mid)
        start = next((m for m in (msg_id, normalize_msgid(msg_id)) if m in stored), None)
        if start is None:
            raise NotFoundError(f"no message {msg_id!r} in the cluster")
        seen, todo = {start}, [start]
        while todo:
            for other in links.get(todo.pop(), ()):
                if other not in seen:
                    seen.add(other)
                    todo.append(other)
        return sorted(seen), {m: r for m, r in stored.items() if m in seen}

    def _threads_holding(self, shard: ShardSnapshot, ids: list[str]) -> set[str]:
        """Every node of ``shard``'s threads that hold any of ``ids`` (through the
        indexes on ``thread_nodes``: a read of those threads only)."""
        cur = self._on(shard)
        try:
            tids = rows_where_in(cur, "thread_nodes", "message_id", ids, "thread_id")
            wanted = sorted(set(tids.column("thread_id").to_pylist()))
            if not wanted:
                return set()
            members = rows_where_in(cur, "thread_nodes", "thread_id", wanted, "message_id")
        finally:
            cur.close()
        return {str(m) for m in members.column("message_id").to_pylist()}

    def _stored(self, ids_of: list[list[str]]) -> dict[str, dict[str, Any]]:
        """The winning row (``MEMBER_COLUMNS``) of each id some shard stores, of
        ``ids_of[i]`` asked of shard i (an empty list: that shard is not asked)."""
        best: dict[str, tuple[tuple[bool, Any, int], dict[str, Any]]] = {}
        for i, shard in enumerate(self.shards):
            ids = ids_of[i]
            if not ids:
                continue
            cur = self._on(shard)
            try:
                got = rows_where_in(
                    cur, "messages", "message_id", ids, f"{MEMBER_COLUMNS}, indexed_at"
                ).to_pylist()
            finally:
                cur.close()
            for r in got:
                key = (r["indexed_at"] is None, r.pop("indexed_at"), i)
                held = best.get(r["message_id"])
                if held is None or key < held[0]:
                    best[r["message_id"]] = (key, r)
        return {mid: r for mid, (_, r) in best.items()}

    def walk_thread(self, msg_id: str) -> list[str]:
        """As ``MessageStore.walk_thread``: every stored message of the thread,
        joined across the shards, oldest first (undated last)."""
        rows = list(self._component(msg_id)[1].values())
        rows.sort(key=lambda r: (r["date_iso"] is None, r["date_iso"] or "", r["message_id"]))
        return [r["message_id"] for r in rows]

    def thread_tree(self, msg_id: str) -> list[queries.ThreadNode]:
        """As ``MessageStore.thread_tree``, the thread joined across the shards."""
        return tree_of(*self._component(msg_id))

    # -- one message --------------------------------------------------------------------
    def _record(self, msg_id: str) -> tuple[ShardSnapshot, dict[str, Any]] | None:
        from stores.log import EventLog

        best: tuple[tuple[bool, Any, int], ShardSnapshot, dict[str, Any]] | None = None
        for i, shard in enumerate(self.shards):
            cur = self._on(shard)
            try:
                rec = queries.message(cur, EventLog(shard.root / "log"), msg_id)
            finally:
                cur.close()
            if rec is not None:
                key = (rec["indexed_at"] is None, rec["indexed_at"], i)
                if best is None or key < best[0]:
                    best = (key, shard, rec)
        return None if best is None else (best[1], best[2])

    def get(self, msg_id: str) -> dict[str, Any] | None:
        """As ``MessageStore.get``: the winning copy's record, and ``shard`` (its shard)."""
        found = self._record(msg_id)
        if found is None:
            return None
        shard, rec = found
        rec["shard"] = shard.name
        return rec

    def raw(self, msg_id: str) -> bytes:
        """The winning copy's raw bytes, from its shard's blobs (checked)."""
        from stores.blobs import BlobStore

        found = self._record(msg_id)
        if found is None:
            raise NotFoundError(f"no message {msg_id!r} in the cluster")
        shard, rec = found
        blobs = BlobStore(shard.root / "blobs")
        try:
            return blobs.get(rec["sha256"])
        finally:
            blobs.close()

    # -- upkeep -------------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        """Each shard's ``stats`` (from its snapshot) summed, with ``distinct_messages``
        (a Message-ID two shards hold counted once) and each snapshot's seq.
        (``threads`` is the shards' sum: a thread spanning two shards counts twice.)"""
        from pipeline.at_rest import stats_of
        from stores.blobs import BlobStore

        total: dict[str, Any] = {}
        for shard in self.shards:
            cur = self._on(shard)
            try:
                counts = queries.counts(cur)
            finally:
                cur.close()
            blobs = BlobStore(shard.root / "blobs")
            try:
                one = stats_of(counts, blobs, _log_files(shard.root), shard.snapshot.projections)
            finally:
                blobs.close()
            one["events"] = shard.snapshot.seq
            for key, value in one.items():
                total[key] = total.get(key, 0) + value
        distinct = self.con.execute("SELECT count(*) FROM _losers")
        total["distinct_messages"] = total["messages"] - int(distinct.fetchall()[0][0])
        total["shards"] = len(self.catalog.shards)
        total["snapshots"] = {s.name: f"{s.snapshot.epoch}-{s.snapshot.seq}" for s in self.shards}
        return total


def _log_files(root: Path) -> list[Any]:
    from stores.log.files import LogDirectory

    return LogDirectory(root / "log").files()


def open_reads(root: Path) -> ClusterReads:
    """The reads of the cluster at ``root`` (NotFoundError: none there, or a shard
    with events has no snapshot yet)."""
    return ClusterReads(open_catalog(Path(root)))

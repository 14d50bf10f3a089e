"""The projections as one fold: ``apply(con, batch)`` folds committed events into tables.

The same code runs for an incremental update after a commit and for a full
replay (one call per chunk of the log on empty tables), so the two give the
same tables row for row. A batch is applied in one transaction together with
the last seq it contains; events at or below that seq are skipped, so applying
a batch twice changes nothing. No clock, network or file other than the
DuckDB connection given is touched here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from projections.normalize import date_key, normalize_subject
from projections.tables import PROJECTION_VERSION, TABLES, create_indexes, create_tables
from stores.errors import LogIntegrityError

__all__ = ["KEY_SEP", "applied_seq", "apply", "index_key", "rebuild"]

KEY_SEP = "\x1f"

_SEEN = "message-seen"
_DELETED = "message-deleted"
_VANISHED = "location-vanished"
_MOVED = "cursor-moved"
_UIDV = "uidvalidity-changed"


def index_key(header: str, value: str) -> str:
    """The ``header_index.key`` of a normalized (header, value) pair."""
    return f"{header}{KEY_SEP}{value}"


def applied_seq(con: duckdb.DuckDBPyConnection) -> int:
    """The last seq folded into these tables (0 for none)."""
    try:
        row = con.execute("SELECT value FROM meta WHERE key = 'applied_seq'").fetchall()
    except duckdb.CatalogException:
        return 0
    return int(row[0][0]) if row else 0


def projection_version(con: duckdb.DuckDBPyConnection) -> int | None:
    try:
        row = con.execute("SELECT value FROM meta WHERE key = 'projection_version'").fetchall()
    except duckdb.CatalogException:
        return None
    return int(row[0][0]) if row else None


def _set_meta(con: duckdb.DuckDBPyConnection, key: str, value: int) -> None:
    con.execute("DELETE FROM meta WHERE key = ?", [key])
    con.execute("INSERT INTO meta VALUES (?, ?)", [key, value])


def rebuild(con: duckdb.DuckDBPyConnection, chunks: Iterable[pa.Table]) -> int:
    """Drop every projection and fold the whole log again; returns the last seq."""
    for name in TABLES:
        con.execute(f"DROP TABLE IF EXISTS {name}")
    create_tables(con)
    _set_meta(con, "projection_version", PROJECTION_VERSION)
    _set_meta(con, "applied_seq", 0)
    last = 0
    for chunk in chunks:
        last = apply(con, chunk)
    create_indexes(con)  # after the bulk load: building an index once is cheaper
    return last


def apply(con: duckdb.DuckDBPyConnection, batch: pa.Table) -> int:
    """Fold committed events (seq order) into the tables; returns the last applied seq."""
    applied = applied_seq(con)
    if batch.num_rows == 0:
        return applied
    seqs = batch.column("seq")
    first, last = seqs[0].as_py(), seqs[-1].as_py()
    if last <= applied:
        return applied
    if first > applied + 1:
        raise LogIntegrityError(f"projections at seq {applied} cannot apply a batch from {first}")
    if first <= applied:
        batch = batch.filter(pc.greater(seqs, applied))
    con.execute("BEGIN TRANSACTION")
    try:
        _fold_messages(con, batch)
        _fold_locations(con, batch)
        _fold_cursors(con, batch)
        _set_meta(con, "applied_seq", last)
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return last


# -- helpers ---------------------------------------------------------------


def _register_ids(con: duckdb.DuckDBPyConnection, name: str, ids: Iterable[str]) -> None:
    con.register(name, pa.table({"id": pa.array(sorted(set(ids)), type=pa.string())}))


def _ids(con: duckdb.DuckDBPyConnection, sql: str) -> set[str]:
    return {r[0] for r in con.execute(sql).fetchall()}


# -- primary store, header index, thread graph ------------------------------


def _fold_messages(con: duckdb.DuckDBPyConnection, batch: pa.Table) -> None:
    types = batch.column("type").to_pylist()
    mids = batch.column("message_id").to_pylist()
    idx = [i for i, t in enumerate(types) if t in (_SEEN, _DELETED)]
    if not idx:
        return
    _register_ids(con, "_touched", (mids[i] for i in idx))
    existing = _ids(
        con, "SELECT message_id FROM messages WHERE message_id IN (SELECT id FROM _touched)"
    )

    # First message-seen of an id wins; a message-deleted removes it; a later
    # message-seen brings it back.
    present = set(existing)
    winner: dict[str, int | None] = {}
    for i in idx:
        m = mids[i]
        if types[i] == _SEEN:
            if m not in present:
                present.add(m)
                winner[m] = i
        elif m in present:
            present.discard(m)
            winner[m] = None
    removed = [m for m in winner if m in existing]
    take = sorted(i for i in winner.values() if i is not None)
    if not removed and not take:
        return

    if removed:
        _register_ids(con, "_removed", removed)
        con.execute("DELETE FROM messages WHERE message_id IN (SELECT id FROM _removed)")
        con.execute("DELETE FROM header_index WHERE message_id IN (SELECT id FROM _removed)")
        con.execute("DELETE FROM thread_edges WHERE child IN (SELECT id FROM _removed)")

    new = _message_rows(batch.take(pa.array(take, type=pa.int64())))
    con.register("_new", new)
    con.execute("INSERT INTO messages BY NAME SELECT * FROM _new")
    con.execute(_INSERT_INDEX)
    con.execute(_INSERT_EDGES)
    new_parents = _ids(
        con,
        "SELECT in_reply_to FROM _new WHERE in_reply_to IS NOT NULL"
        ' UNION SELECT unnest("references") FROM _new',
    )
    _refresh_threads(con, set(removed) | set(new.column("message_id").to_pylist()) | new_parents)


def _message_rows(seen: pa.Table) -> pa.Table:
    subjects = seen.column("subject").to_pylist()
    dates: list[datetime | None] = seen.column("date_utc").to_pylist()
    cols: dict[str, Any] = {
        name: seen.column(name)
        for name in (
            "message_id", "seq", "source", "folder", "uidvalidity", "uid", "uidl", "size",
            "sha256", "headers", "subject", "date_utc", "date_offset_min", "from_addr",
            "to_addrs", "in_reply_to", "references", "list_id", "synthetic_id", "defects",
        )
    }  # fmt: skip
    cols["subject_key"] = pa.array([normalize_subject(s) for s in subjects], type=pa.string())
    cols["date_key"] = pa.array([date_key(d) for d in dates], type=pa.string())
    cols["date_iso"] = pa.array(
        [d.strftime("%Y-%m-%dT%H:%M:%SZ") if d is not None else None for d in dates],
        type=pa.string(),
    )
    cols["indexed_at"] = seen.column("recorded_at")
    return pa.table(cols)


_INSERT_INDEX = f"""
INSERT INTO header_index
SELECT DISTINCT header || '{KEY_SEP}' || value, header, value, message_id FROM (
    SELECT 'subject' AS header, subject_key AS value, message_id FROM _new
    UNION ALL SELECT 'from', from_addr, message_id FROM _new
    UNION ALL SELECT 'to', unnest(to_addrs), message_id FROM _new
    UNION ALL SELECT 'date', date_key, message_id FROM _new
    UNION ALL SELECT 'in-reply-to', in_reply_to, message_id FROM _new
    UNION ALL SELECT 'references', unnest("references"), message_id FROM _new
    UNION ALL SELECT 'list-id', list_id, message_id FROM _new
) WHERE value IS NOT NULL
"""

_INSERT_EDGES = """
INSERT INTO thread_edges
SELECT child, parent, min(kind) FROM (
    SELECT message_id AS child, in_reply_to AS parent, 'in-reply-to' AS kind FROM _new
    UNION ALL SELECT message_id, unnest("references"), 'references' FROM _new
) WHERE parent IS NOT NULL AND parent <> child
GROUP BY child, parent
"""


def _refresh_threads(con: duckdb.DuckDBPyConnection, affected: set[str]) -> None:
    """Recompute the connected components that ``affected`` nodes belong to.

    A component's thread_id is its smallest node id, so the labels depend only
    on the graph, never on the order in which it was built.
    """
    if not affected:
        return
    _register_ids(con, "_affected", affected)
    candidates = affected | _ids(
        con,
        "SELECT message_id FROM thread_nodes WHERE thread_id IN "
        "(SELECT thread_id FROM thread_nodes WHERE message_id IN (SELECT id FROM _affected))",
    )
    _register_ids(con, "_cand", candidates)
    con.execute("DELETE FROM thread_nodes WHERE message_id IN (SELECT id FROM _cand)")
    edges: Sequence[tuple[str, str]] = con.execute(
        "SELECT child, parent FROM thread_edges WHERE child IN (SELECT id FROM _cand)"
        " UNION SELECT child, parent FROM thread_edges WHERE parent IN (SELECT id FROM _cand)"
    ).fetchall()
    stored = _ids(con, "SELECT message_id FROM messages WHERE message_id IN (SELECT id FROM _cand)")
    parent: dict[str, str] = {n: n for n in stored}
    for c, p in edges:
        parent.setdefault(c, c)
        parent.setdefault(p, p)

    def find(x: str) -> str:
        root = x
        while parent[root] != root:
            root = parent[root]
        while parent[x] != root:
            parent[x], x = root, parent[x]
        return root

    for c, p in edges:
        rc, rp = find(c), find(p)
        if rc != rp:
            # keep the smaller id as root: the root is then the component's label
            if rc < rp:
                parent[rp] = rc
            else:
                parent[rc] = rp
    nodes = sorted(parent)
    labels = [find(n) for n in nodes]
    con.register("_nodes", pa.table({"message_id": nodes, "thread_id": labels}))
    con.execute("INSERT INTO thread_nodes SELECT message_id, thread_id FROM _nodes")


# -- locations ---------------------------------------------------------------

_LOC_KEY = (
    "concat_ws(chr(31), source, folder, coalesce(CAST(uidvalidity AS VARCHAR), ''),"
    " coalesce(CAST(uid AS VARCHAR), ''), coalesce(uidl, ''))"
)


def _fold_locations(con: duckdb.DuckDBPyConnection, batch: pa.Table) -> None:
    mask = pc.is_in(batch.column("type"), value_set=pa.array([_SEEN, _VANISHED]))
    rows = batch.filter(mask).select(
        ["seq", "type", "recorded_at", "source", "folder", "uidvalidity", "uid", "uidl",
         "message_id", "sha256"]
    )  # fmt: skip
    if rows.num_rows == 0:
        return
    con.register("_locb", rows)
    con.execute(f"CREATE OR REPLACE TEMP TABLE _loc AS SELECT {_LOC_KEY} AS loc_key, * FROM _locb")
    con.execute(
        "CREATE OR REPLACE TEMP TABLE _old AS SELECT * FROM locations"
        " WHERE loc_key IN (SELECT loc_key FROM _loc)"
    )
    con.execute("DELETE FROM locations WHERE loc_key IN (SELECT loc_key FROM _loc)")
    con.execute(
        """
        INSERT INTO locations
        WITH seen AS (
            SELECT loc_key, sha256,
                   arg_min(source, seq) AS source, arg_min(folder, seq) AS folder,
                   arg_min(uidvalidity, seq) AS uidvalidity, arg_min(uid, seq) AS uid,
                   arg_min(uidl, seq) AS uidl, arg_min(message_id, seq) AS message_id,
                   min(seq) AS first_seq, max(seq) AS last_seq,
                   arg_min(recorded_at, seq) AS seen_at, CAST(NULL AS BIGINT) AS vanished_seq
            FROM _loc WHERE type = 'message-seen' GROUP BY loc_key, sha256
        ), merged AS (
            SELECT loc_key, sha256, source, folder, uidvalidity, uid, uidl, message_id,
                   first_seq, last_seq, seen_at, vanished_seq FROM _old
            UNION ALL SELECT * FROM seen
        ), folded AS (
            SELECT loc_key, sha256,
                   arg_min(source, first_seq) AS source, arg_min(folder, first_seq) AS folder,
                   arg_min(uidvalidity, first_seq) AS uidvalidity,
                   arg_min(uid, first_seq) AS uid, arg_min(uidl, first_seq) AS uidl,
                   arg_min(message_id, first_seq) AS message_id,
                   min(first_seq) AS first_seq, max(last_seq) AS last_seq,
                   arg_min(seen_at, first_seq) AS seen_at, max(vanished_seq) AS vanished_seq
            FROM merged GROUP BY loc_key, sha256
        ), van AS (
            SELECT loc_key, max(seq) AS vseq FROM _loc
            WHERE type = 'location-vanished' GROUP BY loc_key
        )
        SELECT f.loc_key, f.source, f.folder, f.uidvalidity, f.uid, f.uidl, f.sha256,
               f.message_id, f.first_seq, f.last_seq, f.seen_at,
               CASE WHEN v.vseq IS NULL THEN f.vanished_seq
                    WHEN f.vanished_seq IS NULL THEN v.vseq
                    ELSE greatest(f.vanished_seq, v.vseq) END AS vanished_seq,
               coalesce(
                   CASE WHEN v.vseq IS NULL THEN f.vanished_seq
                        WHEN f.vanished_seq IS NULL THEN v.vseq
                        ELSE greatest(f.vanished_seq, v.vseq) END > f.last_seq,
                   false) AS vanished
        FROM folded f LEFT JOIN van v USING (loc_key)
        """
    )
    con.execute("DROP TABLE _loc")
    con.execute("DROP TABLE _old")


# -- sync cursors -----------------------------------------------------------


def _fold_cursors(con: duckdb.DuckDBPyConnection, batch: pa.Table) -> None:
    mask = pc.is_in(batch.column("type"), value_set=pa.array([_MOVED, _UIDV]))
    rows = batch.filter(mask).select(
        ["seq", "type", "recorded_at", "source", "folder", "uidvalidity", "cursor_to",
         "uidnext", "mode", "new_uidvalidity"]
    ).to_pylist()  # fmt: skip
    if not rows:
        return
    state: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows:
        key = (r["source"], r["folder"])
        if r["type"] == _MOVED:
            state[key] = {
                "uidvalidity": r["uidvalidity"], "last_uid": r["cursor_to"],
                "uidnext": r["uidnext"], "mode": r["mode"],
                "seq": r["seq"], "updated_at": r["recorded_at"],
            }  # fmt: skip
        else:
            # UIDs of the old UIDVALIDITY mean nothing now: no last_uid until a rescan.
            state[key] = {
                "uidvalidity": r["new_uidvalidity"], "last_uid": None, "uidnext": None,
                "mode": r["mode"], "seq": r["seq"], "updated_at": r["recorded_at"],
            }  # fmt: skip
    for (account, folder), s in state.items():
        con.execute("DELETE FROM cursors WHERE account = ? AND folder = ?", [account, folder])
        con.execute(
            "INSERT INTO cursors VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [account, folder, s["uidvalidity"], s["last_uid"], s["uidnext"], s["mode"],
             s["seq"], s["updated_at"]],
        )  # fmt: skip

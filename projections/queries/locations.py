"""Reads of the locations, the sync cursors and the POP3 UIDLs, as functions of
a DuckDB connection."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import duckdb
import pyarrow as pa

from projections.fold import location_key
from projections.lookup import INDEX_KEYS_MAX, rows_where_in

__all__ = [
    "CURSOR_LOG",
    "FEW_PLACES",
    "MESSAGE_FLAGS",
    "contains_uidl",
    "cursor",
    "deleted_contents",
    "folder_cursors",
    "held_shas",
    "known_uidls",
    "locations_at",
    "locations_in",
    "message_flags_among",
    "uidls",
]  # fmt: skip

Query = Callable[[str, Sequence[Any]], pa.Table]

# The locations of a source whose message is no longer stored. With few of them
# (a new account, a small one) the ids they name are looked up among the stored
# ones (a semi join built on those few); an anti join with ``messages`` would
# build its hash table on every stored id: into 1,000,000 messages, for a source
# with no location at all, 0.68 s and 145 MiB (the few: 0.02 s, 2 MiB). With many
# (1,000,000 locations) the anti join is the cheaper of the two (2.4 s against 3.1 s).
_DELETED_MANY = (
    "SELECT folder, uidvalidity, uid, uidl, sha256 FROM locations l WHERE source = ?"
    " AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.message_id = l.message_id)"
)
_DELETED_FEW = (
    "WITH l AS (SELECT folder, uidvalidity, uid, uidl, sha256, message_id FROM locations"
    " WHERE source = ?) SELECT folder, uidvalidity, uid, uidl, sha256 FROM l"
    " WHERE message_id NOT IN"
    " (SELECT message_id FROM messages WHERE message_id IN (SELECT message_id FROM l))"
)
FEW_PLACES = 100_000

# Each message's flags (message_id, flags), by the rule of ``projections.normalize.
# flags``: the union of the flags of its places not vanished where the source
# showed any (of every place it was seen when it is still at none: what the archive
# last knew), ``\Deleted`` only when every one of them has it. A message whose
# places showed no flags has no row.
_MESSAGE_FLAGS = (
    "SELECT message_id, CASE WHEN bool_and(list_contains(flags, '\\Deleted'))"
    " THEN list_sort(list_distinct(flatten(list(flags))))"
    " ELSE list_filter(list_sort(list_distinct(flatten(list(flags)))),"
    " lambda f: f <> '\\Deleted') END AS flags"
    " FROM (SELECT message_id, flags FROM locations WHERE flags IS NOT NULL{among}"
    " QUALIFY NOT vanished OR NOT bool_or(NOT vanished) OVER (PARTITION BY message_id))"
    " GROUP BY message_id"
)
MESSAGE_FLAGS = _MESSAGE_FLAGS.format(among="")


def message_flags_among(ids: str) -> str:
    """``MESSAGE_FLAGS`` of the messages whose ids the SQL query ``ids`` selects only."""
    return _MESSAGE_FLAGS.format(among=f" AND message_id IN ({ids})")


# every move of a folder's cursor, oldest first, straight from the log's view
CURSOR_LOG = (
    "SELECT seq, type, run_id, recorded_at, mode, uidvalidity, cursor_from, cursor_to,"
    " uidnext, old_uidvalidity, new_uidvalidity, action, reason FROM events"
    " WHERE type IN ('cursor-moved', 'uidvalidity-changed')"
    " AND source = ? AND folder = ? ORDER BY seq"
)


def _dicts(cur: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    names = [d[0] for d in cur.description or ()]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


# -- locations, cursors, UIDLs ---------------------------------------------------
def deleted_contents(
    con: duckdb.DuckDBPyConnection, source: str
) -> dict[tuple[Any, ...], set[str]]:
    """(folder, uidvalidity, uid, uidl) -> sha256s on record at that location of
    ``source`` for a message no longer stored (deleted, perhaps purged)."""
    (n,) = con.execute("SELECT count(*) FROM locations WHERE source = ?", [source]).fetchall()[0]
    sql = _DELETED_FEW if n <= FEW_PLACES else _DELETED_MANY
    out: dict[tuple[Any, ...], set[str]] = {}
    for folder, uidvalidity, uid, uidl, sha in con.execute(sql, [source]).fetchall():
        out.setdefault((folder, uidvalidity, uid, uidl), set()).add(sha)
    return out


def held_shas(con: duckdb.DuckDBPyConnection, shas: list[str]) -> set[str]:
    """Those of ``shas`` a stored message holds (at any location of any source)."""
    con.register("_q_sha", pa.table({"sha": pa.array(shas, pa.string())}))
    try:
        rows = con.execute(
            "SELECT DISTINCT sha256 FROM locations WHERE sha256 IN (SELECT sha FROM _q_sha)"
            " AND message_id IN (SELECT message_id FROM messages)"
        ).fetchall()
    finally:
        con.unregister("_q_sha")
    return {r[0] for r in rows}


def locations_at(
    con: duckdb.DuckDBPyConnection,
    source: str,
    places: Sequence[tuple[str, int | None, int | None, str | None]],
    columns: str = "*",
) -> list[dict[str, Any]]:
    """The ``locations`` rows at ``places`` of ``source``, each place a (folder,
    uidvalidity, uid, uidl), probed through the index on the location key: the
    cost follows the places asked for, never the store."""
    if not places:
        return []
    keys = [location_key(source, *place) for place in places]
    rows: list[dict[str, Any]] = rows_where_in(
        con, "locations", "loc_key", keys, columns
    ).to_pylist()
    return rows


def locations_in(
    con: duckdb.DuckDBPyConnection, source: str, spans: Sequence[tuple[str, int, int | None]]
) -> list[dict[str, Any]]:
    """The ``locations`` rows of ``source`` in each span (folder, uidvalidity,
    highest UID): every row at UIDs 1..highest, vanished or not.

    Up to ``INDEX_KEYS_MAX`` UIDs in all are probed through the index on the
    location key (a small folder of a large store reads its own rows); more, or a
    span whose highest UID is not known (None), are read in one pass filtered on
    folder and UIDVALIDITY, which then also returns rows above the highest UID
    (1,000,000 locations: 20,000 UIDs probed 2.0 s, one pass 0.06 s).
    """
    if not spans:
        return []
    if all(top is not None for _, _, top in spans):
        total = sum(max(0, top or 0) for _, _, top in spans)
        if total <= INDEX_KEYS_MAX:
            places = [
                (folder, uv, uid, None)
                for folder, uv, top in spans
                for uid in range(1, (top or 0) + 1)
            ]
            return locations_at(con, source, places)
    where = " OR ".join("(folder = ? AND uidvalidity = ?)" for _ in spans)
    params: list[Any] = [source]
    for folder, uv, _ in spans:
        params += [folder, uv]
    return _dicts(
        con.execute(
            f"SELECT * FROM locations WHERE source = ? AND ({where}) AND uid IS NOT NULL", params
        )
    )


def folder_cursors(con: duckdb.DuckDBPyConnection, account: str) -> list[dict[str, Any]]:
    """The sync cursor of every folder of ``account`` the store has synced, one
    row a folder (its name, uidvalidity, last_uid, uidnext)."""
    return _dicts(
        con.execute(
            "SELECT folder, uidvalidity, last_uid, uidnext FROM cursors WHERE account = ?"
            " ORDER BY folder",
            [account],
        )
    )


def cursor(con: duckdb.DuckDBPyConnection, account: str, folder: str) -> dict[str, Any] | None:
    """The sync cursor of (account, folder), or None before the first sync."""
    rows = _dicts(
        con.execute(
            "SELECT uidvalidity, last_uid, uidnext, mode, seq FROM cursors"
            " WHERE account = ? AND folder = ?",
            [account, folder],
        )
    )
    return rows[0] if rows else None


def contains_uidl(con: duckdb.DuckDBPyConnection, uidl: str) -> bool:
    """True when some location records the POP3 UIDL ``uidl``."""
    return bool(con.execute("SELECT 1 FROM locations WHERE uidl = ? LIMIT 1", [uidl]).fetchall())


def uidls(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Every UIDL ever downloaded, sorted."""
    rows = con.execute("SELECT DISTINCT uidl FROM locations WHERE uidl IS NOT NULL ORDER BY uidl")
    return [r[0] for r in rows.fetchall()]


def known_uidls(
    con: duckdb.DuckDBPyConnection,
    source: str,
    uidls: Sequence[str],
    legacy: bool,
    query: Query,
) -> dict[str, list[dict[str, Any]]]:
    """``uidl -> [{"source", "sha256", "size", "message_id"}, ...]`` for the UIDLs
    on record at ``source`` and, with ``legacy``, at any GDBM import; a size the
    primary records no longer hold is read from the log through ``query`` (SQL
    over the ``events`` view)."""
    wanted = sorted(set(uidls))
    if not wanted:
        return {}
    con.register("_q_uidls", pa.table({"uidl": pa.array(wanted, pa.string())}))
    try:
        rows = con.execute(
            "SELECT DISTINCT l.uidl, l.source, l.sha256, l.message_id, m.size"
            " FROM locations l"
            " LEFT JOIN (SELECT sha256, any_value(size) AS size FROM messages"
            "            GROUP BY sha256) m USING (sha256)"
            " WHERE l.uidl IN (SELECT uidl FROM _q_uidls)"
            "   AND (l.source = ? OR (? AND starts_with(l.source, 'import:gdbm:')))"
            " ORDER BY l.uidl, l.source, l.sha256",
            [source, legacy],
        ).fetchall()
    finally:
        con.unregister("_q_uidls")
    out: dict[str, list[dict[str, Any]]] = {}
    missing: set[str] = set()
    for uidl, src, sha, mid, size in rows:
        out.setdefault(uidl, []).append(
            {"source": src, "sha256": sha, "size": size, "message_id": mid}
        )
        if size is None:
            missing.add(sha)
    if missing:  # deleted from the store since: the log still says how big it was
        table = query(
            "SELECT sha256, any_value(size) AS size FROM events"
            " WHERE type = 'message-seen' AND sha256 IN (SELECT unnest(?))"
            " AND size IS NOT NULL GROUP BY sha256",
            [sorted(missing)],
        )
        sizes = {r["sha256"]: r["size"] for r in table.to_pylist()}
        for entries in out.values():
            for e in entries:
                if e["size"] is None:
                    e["size"] = sizes.get(e["sha256"])
    return out


def has_places(con: duckdb.DuckDBPyConnection, source: str) -> bool:
    """Has ``source`` ever recorded a message here (else a sync of it is its first contact)?"""
    return (
        con.execute("SELECT 1 FROM locations WHERE source = ? LIMIT 1", [source]).fetchone()
        is not None
    )


def uidl_places(con: duckdb.DuckDBPyConnection, source: str, folder: str) -> list[dict[str, Any]]:
    """The live places of ``source`` in ``folder`` that carry a UIDL, by UIDL: ``folder``,
    ``uidl``, ``message_id`` each."""
    return _dicts(
        con.execute(
            "SELECT DISTINCT folder, uidl, message_id FROM locations WHERE source = ?"
            " AND folder = ? AND NOT vanished AND uidl IS NOT NULL ORDER BY uidl",
            [source, folder],
        )
    )

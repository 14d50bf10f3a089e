"""The UIDs a folder holds, probed for the reassignment check of a sync, and the
folders of the cursor snapshot (``projections.snapshot``) with their pools."""

from __future__ import annotations

import random
from typing import Any

import duckdb

from projections.queries.locations import locations_at
from projections.queries.messages import message_rows

__all__ = ["held_pool", "snapshot_folders"]

# (held, pool): a UID held at a place: its Message-ID, sha256 and size (None: the
# record is gone)
Held = tuple[str, str, int | None]


def held_pool(
    con: duckdb.DuckDBPyConnection,
    account: str,
    folder: str,
    uidvalidity: int,
    last_uid: int,
    rng: random.Random,
) -> dict[int, Held]:
    """``uid -> (message_id, sha256, size)`` of the UIDs the folder holds among a
    probe of them up to ``last_uid``: the eight lowest and highest UIDs and 48
    drawn by ``rng`` below it, each the latest content seen there (after a rescan
    a UID has two) and not vanished. Probed through the index on the location
    key: a folder of a million messages costs a few dozen rows."""
    ends = [*range(1, min(last_uid, 8) + 1), *range(max(1, last_uid - 7), last_uid + 1)]
    spread = rng.sample(range(1, last_uid + 1), min(48, last_uid))
    probe = sorted({*ends, *spread})
    rows = locations_at(
        con,
        account,
        [(folder, uidvalidity, uid, None) for uid in probe],
        "uid, last_seq, vanished, message_id, sha256",
    )
    latest: dict[int, dict[str, Any]] = {}
    for r in rows:
        if r["uid"] is not None and (
            r["uid"] not in latest or r["last_seq"] > latest[r["uid"]]["last_seq"]
        ):
            latest[r["uid"]] = r
    held = {uid: r for uid, r in latest.items() if not r["vanished"]}
    ids = sorted({r["message_id"] for r in held.values()})
    sizes = {
        (r["message_id"], r["sha256"]): r["size"]
        for r in message_rows(con, ids, "message_id, sha256, size")
    }
    return {
        uid: (r["message_id"], r["sha256"], sizes.get((r["message_id"], r["sha256"])))
        for uid, r in sorted(held.items())
    }


def snapshot_folders(
    con: duckdb.DuckDBPyConnection,
    kept: dict[tuple[str, str], dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Every synced folder's cursor and pool of held UIDs (``held_pool``, drawn by
    a generator seeded with the folder and its cursor), as the snapshot keeps them.

    ``kept``: folders of the snapshot before, known untouched since (no event of
    theirs folded in between): one whose cursor is unchanged keeps its pool, which
    is the pool probing would draw again. A fold then probes only the folders it
    touched, not every folder of the store."""
    cursors = con.execute(
        "SELECT account, folder, uidvalidity, last_uid, uidnext FROM cursors"
        " ORDER BY account, folder"
    ).fetchall()
    out = []
    for account, folder, uidvalidity, last_uid, uidnext in cursors:
        before = (kept or {}).get((account, folder))
        pool: dict[int, Held] = {}
        if before is not None and (
            before["uidvalidity"],
            before["last_uid"],
            before["uidnext"],
        ) == (uidvalidity, last_uid, uidnext):
            pool = {uid: (message_id, sha, size) for uid, message_id, sha, size in before["held"]}
        elif last_uid and uidvalidity is not None:
            rng = random.Random(f"{account}/{folder}/{uidvalidity}/{last_uid}")
            pool = held_pool(con, account, folder, uidvalidity, last_uid, rng)
        out.append(
            {
                "account": account,
                "folder": folder,
                "uidvalidity": uidvalidity,
                "last_uid": last_uid,
                "uidnext": uidnext,
                "held": [[uid, *h] for uid, h in pool.items()],
            }
        )
    return out

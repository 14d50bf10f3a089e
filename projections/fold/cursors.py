"""The ``cursors`` projection: per account and folder, the sync position the last
``cursor-moved`` set, or the empty one a UIDVALIDITY change leaves."""

from __future__ import annotations

from typing import Any

import duckdb

from projections.fold.batch import MOVED, UIDV

__all__ = ["CURSOR_EVENTS", "fold_cursors"]

# The events this projection folds.
CURSOR_EVENTS = frozenset({MOVED, UIDV})


def fold_cursors(con: duckdb.DuckDBPyConnection) -> None:
    """Fold the batch's cursor moves and UIDVALIDITY changes into ``cursors``: the
    last event of each (account, folder) sets its row."""
    rows = (
        con.sql(
            "SELECT seq, type, recorded_at, source, folder, uidvalidity, cursor_to, uidnext,"
            f" mode, new_uidvalidity FROM _batch WHERE type IN ('{MOVED}', '{UIDV}') ORDER BY seq"
        )
        .to_arrow_table()
        .to_pylist()
    )
    state: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows:
        key = (r["source"], r["folder"])
        if r["type"] == MOVED:
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

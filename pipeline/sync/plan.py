"""A folder's plan: what a sync takes from it, decided from its cursor and the
server's state, and the reading of a folder's locations the plans rest on.

Rules decided here: a changed UIDVALIDITY raises an ALARM and rescans the
folder; a UIDNEXT at or below the cursor is a broken server (ALARM, folder
error, cursor untouched); otherwise a delta above the cursor.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pipeline.config import InitialMode

if TYPE_CHECKING:  # (the idle sync plans without loading the sync's sources)
    from pipeline.sync.sources import FolderState

__all__ = ["Plan", "checks_reassigned", "highest_uid", "plan_folder", "present_locations"]


@dataclass(frozen=True)
class Plan:
    """What to do with one folder, decided from its cursor and the server's state."""

    mode: str  # full | since | new-only | delta | reconcile
    after_uid: int  # take UIDs above this (0: all)
    cursor_from: int | None
    uidvalidity_changed: bool = False
    old_uidvalidity: int | None = None
    alarm: str | None = None
    error: str | None = None
    nothing_new: bool = False
    reassigned: bool = False  # UIDs name other messages under the same UIDVALIDITY


def plan_folder(
    cursor: Mapping[str, Any] | None,
    state: FolderState,
    initial: InitialMode,
    *,
    reconcile: bool = False,
) -> Plan:
    """Decide a folder's mode. Pure: the same inputs always give the same plan."""
    if cursor is None:
        return Plan(mode=initial.kind, after_uid=0, cursor_from=None)
    last = cursor.get("last_uid")
    if cursor.get("uidvalidity") != state.uidvalidity:
        return Plan(
            mode="full",
            after_uid=0,
            cursor_from=last,
            uidvalidity_changed=True,
            old_uidvalidity=cursor.get("uidvalidity"),
            alarm=(
                f"UIDVALIDITY changed {cursor.get('uidvalidity')} -> {state.uidvalidity}:"
                " rescanning the folder in full"
            ),
        )
    if last is None:  # a UIDVALIDITY change was recorded; its rescan never completed
        return Plan(mode="full", after_uid=0, cursor_from=None)
    if state.uidnext is not None and state.uidnext <= last:
        msg = (
            f"UIDNEXT {state.uidnext} is at or below the cursor {last} with the same"
            f" UIDVALIDITY {state.uidvalidity}: the server is broken; cursor left alone"
        )
        return Plan(mode="delta", after_uid=last, cursor_from=last, alarm=msg, error=msg)
    if reconcile:
        return Plan(mode="reconcile", after_uid=0, cursor_from=last)
    nothing = state.uidnext is not None and state.uidnext - 1 <= last
    return Plan(mode="delta", after_uid=last, cursor_from=last, nothing_new=nothing)


def checks_reassigned(plan: Plan) -> bool:
    """Whether ``plan`` is checked for UIDs reassigned under the same UIDVALIDITY:
    a delta or a reconcile from a cursor, that nothing has stopped."""
    return plan.mode in ("delta", "reconcile") and not plan.error and bool(plan.cursor_from)


def highest_uid(cursor: Mapping[str, Any]) -> int | None:
    """The highest UID a folder can have given out under its cursor's UIDVALIDITY
    (below the UIDNEXT last seen, or the cursor itself); None when neither is known."""
    last, uidnext = cursor.get("last_uid"), cursor.get("uidnext")
    if last is None and uidnext is None:
        return None
    return max(last or 0, (uidnext or 1) - 1)


def present_locations(rows: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """``uid -> row`` of the locations in ``rows`` that are not vanished, one a UID
    (after a rescan a UID may hold two contents: the latest one names it)."""
    out: dict[int, dict[str, Any]] = {}
    for r in rows:
        if r["vanished"] or r["uid"] is None:
            continue
        if r["uid"] not in out or r["last_seq"] > out[r["uid"]]["last_seq"]:
            out[r["uid"]] = r
    return out

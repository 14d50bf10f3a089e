"""The one reconcile rule of every source: a location on record that the server
no longer shows is recorded as vanished (a ``location-vanished`` event); the
mail itself is kept. IMAP reconciles by UID within a UIDVALIDITY, by whole
folders (renamed or deleted) and by old UIDVALIDITY; POP3 by UIDL.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from stores.events import LocationVanished

if TYPE_CHECKING:
    from pipeline.store import MessageStore

__all__ = ["not_on_server", "vanished_events"]


def vanished_events(
    store: MessageStore, source: str, rows: Iterable[Mapping[str, Any]], reason: str
) -> list[LocationVanished]:
    """A ``location-vanished`` event for each locations row (``folder``,
    ``message_id`` and the place: ``uidvalidity``/``uid`` or ``uidl``), in the
    order of their places; one event marks every content seen there before."""

    def place(r: Mapping[str, Any]) -> tuple[Any, ...]:
        return (r["folder"], r.get("uidvalidity") or 0, r.get("uid") or 0, r.get("uidl") or "")

    return [
        store.events.vanished(
            source=source,
            folder=r["folder"],
            uidvalidity=r.get("uidvalidity"),
            uid=r.get("uid"),
            uidl=r.get("uidl"),
            message_id=r["message_id"],
            reason=reason,
        )
        for r in sorted(rows, key=place)
    ]


def not_on_server(
    store: MessageStore,
    source: str,
    on_record: Iterable[Mapping[str, Any]],
    on_server: Collection[Any],
    *,
    key: str,
    reason: str,
    apply: bool,
) -> list[Mapping[str, Any]]:
    """The rows of ``on_record`` whose ``key`` (``uid``, ``uidl``) is not in
    ``on_server``: recorded as vanished in one commit when ``apply`` (a dry run
    only counts them); returned."""
    gone = [r for r in on_record if r[key] not in on_server]
    if gone and apply:
        store.commit(vanished_events(store, source, gone, reason))
    return gone

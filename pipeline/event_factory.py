"""The one place events are made: each stamped with the run's id and the
clock's time.

The composition of a run (``MessageStore.open``, the CLI) builds one
``EventFactory`` from its clock and run id; the sync, the POP3 sync, the
ingest, dispatch and the store's own deletes ask it for their events, so no
caller reaches for a clock or a run id of its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pipeline.clock import Clock
from stores.events import (
    CursorMoved,
    FlagsChanged,
    LocationVanished,
    MessageDeleted,
    MessageSeen,
    UidvalidityChanged,
)

if TYPE_CHECKING:  # (the parser's modules: only commands that parse import them)
    from pipeline.parse import ParsedMessage

__all__ = ["EventFactory"]

#: What a ``message-seen`` event says of the content (the rest is its place).
_CONTENT = (
    "message_id", "sha256", "size", "headers", "date_utc", "date_offset_min", "from_addr",
    "to_addrs", "in_reply_to", "references", "list_id", "subject", "synthetic_id", "defects",
)  # fmt: skip
_LISTS = ("headers", "to_addrs", "references", "defects")


class EventFactory:
    """Events of one run: ``run_id`` on each, ``clock.now()`` when it is made."""

    def __init__(self, clock: Clock, run_id: str) -> None:
        self.clock = clock
        self.run_id = run_id

    def seen(
        self,
        parsed: ParsedMessage,
        *,
        source: str,
        folder: str,
        uidl: str | None = None,
        uidvalidity: int | None = None,
        uid: int | None = None,
        internal_date: Any = None,
        flags: tuple[str, ...] | None = None,
    ) -> MessageSeen:
        """A ``message-seen`` event for a parsed message at a location (``flags``: what
        the source showed of them there, None when it shows none)."""
        return MessageSeen(
            run_id=self.run_id,
            recorded_at=self.clock.now(),
            source=source,
            folder=folder,
            uidl=uidl,
            uidvalidity=uidvalidity,
            uid=uid,
            internal_date=internal_date,
            message_id=parsed.message_id,
            sha256=parsed.sha256,
            size=parsed.size,
            headers=parsed.headers,
            date_utc=parsed.date_utc,
            date_offset_min=parsed.date_offset_min,
            from_addr=parsed.from_addr,
            to_addrs=parsed.to_addrs,
            in_reply_to=parsed.in_reply_to,
            references=parsed.references,
            list_id=parsed.list_id,
            subject=parsed.subject,
            synthetic_id=parsed.synthetic_id,
            defects=parsed.defects,
            flags=flags,
        )

    def seen_again(
        self,
        rec: Mapping[str, Any],
        *,
        source: str,
        folder: str,
        uidl: str | None = None,
        uidvalidity: int | None = None,
        uid: int | None = None,
        internal_date: Any = None,
        flags: tuple[str, ...] | None = None,
    ) -> MessageSeen:
        """A ``message-seen`` event for content the store already holds (``rec``: its
        ``known_records`` row; no body needed)."""
        from pipeline.parse import ParsedMessage  # (a sync parses anyway)

        content = {name: rec[name] for name in _CONTENT}
        for name in _LISTS:
            content[name] = tuple(content[name] or ())
        content["synthetic_id"] = bool(content["synthetic_id"])
        return self.seen(
            ParsedMessage(**content),
            source=source,
            folder=folder,
            uidl=uidl,
            uidvalidity=uidvalidity,
            uid=uid,
            internal_date=internal_date,
            flags=flags,
        )

    def flags_changed(
        self,
        *,
        source: str,
        folder: str,
        message_id: str,
        flags: tuple[str, ...],
        uidvalidity: int | None = None,
        uid: int | None = None,
        uidl: str | None = None,
    ) -> FlagsChanged:
        """A ``flags-changed`` event: the message at a place on record shows ``flags`` now."""
        return FlagsChanged(
            run_id=self.run_id,
            recorded_at=self.clock.now(),
            source=source,
            folder=folder,
            uidvalidity=uidvalidity,
            uid=uid,
            uidl=uidl,
            message_id=message_id,
            flags=flags,
        )

    def deleted(self, message_id: str, *, actor: str, reason: str) -> MessageDeleted:
        """A ``message-deleted`` event: ``actor`` removed ``message_id`` for ``reason``."""
        return MessageDeleted(
            run_id=self.run_id,
            recorded_at=self.clock.now(),
            message_id=message_id,
            actor=actor,
            reason=reason,
        )

    def vanished(
        self,
        *,
        source: str,
        folder: str,
        message_id: str,
        reason: str,
        uidvalidity: int | None = None,
        uid: int | None = None,
        uidl: str | None = None,
    ) -> LocationVanished:
        """A ``location-vanished`` event: the message is no longer at this place."""
        return LocationVanished(
            run_id=self.run_id,
            recorded_at=self.clock.now(),
            source=source,
            folder=folder,
            uidvalidity=uidvalidity,
            uid=uid,
            uidl=uidl,
            message_id=message_id,
            reason=reason,
        )

    def uidvalidity_changed(
        self,
        *,
        source: str,
        folder: str,
        old: int | None,
        new: int,
        action: str,
        mode: str,
    ) -> UidvalidityChanged:
        return UidvalidityChanged(
            run_id=self.run_id,
            recorded_at=self.clock.now(),
            source=source,
            folder=folder,
            old_uidvalidity=old,
            new_uidvalidity=new,
            action=action,
            mode=mode,
        )

    def cursor_moved(self, **fields: Any) -> CursorMoved:
        """A ``cursor-moved`` event of ``fields`` (source, folder, uidvalidity,
        cursor_from, cursor_to, uidnext, mode, reason)."""
        return CursorMoved(run_id=self.run_id, recorded_at=self.clock.now(), **fields)

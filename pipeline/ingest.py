"""Recording messages from any source in batches, with the run accounting of SPEC §6.

Sources (importers, fetchers) hand ``Ingest`` raw messages with their location;
it decides per message whether the body must be written, whether the Message-ID
is new, a duplicate, or already held from another source, writes blobs, and
commits ``message-seen`` events in batches. Decisions for a whole batch cost a
few queries, never one per message.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pyarrow as pa

from pipeline.parse import ParsedMessage, parse_message
from pipeline.store import MessageStore
from stores.events import Event

__all__ = ["Incoming", "Ingest", "RunCounts"]


@dataclass
class RunCounts:
    """Per-source run counts; ``balanced`` checks the SPEC §6 equations."""

    uids_seen: int = 0
    processed: int = 0
    vanished: int = 0
    errors: int = 0
    bodies_fetched: int = 0
    known_skipped: int = 0
    new_messages: int = 0
    duplicates: int = 0
    conflicts_other_source: int = 0
    malformed: int = 0
    bytes_read: int = 0
    events: int = 0
    error_details: list[str] = field(default_factory=list)

    @property
    def balanced(self) -> bool:
        return (
            self.uids_seen == self.processed + self.vanished + self.errors
            and self.processed == self.bodies_fetched + self.known_skipped
            and self.processed == self.new_messages + self.duplicates + self.conflicts_other_source
        )

    def as_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k != "error_details"}
        d["balanced"] = self.balanced
        d["error_details"] = list(self.error_details)
        return d

    def add(self, other: RunCounts) -> None:
        for k, v in other.__dict__.items():
            if isinstance(v, int):
                setattr(self, k, getattr(self, k) + v)
        self.error_details.extend(other.error_details)


@dataclass(frozen=True)
class Incoming:
    """One raw message and where a source showed it to us."""

    raw: bytes
    folder: str
    uidl: str | None = None
    uidvalidity: int | None = None
    uid: int | None = None
    internal_date: datetime | None = None
    message_id: str | None = None  # overrides the parsed id (legacy UIDL import)


class Ingest:
    """Batching writer of ``message-seen`` events for one source."""

    def __init__(
        self,
        store: MessageStore,
        source: str,
        *,
        batch_size: int = 1000,
        batch_bytes: int = 32 << 20,
        network: bool = False,
    ) -> None:
        """``network``: bodies were downloaded (each counts as fetched); otherwise
        read from local files (a body counts as fetched only when its bytes are new)."""
        self.store = store
        self.source = source
        self.network = network
        self._known: list[tuple[dict[str, Any], Incoming]] = []
        self.batch_size = batch_size
        self.batch_bytes = batch_bytes
        self.counts = RunCounts()
        self._pending: list[Incoming] = []
        self._pending_bytes = 0

    def error(self, where: str, reason: str) -> None:
        """Count a message that could not be read at all (it is named, never dropped quietly)."""
        self.counts.uids_seen += 1
        self.counts.errors += 1
        self.counts.error_details.append(f"{where}: {reason}")

    def offer(self, item: Incoming) -> None:
        self.counts.uids_seen += 1
        self._pending.append(item)
        self._pending_bytes += len(item.raw)
        if len(self._pending) >= self.batch_size or self._pending_bytes >= self.batch_bytes:
            self.flush()

    def offer_all(self, items: Iterable[Incoming]) -> None:
        for item in items:
            self.offer(item)

    def offer_known(self, record: dict[str, Any], where: Incoming) -> None:
        """A message whose content the store holds (``record`` from ``known_records``):
        recorded at its new location without its body."""
        self.counts.uids_seen += 1
        self._known.append((record, where))
        if len(self._pending) + len(self._known) >= self.batch_size:
            self.flush()

    def flush(self, extra: Sequence[Event] = ()) -> None:
        """Decide, write blobs, commit one batch (with ``extra`` events after it)."""
        items, self._pending, self._pending_bytes = self._pending, [], 0
        known, self._known = self._known, []
        if not items and not known:
            if extra:
                self.store.commit(list(extra))
                self.counts.events += len(extra)
            return
        parsed = []
        for it in items:
            p = parse_message(it.raw)
            if it.message_id is not None:
                p = _with_id(p, it.message_id)
            parsed.append(p)
        known_locs, owners = self._lookup(
            [p.message_id for p in parsed] + [r["message_id"] for r, _ in known],
            [p.sha256 for p in parsed] + [r["sha256"] for r, _ in known],
        )
        events: list[Event] = []
        c = self.counts
        for it, p in zip(items, parsed, strict=True):
            c.processed += 1
            c.bytes_read += len(it.raw)
            if p.defects:
                c.malformed += 1
            _, written = self.store.blobs.put(it.raw, p.sha256)
            if written or self.network:
                c.bodies_fetched += 1
            else:
                c.known_skipped += 1
            owner = owners.get(p.message_id)
            if owner is None:
                c.new_messages += 1
                owners[p.message_id] = self.source
            elif owner == self.source:
                c.duplicates += 1
            else:
                c.conflicts_other_source += 1
            key = (it.folder, it.uidvalidity, it.uid, it.uidl, p.sha256)
            if key in known_locs:
                continue  # this very location and content are on record already
            known_locs.add(key)
            events.append(
                self.store.seen_event(
                    p,
                    source=self.source,
                    folder=it.folder,
                    uidl=it.uidl,
                    uidvalidity=it.uidvalidity,
                    uid=it.uid,
                    internal_date=it.internal_date,
                )
            )
        for rec, it in known:
            c.processed += 1
            c.known_skipped += 1
            owner = owners.get(rec["message_id"])
            if owner is None:
                c.new_messages += 1  # known content, but its record was deleted since
                owners[rec["message_id"]] = self.source
            elif owner == self.source:
                c.duplicates += 1
            else:
                c.conflicts_other_source += 1
            key = (it.folder, it.uidvalidity, it.uid, it.uidl, rec["sha256"])
            if key in known_locs:
                continue
            known_locs.add(key)
            events.append(
                self.store.seen_event_from_record(
                    rec,
                    source=self.source,
                    folder=it.folder,
                    uidl=it.uidl,
                    uidvalidity=it.uidvalidity,
                    uid=it.uid,
                    internal_date=it.internal_date,
                )
            )
        events.extend(extra)
        if events:
            self.store.commit(events)
            c.events += len(events)

    def _lookup(
        self, ids: list[str], shas: list[str]
    ) -> tuple[set[tuple[Any, ...]], dict[str, str]]:
        """Known (location, sha) keys of this source, and the source owning each id."""
        con = self.store._reader()
        con.register("_q_ids", pa.table({"id": pa.array(ids, pa.string())}))
        owners = dict(
            con.execute(
                "SELECT message_id, source FROM messages"
                " WHERE message_id IN (SELECT id FROM _q_ids)"
            ).fetchall()
        )
        con.register("_q_sha", pa.table({"sha": pa.array(shas, pa.string())}))
        rows = con.execute(
            "SELECT folder, uidvalidity, uid, uidl, sha256 FROM locations"
            " WHERE source = ? AND sha256 IN (SELECT sha FROM _q_sha)",
            [self.source],
        ).fetchall()
        con.unregister("_q_ids")
        con.unregister("_q_sha")
        return {tuple(r) for r in rows}, owners


def _with_id(p: ParsedMessage, message_id: str) -> ParsedMessage:
    import dataclasses

    return dataclasses.replace(p, message_id=message_id, synthetic_id=True)

"""Recording messages from any source in batches, with the run accounting of SPEC §6.

Sources (importers, fetchers) hand ``Ingest`` raw messages with their location;
it decides per message whether the body must be written, whether the Message-ID
is new, a duplicate, or already held from another source, writes blobs, and
commits ``message-seen`` events in batches. Decisions for a whole batch cost a
few queries, never one per message.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pyarrow as pa

from pipeline.parse import ParsedMessage, parse_message
from pipeline.store import MessageStore
from stores.blobs import encode_blob
from stores.events import Event

__all__ = ["Incoming", "Ingest", "RunCounts", "prepare", "worker_pool"]


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


@contextlib.contextmanager
def worker_pool(workers: int) -> Iterator[Executor | None]:
    """Processes that parse and compress while this one writes (None for 0 workers).

    forkserver, not fork: this process may hold DuckDB threads and locks that a
    forked child must not inherit.
    """
    if workers <= 0:
        yield None
        return
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["pipeline.ingest"])
    with ProcessPoolExecutor(
        max_workers=workers, mp_context=ctx, initializer=_watch_parent, initargs=(os.getpid(),)
    ) as pool:
        yield pool


def _watch_parent(pid: int) -> None:
    """In a worker: exit when the importing process is gone (killed with -9, say);
    nothing else would ever tell a worker of a forkserver that its job has died."""
    import threading
    import time

    def watch() -> None:
        while True:
            time.sleep(0.5)
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                os._exit(0)
            except PermissionError:
                pass

    threading.Thread(target=watch, daemon=True, name="parent-watch").start()


def prepare(raws: Sequence[bytes]) -> list[tuple[ParsedMessage, bytes]]:
    """Parse each message and encode its blob: the CPU-bound part of an ingest,
    pure so that worker processes can run it."""
    return [(parse_message(raw), encode_blob(raw)) for raw in raws]


class _Done:
    """A finished result with the interface of a Future (no pool in use)."""

    def __init__(self, value: list[tuple[ParsedMessage, bytes]]) -> None:
        self._value = value

    def result(self) -> list[tuple[ParsedMessage, bytes]]:
        return self._value


class Ingest:
    """Batching writer of ``message-seen`` events for one source.

    Messages are prepared (parsed, compressed) in chunks, by ``workers``
    processes when given, while this process writes blobs and commits: the
    work of one batch overlaps the commit of the one before.
    """

    _CHUNK = 128

    def __init__(
        self,
        store: MessageStore,
        source: str,
        *,
        batch_size: int = 1000,
        batch_bytes: int = 32 << 20,
        network: bool = False,
        pool: Executor | None = None,
    ) -> None:
        """``network``: bodies were downloaded (each counts as fetched); otherwise
        read from local files (a body counts as fetched only when its bytes are new).
        ``pool``: an executor that runs ``prepare`` (None: in this process)."""
        self.store = store
        self.source = source
        self.network = network
        self.pool = pool
        self.batch_size = batch_size
        self.batch_bytes = batch_bytes
        self.counts = RunCounts()
        self._chunk: list[Incoming] = []
        self._chunks: list[tuple[list[Incoming], Any]] = []
        self._queued = 0
        self._queued_bytes = 0
        self._known: list[tuple[dict[str, Any], Incoming]] = []
        self._sealed: tuple[list[tuple[list[Incoming], Any]], list[Any]] | None = None
        # what this run has recorded: later batches are decided without waiting
        # for earlier ones to reach the projections
        self._owners: dict[str, str] = {}
        self._locs: set[tuple[Any, ...]] = set()
        self._shas: set[str] = set()

    def error(self, where: str, reason: str) -> None:
        """Count a message that could not be read at all (it is named, never dropped quietly)."""
        self.counts.uids_seen += 1
        self.counts.errors += 1
        self.counts.error_details.append(f"{where}: {reason}")

    def offer(self, item: Incoming) -> None:
        self.counts.uids_seen += 1
        self._chunk.append(item)
        self._queued += 1
        self._queued_bytes += len(item.raw)
        if len(self._chunk) >= self._CHUNK:
            self._submit()
        if self._queued >= self.batch_size or self._queued_bytes >= self.batch_bytes:
            self._seal()

    def offer_all(self, items: Iterable[Incoming]) -> None:
        for item in items:
            self.offer(item)

    def offer_known(self, record: dict[str, Any], where: Incoming) -> None:
        """A message whose content the store holds (``record`` from ``known_records``):
        recorded at its new location without its body."""
        self.counts.uids_seen += 1
        self._known.append((record, where))
        if self._queued + len(self._known) >= self.batch_size:
            self._seal()

    def _submit(self) -> None:
        chunk, self._chunk = self._chunk, []
        if not chunk:
            return
        raws = [it.raw for it in chunk]
        fut = self.pool.submit(prepare, raws) if self.pool is not None else _Done(prepare(raws))
        self._chunks.append((chunk, fut))

    def _seal(self) -> None:
        """Close the current batch. The batch sealed before it is committed now,
        while the workers still prepare this one: commits overlap parsing."""
        self._submit()
        batch = (self._chunks, self._known)
        self._chunks, self._known = [], []
        self._queued = self._queued_bytes = 0
        previous, self._sealed = self._sealed, batch
        if previous is not None:
            self._commit(*previous)

    def flush(self, extra: Sequence[Event] = ()) -> None:
        """Commit everything offered so far (with ``extra`` events after it) and fold
        it into the projections."""
        self._submit()
        previous, self._sealed = self._sealed, None
        if previous is not None:
            self._commit(*previous)
        chunks, known = self._chunks, self._known
        self._chunks, self._known = [], []
        self._queued = self._queued_bytes = 0
        self._commit(chunks, known, extra)
        self.store.catch_up()

    def _commit(
        self,
        chunks: list[tuple[list[Incoming], Any]],
        known: list[tuple[dict[str, Any], Incoming]],
        extra: Sequence[Event] = (),
    ) -> None:
        """Decide, write blobs, commit one batch."""
        items: list[Incoming] = []
        prepared: list[tuple[ParsedMessage, bytes]] = []
        for chunk, fut in chunks:
            items.extend(chunk)
            prepared.extend(fut.result())
        if not items and not known:
            if extra:
                self.store.commit(list(extra), apply=False)
                self.counts.events += len(extra)
            return
        parsed = [
            _with_id(p, it.message_id) if it.message_id is not None else p
            for it, (p, _) in zip(items, prepared, strict=True)
        ]
        self._lookup(
            [p.message_id for p in parsed] + [r["message_id"] for r, _ in known],
            [p.sha256 for p in parsed] + [r["sha256"] for r, _ in known],
        )
        known_locs = self._locs
        events: list[Event] = []
        c = self.counts
        for it, p, (_, blob) in zip(items, parsed, prepared, strict=True):
            c.processed += 1
            c.bytes_read += len(it.raw)
            if p.defects:
                c.malformed += 1
            key = (it.folder, it.uidvalidity, it.uid, it.uidl, p.sha256)
            if key in known_locs and p.message_id not in self._owners:
                # on record at this location, and deleted since (perhaps purged): no
                # event will name these bytes, so they must not come back as a blob
                written = False
            else:
                written = self.store.blobs.put_encoded(p.sha256, blob)
            if written or self.network:
                c.bodies_fetched += 1
            else:
                c.known_skipped += 1
            self._count_owner(p.message_id)
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
            self._count_owner(rec["message_id"])
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
            # durable now; folded into the projections at flush (one fold for many
            # batches is far cheaper than one per batch)
            self.store.commit(events, apply=False)
            c.events += len(events)

    def _count_owner(self, message_id: str) -> None:
        c = self.counts
        owner = self._owners.get(message_id)
        if owner is None:
            c.new_messages += 1  # (or known content whose record was deleted since)
            self._owners[message_id] = self.source
        elif owner == self.source:
            c.duplicates += 1
        else:
            c.conflicts_other_source += 1

    def _lookup(self, ids: list[str], shas: list[str]) -> None:
        """Learn, for ids and contents this run has not met yet, which source owns
        each id and which (location, sha) keys of this source are on record."""
        new_ids = sorted({i for i in ids if i not in self._owners})
        new_shas = sorted({h for h in shas if h not in self._shas})
        if not new_ids and not new_shas:
            return
        # Projections may lag while a bulk run defers its fold; what this run
        # committed itself is in self._owners / self._locs already.
        con = self.store._reader(stale_ok=True)
        if new_ids:
            con.register("_q_ids", pa.table({"id": pa.array(new_ids, pa.string())}))
            self._owners.update(
                con.execute(
                    "SELECT message_id, source FROM messages"
                    " WHERE message_id IN (SELECT id FROM _q_ids)"
                ).fetchall()
            )
            con.unregister("_q_ids")
        if new_shas:
            con.register("_q_sha", pa.table({"sha": pa.array(new_shas, pa.string())}))
            rows = con.execute(
                "SELECT folder, uidvalidity, uid, uidl, sha256 FROM locations"
                " WHERE source = ? AND sha256 IN (SELECT sha FROM _q_sha)",
                [self.source],
            ).fetchall()
            con.unregister("_q_sha")
            self._locs.update(tuple(r) for r in rows)
            self._shas.update(new_shas)


def _with_id(p: ParsedMessage, message_id: str) -> ParsedMessage:
    import dataclasses

    return dataclasses.replace(p, message_id=message_id, synthetic_id=True)

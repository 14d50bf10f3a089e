"""``Ingest``: the batching writer of one source's ``message-seen`` events.

Messages offered are prepared in chunks (by worker processes when there is a
pool) while this process decides, per batch and in a few queries, whether each
Message-ID is new, a duplicate or held from another source, and commits.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Executor
from typing import Any

import pyarrow as pa

from pipeline.ingest.known import deleted_among, digest, flags_on_record, with_id
from pipeline.ingest.records import Incoming, RunCounts
from pipeline.ingest.workers import Done
from pipeline.parse import ParsedMessage
from pipeline.prepare import Prepared, prepare
from pipeline.store import MessageStore
from stores.events import Event

__all__ = ["Ingest"]

log = logging.getLogger("mailledger.ingest")


class Ingest:
    """Batching writer of ``message-seen`` events for one source.

    Messages are prepared (read, parsed, compressed, their blobs written) in
    chunks, by ``workers`` processes when given, while this process decides and
    commits: the work of one batch overlaps the commit of the one before.

    Blobs written by other processes, and their races:

    - Durability: a worker's writes have returned before its result reaches
      ``_commit``, which then marks the blob store dirty; the log's commit runs
      ``BlobStore.flush()`` (one ``syncfs``, which covers pages any process wrote)
      before the events naming them become visible. A blob found already there
      counts the same: it may be a crashed writer's unflushed file.
    - Erased messages: a location on record whose message is deleted must not
      get its blob back. The sha256s of such locations of this source are read
      once, before the first chunk goes out (``_deleted``), and sent with each
      chunk for its items' locations: those blobs come back encoded and this
      process decides exactly as it always did. A message deleted (and purged)
      by another process after that snapshot may have its blob written by a
      worker anyway: ``_commit`` notices (its rule says "do not write", the
      worker says "written"), and the blob is erased at ``flush`` unless an event
      of this run or a stored message names it by then. Only a third process
      storing the same content in that instant remains exposed: the documented
      race of a purge with a concurrent import of the very same content.
    - Counting: two chunks in flight at once may both find a blob absent and
      both write it; only the first of them in commit order counts its bytes as
      new (``_fresh``), as with one writer. With ``lookahead`` K, the chunks of
      batch B are submitted only after batch B-K-1 committed (all its chunks
      done), so B's chunks overlap those of B-K..B+K at most: ``_fresh`` keeps the
      blobs counted by the K batches committed before.
    - Other processes writing the same blob: unique temporary names (pid and
      random), ``O_EXCL``, and an atomic rename of identical bytes, as before.
    """

    _CHUNK = 128
    # places a run probes one chunk at a time before it reads its source's whole list
    _PROBE_PLACES = 2048

    def __init__(
        self,
        store: MessageStore,
        source: str,
        *,
        batch_size: int = 1000,
        batch_bytes: int = 32 << 20,
        network: bool = False,
        pool: Executor | None = None,
        lookahead: int = 1,
    ) -> None:
        """``network``: bodies were downloaded (each counts as fetched); otherwise
        read from local files (a body counts as fetched only when its bytes are new).
        ``pool``: an executor that runs ``prepare`` (None: in this process).
        ``lookahead``: sealed batches left to the workers before the oldest is
        committed; more keep the workers busy while this process folds, each
        holds its messages' raw bytes here (none for messages given by path)."""
        self.store = store
        self.source = source
        self.network = network
        self.pool = pool
        self.batch_size = batch_size
        self.batch_bytes = batch_bytes
        self.counts = RunCounts()
        self._blobs_root = str(store.blobs.root)
        self._deleted: dict[tuple[Any, ...], set[str]] | None = None
        self._probed = 0  # places probed by ``held`` so far
        self._lookahead = max(1, lookahead)
        # blobs counted as written by the last batches committed (see above)
        self._fresh: deque[set[str]] = deque(maxlen=self._lookahead)
        self._unwanted: set[str] = set()  # see the class docstring: erased at flush
        self._chunk: list[Incoming] = []
        self._ready: list[tuple[Incoming, Prepared]] = []  # see offer_prepared
        self._chunks: list[tuple[list[Incoming], Any]] = []
        self._queued = 0
        self._queued_bytes = 0
        self._known: list[tuple[dict[str, Any], Incoming]] = []
        self._sealed: deque[tuple[list[tuple[list[Incoming], Any]], list[Any]]] = deque()
        # what this run has recorded: later batches are decided without waiting
        # for earlier ones to reach the projections. Kept by digest (``digest``),
        # a message's id, its place and its location: held as strings and tuples
        # they took 0.93 KB a message (930 MiB at the end of an import of
        # 1,000,000 messages, before its fold), as digests about 0.3 KB
        self._owners: dict[bytes, str] = {}
        # ids counted at a location on record for them after their delete, with no
        # event (yet): their bytes stay unwritten at any other such location too
        self._ghosts: set[str] = set()
        # locations on record (place and content), each with the flags last shown there
        self._locs: dict[bytes, tuple[str, ...] | None] = {}
        self._places: set[bytes] = set()
        # the log's last seq when every event in it is one this run committed (the
        # store was empty when the run first looked), else None: see ``_alone``
        self._own_upto: int | None = None
        self._started = False
        # ids the store was seen not to hold (``absent``) while its log ended at
        # ``_absent_upto``; kept up to date by this run's own commits, dropped at
        # another writer's
        self._absent: set[str] = set()
        self._absent_upto = 0
        # places whose locations the caller read at once, deleted contents there
        self._read_places: set[tuple[Any, ...]] = set()
        self._read_deleted: dict[tuple[Any, ...], set[str]] = {}

    def error(self, where: str, reason: str) -> None:
        """Count a message that could not be read at all (it is named, never dropped quietly)."""
        self.counts.uids_seen += 1
        self.counts.errors += 1
        self.counts.error_details.append(f"{where}: {reason}")

    def _unreadable(self, where: str, reason: str) -> None:
        """An offered message (already seen) that ``prepare`` could not read."""
        self.counts.errors += 1
        self.counts.error_details.append(f"{where}: {reason}")

    def offer(self, item: Incoming) -> None:
        self.counts.uids_seen += 1
        self._chunk.append(item)
        self._queued += 1
        self._queued_bytes += item.nbytes
        if len(self._chunk) >= self._CHUNK:
            self._submit()
        if self._queued >= self.batch_size or self._queued_bytes >= self.batch_bytes:
            self._seal()

    def offer_known(self, record: dict[str, Any], where: Incoming) -> None:
        """A message whose content the store holds (``record`` from ``known_records``):
        recorded at its new location without its body."""
        self.counts.uids_seen += 1
        self._known.append((record, where))
        if self._queued + len(self._known) >= self.batch_size:
            self._seal()

    def offer_prepared(self, item: Incoming, prepared: Prepared) -> None:
        """A message whose body a worker fetched and prepared itself (``item`` names
        its place; its ``raw`` is empty): committed in order with the others."""
        self.counts.uids_seen += 1
        self._ready.append((item, prepared))
        self._queued += 1
        if self._queued >= self.batch_size:
            self._seal()

    def held(self, items: Sequence[Incoming]) -> dict[int, frozenset[str]] | None:
        """By position in ``items``: the contents on record at that place for a
        message deleted since (their bytes are left to ``_commit`` to write).

        The first ``_PROBE_PLACES`` places of a run are probed through the index
        (a cron sync of a few messages reads what it touches); a run past that
        reads every location of its source once instead. A run into a store that
        was empty when it began finds nothing there (as a run past the probes, it
        goes by what the store held when it first looked)."""
        if self._start_alone():
            return None
        if self._read_places and all(it.where in self._read_places for it in items):
            deleted = self._read_deleted
        elif self._deleted is None and self._probed + len(items) <= self._PROBE_PLACES:
            self._probed += len(items)
            rows = self.store.locations_at(self.source, [it.where for it in items], as_writer=True)
            deleted = deleted_among(self.store, rows)
        else:
            if self._deleted is None:
                self._deleted = self.store.deleted_contents(self.source)
            deleted = self._deleted
        if not deleted:
            return None
        found = {i: frozenset(s) for i, it in enumerate(items) if (s := deleted.get(it.where))}
        return found or None

    def _start_alone(self) -> bool:
        """Whether the store was empty when this run first looked (before its first
        commit): then nothing on record can be anything this run did not record."""
        if not self._started:
            self._started = True
            self._own_upto = 0 if self.store.log.last_seq() == 0 else None
        return self._own_upto is not None

    def _alone(self) -> bool:
        """Whether every event in the log is one this run committed, into a store
        empty when it began: what this run knows (``_owners``, ``_locs``) is then
        all there is on record, and no lookup can learn more. An import into a new
        store asked the projections twice a batch for what they could not hold:
        a quarter of its committing process's time, growing with the store.
        Another writer's commit ends it for the rest of the run (lookups as before)."""
        return self._start_alone() and self.store.log.last_seq() == self._own_upto

    def on_record(self, places: Iterable[tuple[Any, ...]], rows: Iterable[dict[str, Any]]) -> None:
        """``rows``: every location of this source on record at ``places`` (each a
        (folder, uidvalidity, uid, uidl)), asked by the caller in one query: ``held``
        and the lookups of the batches at those places take them from here rather
        than probing each chunk's and batch's places (the first sync of a folder of
        10,000 messages into 1,000,000 probed them 30 times: 0.6 s)."""
        if self._start_alone():
            return  # (nothing on record there but this run's)
        found = list(rows)
        self._locs.update(
            (
                digest(r["folder"], r["uidvalidity"], r["uid"], r["uidl"], r["sha256"]),
                flags_on_record(r),
            )
            for r in found
        )
        for where, shas in deleted_among(self.store, found).items():
            self._read_deleted.setdefault(where, set()).update(shas)
        asked = set(places) - self._read_places
        self._read_places |= asked
        self._places.update(digest(*p) for p in asked)

    def absent(
        self, ids: Iterable[str], upto: int | None, owners: Mapping[str, str] | None = None
    ) -> None:
        """``ids`` the store holds no message of, as its projections said when they
        held the log up to seq ``upto`` (None: not known, nothing is assumed): this
        run's lookups skip them while every event committed since is its own. A
        sync asks about all its envelopes at once (one scan); asking again per
        batch probed the index on ``messages.message_id`` ten times for 10,000
        messages into 1,000,000 (0.2-0.8 s and 64 MiB of index each).

        ``owners``: the ids it holds, with their source (``stored_ids``): not asked
        again either."""
        if owners:
            self._owners.update((digest(i), owner) for i, owner in owners.items())
        if upto is None:
            return
        self._absent = set(ids)
        self._absent_upto = upto

    def _committed(self, table: pa.Table) -> None:
        """Follow the seqs this run commits (see ``_alone`` and ``absent``)."""
        if not table.num_rows:
            return
        seqs = table.column("seq")
        first, last = seqs[0].as_py(), seqs[-1].as_py()
        if self._absent:
            if first == self._absent_upto + 1:
                self._absent_upto = last
            else:
                self._absent = set()  # another writer's events came between
        if self._own_upto is not None:
            self._own_upto = last if first == self._own_upto + 1 else None

    @property
    def blobs_root(self) -> str:
        return self._blobs_root

    def _submit(self) -> None:
        if self._ready:
            ready, self._ready = self._ready, []
            done = [p for _, p in ready]
            self._chunks.append(([it for it, _ in ready], Done(lambda: done)))
        chunk, self._chunk = self._chunk, []
        if not chunk:
            return
        held = self.held(chunk)
        work = [it.path if it.path is not None else it.raw for it in chunk]
        args = (work, self._blobs_root, held)
        fut = self.pool.submit(prepare, *args) if self.pool is not None else Done(prepare, *args)
        self._chunks.append((chunk, fut))

    def _seal(self) -> None:
        """Close the current batch. The oldest sealed batch is committed once more
        than ``lookahead`` wait, while the workers prepare the later ones: commits
        overlap parsing."""
        self._submit()
        self._sealed.append((self._chunks, self._known))
        self._chunks, self._known = [], []
        self._queued = self._queued_bytes = 0
        while len(self._sealed) > self._lookahead:
            self._commit(*self._sealed.popleft())

    def flush(self, extra: Sequence[Event] = ()) -> None:
        """Commit everything offered so far (with ``extra`` events after it) and fold
        it into the projections."""
        self._submit()
        while self._sealed:
            self._commit(*self._sealed.popleft())
        chunks, known = self._chunks, self._known
        self._chunks, self._known = [], []
        self._queued = self._queued_bytes = 0
        self._commit(chunks, known, extra)
        self._forget()
        self.store.catch_up()
        if self._unwanted:
            self.drop_unwanted()

    def _forget(self) -> None:
        """Let go of what this run has recorded (its ids, places and locations), once
        committed: the fold that follows a flush is, at the end of an import into a
        new store, the whole build of the projections, with a budget of its own.
        Offers after a flush ask the projections, which hold the run's messages by
        then (caught up by this flush)."""
        self._owners, self._locs, self._places, self._ghosts = {}, {}, set(), set()
        self._absent = set()
        self._started, self._own_upto = True, None  # (``_alone`` no more)

    def drop_unwanted(self) -> None:
        """Erase the blobs workers wrote for messages deleted after ``_deleted`` was
        read (see the class docstring), unless a stored message holds them now."""
        unwanted, self._unwanted = sorted(self._unwanted), set()
        try:
            keep = self.store.held_shas(unwanted)
        except Exception as exc:  # (the projections are busy): never erase in doubt
            log.warning("%d blobs of deleted messages left in place (%s)", len(unwanted), exc)
            return
        for sha in unwanted:
            if sha not in keep:
                self.store.blobs.delete(sha)

    def _commit(
        self,
        chunks: list[tuple[list[Incoming], Any]],
        known: list[tuple[dict[str, Any], Incoming]],
        extra: Sequence[Event] = (),
    ) -> None:
        """Decide, write the blobs left to this process, commit one batch."""
        items: list[Incoming] = []
        prepared: list[Prepared] = []
        for chunk, fut in chunks:
            items.extend(chunk)
            prepared.extend(fut.result())
        if not items and not known:
            if extra:
                self._committed(self.store.commit(list(extra), apply=False))
                self.counts.events += len(extra)
            return
        fresh_before = list(self._fresh)
        fresh: set[str] = set()
        self._fresh.append(fresh)
        c = self.counts
        read: list[tuple[Incoming, ParsedMessage, Prepared]] = []
        for it, r in zip(items, prepared, strict=True):
            if r.parsed is None:
                self._unreadable(it.path or "?", r.error or "unreadable")
            else:
                p = r.parsed
                if it.message_id is not None:
                    p = with_id(p, it.message_id)
                read.append((it, p, r))
        self._lookup(
            [p.message_id for _, p, _ in read] + [r["message_id"] for r, _ in known],
            [it.where for it, _, _ in read] + [it.where for _, it in known],
        )
        if read:
            # written or found by prepare (perhaps in a worker): flushed before the commit
            self.store.blobs.mark_dirty()
        known_locs = self._locs
        events: list[Event] = []
        for it, p, r in read:
            c.processed += 1
            c.bytes_read += p.size
            if p.defects:
                c.malformed += 1
            key = digest(it.folder, it.uidvalidity, it.uid, it.uidl, p.sha256)
            if key in known_locs and (
                digest(p.message_id) not in self._owners or p.message_id in self._ghosts
            ):
                # on record at this location, and deleted since (perhaps purged): no
                # event will name these bytes, so they must not come back as a blob
                written = False
                self._ghosts.add(p.message_id)
                if r.written:  # deleted after the snapshot the worker went by
                    self._unwanted.add(p.sha256)
            else:
                self._unwanted.discard(p.sha256)
                if r.blob is not None:
                    written = self.store.blobs.put_encoded(p.sha256, r.blob)
                else:
                    written = r.written and p.sha256 not in fresh
                    written = written and not any(p.sha256 in f for f in fresh_before)
                if written:
                    fresh.add(p.sha256)
            if written or self.network:
                c.bodies_fetched += 1
            else:
                c.known_skipped += 1
            self._count_owner(p.message_id)
            if key in known_locs:
                # this very location and content are on record already: its flags may
                # have changed (a message of a deleted one's: nothing to record)
                if p.message_id not in self._ghosts:
                    self._flags_shown(events, key, it, p.message_id)
                continue
            known_locs[key] = it.flags
            self._ghosts.discard(p.message_id)  # stored again: an event names it
            events.append(self.store.events.seen(p, **self._place(it)))
        for rec, it in known:
            c.processed += 1
            c.known_skipped += 1
            self._unwanted.discard(rec["sha256"])
            self._count_owner(rec["message_id"])
            key = digest(it.folder, it.uidvalidity, it.uid, it.uidl, rec["sha256"])
            if key in known_locs:
                self._flags_shown(events, key, it, rec["message_id"])
                continue
            known_locs[key] = it.flags
            events.append(self.store.events.seen_again(rec, **self._place(it)))
        events.extend(extra)
        if events:
            # durable now; folded into the projections at flush (one fold for many
            # batches is far cheaper than one per batch)
            self._committed(self.store.commit(events, apply=False))
            c.events += len(events)

    def _place(self, it: Incoming) -> dict[str, Any]:
        """Where this source showed ``it``, as the event factory takes it."""
        return {
            "source": self.source,
            "folder": it.folder,
            "uidl": it.uidl,
            "uidvalidity": it.uidvalidity,
            "uid": it.uid,
            "internal_date": it.internal_date,
            "flags": it.flags,
        }

    def _flags_shown(self, events: list[Event], key: bytes, it: Incoming, message_id: str) -> None:
        """A message seen again at a location on record (``key``): a ``flags-changed``
        when the source shows flags there other than those on record (a source that
        shows none changes nothing)."""
        if it.flags is None or self._locs.get(key) == it.flags:
            return
        self._locs[key] = it.flags
        place = self._place(it)
        del place["internal_date"]
        events.append(self.store.events.flags_changed(message_id=message_id, **place))
        self.counts.flags_changed += 1

    def _count_owner(self, message_id: str) -> None:
        c = self.counts
        key = digest(message_id)
        owner = self._owners.get(key)
        if owner is None:
            c.new_messages += 1  # (or known content whose record was deleted since)
            self._owners[key] = self.source
        elif owner == self.source:
            c.duplicates += 1
        else:
            c.conflicts_other_source += 1

    def _lookup(self, ids: list[str], places: list[tuple[Any, ...]]) -> None:
        """Learn, for ids and places this run has not met yet, which source owns
        each id and which (place, sha) keys of this source are on record: probed
        through the indexes, so a batch reads what it touches, not the store."""
        if self._absent and self.store.log.last_seq() != self._absent_upto:
            self._absent = set()  # another writer has committed since: ask again
        new_ids = sorted(
            {i for i in ids if digest(i) not in self._owners and i not in self._absent}
        )
        new_places = sorted({p for p in places if digest(*p) not in self._places}, key=repr)
        if not new_ids and not new_places:
            return
        if self._alone():
            # nothing on record there but this run's
            self._places.update(digest(*p) for p in new_places)
            return
        # Projections may lag while a bulk run defers its fold; what this run
        # committed itself is in self._owners / self._locs already.
        if new_ids:
            stored = self.store.stored_ids(new_ids, as_writer=True)
            self._owners.update((digest(i), owner) for i, owner in stored.items())
        if new_places:
            for r in self.store.locations_at(self.source, new_places, as_writer=True):
                key = digest(r["folder"], r["uidvalidity"], r["uid"], r["uidl"], r["sha256"])
                self._locs[key] = flags_on_record(r)
            self._places.update(digest(*p) for p in new_places)

"""``MessageStore``: the API handlers and scripts use (README, "The store").

Every write goes through the event log (blobs first, then one atomic commit,
then the projections fold the new events); every read goes through the
projections. A store is a directory::

    STORE/log/*.parquet        the events: the truth
    STORE/blobs/               raw messages by sha256, compressed (packs of many,
                               or a file each): the truth
    STORE/projections.duckdb   derived; delete it and ``replay`` restores it
    STORE/fulltext.sqlite      derived too: the text of every stored message, indexed
    STORE/cursors.json         derived too: the cursors and counts a sync that finds
                               nothing new and ``stats`` read without opening the store
    STORE/cache/asof-SEQ.duckdb  derived: the projections as they stood after event SEQ
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import random
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from pipeline import upkeep
from pipeline.clock import Clock, new_run_id
from pipeline.event_factory import EventFactory
from pipeline.progress import NO_PROGRESS, Progress
from projections import queries
from projections.projector import Projector
from stores.blobs import BlobStore
from stores.errors import UsageError
from stores.events import Event
from stores.log import EventLog
from stores.marker import check_marker

if TYPE_CHECKING:
    from datetime import datetime
    from email.message import EmailMessage

    from projections.past import PastProjections
    from stores.purge import PurgeReport

__all__ = ["MessageStore", "PastStore"]

log = logging.getLogger("mailledger.store")


class MessageStore:
    """A mail store backed by an event log; open it with ``MessageStore.open(path)``.

    A facade: writes go to the log (blobs first), the ``projector`` folds them
    into the projections, and every read is a function of ``projections.queries``
    run on a connection the projector hands out.
    """

    def __init__(self, root: Path, *, clock: Clock, run_id: str) -> None:
        self.root = Path(root)
        self.clock = clock
        self.run_id = run_id
        self.events = EventFactory(self.clock, self.run_id)
        self.log = EventLog(self.root / "log")
        self.blobs = BlobStore(self.root / "blobs")
        self.projector = Projector(self.root, self.log, self.blobs)
        self.fenced: dict[str, Any] = {}  # the writer epoch taken (``take_epoch``)

    # -- lifecycle ------------------------------------------------------------
    @classmethod
    def open(
        cls,
        root: Path | str,
        *,
        create: bool = True,
        clock: Clock | None = None,
        run_id: str | None = None,
        check: bool = True,
    ) -> MessageStore:
        """Open the store at ``root`` (created when ``create`` and absent).

        ``check``: refuse a damaged log at once, naming the file (LogIntegrityError);
        ``verify`` opens without it so that it can list every problem. ``clock``:
        None for the composition root's (``pipeline.bootstrap``: a script's store).
        """
        root = Path(root)
        check_marker(root, create=create)
        if clock is None:
            from pipeline.bootstrap import App

            clock = App({}).clock
        return _opened(cls(root, clock=clock, run_id=run_id or new_run_id(clock)), check=check)

    def close(self) -> None:
        """Release the projection database so other processes can open it."""
        self.projector.close()

    @contextlib.contextmanager
    def session(self) -> Iterator[MessageStore]:
        """Keep the projection database open across many calls (a script doing
        thousands of lookups). Other processes cannot write meanwhile: keep it short."""
        with self.projector.session():
            yield self

    def __enter__(self) -> MessageStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
        self.blobs.close()  # (the blob index's file too: done with the store)
        self.log.settle()  # (the small-file merge its commits asked for, made)

    # -- writing --------------------------------------------------------------
    def commit(self, events: Sequence[Event], *, apply: bool = True) -> pa.Table:
        """Make the batch's blobs durable, commit the events (``stores.fence``: cursor
        moves compared), fold them into projections; ``apply=False`` leaves the fold
        for a later ``catch_up()`` (readers catch up by themselves meanwhile)."""
        flush, fence = self.blobs.flush, self.fenced
        with self.projector.hold():
            table = self.log.append(events, before_commit=flush, compare_cursors=True, **fence)
            self.projector.committed(table, fold=apply)
            return table

    def take_epoch(self, holder: str, producer: str | None = None) -> int:
        """The store's (or ``producer``'s) one committer from now on (``stores.fence``):
        earlier ones are refused (StaleEpochError), whatever a scheduler thinks."""
        epoch = self.log.take_epoch(holder, producer)
        self.fenced = {"epoch": epoch, "producer": producer}
        return epoch

    def catch_up(self) -> int:
        """Fold every committed event the projections have not seen; returns their seq."""
        return self.projector.catch_up()

    def add(
        self,
        uidl: str | None,
        raw_bytes: bytes,
        *,
        source: str = "api",
        folder: str = "",
        message_id: str | None = None,
    ) -> str:
        """Store one message (the legacy program's API); returns its Message-ID.

        An id already in the store keeps its first record; this adds a location.
        ``message_id`` overrides the parsed id (the legacy UIDL import uses it); it
        may not hold whitespace (the header index separates ids by a space).
        """
        if message_id is not None and (not message_id or any(c.isspace() for c in message_id)):
            raise UsageError(f"a Message-ID may not be empty or hold whitespace: {message_id!r}")
        from pipeline.parse import parse_message  # (email's parser: not every command's)

        parsed = parse_message(raw_bytes)
        if message_id is not None:
            parsed = dataclasses.replace(parsed, message_id=message_id, synthetic_id=True)
        self.blobs.put(raw_bytes, parsed.sha256)
        self.commit([self.events.seen(parsed, source=source, folder=folder, uidl=uidl)])
        return parsed.message_id

    def delete(self, msg_id: str, *, reason: str = "", actor: str = "api") -> bool:
        """Drop a message from the store; False if it was not there."""
        with self.projector.hold():
            rec = self.get(msg_id)
            if rec is not None:
                self.commit([self.events.deleted(rec["message_id"], actor=actor, reason=reason)])
            return rec is not None

    # -- what a writer asks (``as_writer``: see ``Projector.reader``) --------------
    def deleted_contents(self, source: str) -> dict[tuple[Any, ...], set[str]]:
        """(folder, uidvalidity, uid, uidl) -> sha256s on record at that location of
        ``source`` for a message no longer stored, as this store's writer sees them."""
        return self.projector.read(queries.deleted_contents, source, as_writer=True)

    def held_shas(self, shas: list[str]) -> set[str]:
        """Those of ``shas`` a stored message holds, as this store's writer sees them."""
        return self.projector.read(queries.held_shas, shas, as_writer=True)

    def holds_messages(self) -> bool:
        """True when the store holds a message (or committed one not folded yet)."""
        return self.projector.unfolded > 0 or self.projector.read(queries.has_messages)

    def known_records(
        self, pairs: Sequence[tuple[str, int]], *, owners: dict[str, str] | None = None
    ) -> dict[tuple[str, int], dict[str, Any]]:
        """Primary records matching (Message-ID, size) pairs: content the store holds
        (``owners``: filled with the source of each asked id held, whatever its size)."""
        return self.projector.read(queries.known_records, self.log, pairs, owners) if pairs else {}

    def locations_at(
        self,
        source: str,
        places: Sequence[tuple[str, int | None, int | None, str | None]],
        *,
        as_writer: bool = False,
        columns: str = "*",
    ) -> list[dict[str, Any]]:
        """The ``locations`` rows at ``places`` (folder, uidvalidity, uid, uidl) of ``source``."""
        if not places:
            return []
        args = (source, places, columns)
        return self.projector.read(queries.locations_at, *args, as_writer=as_writer)

    def held_pool(
        self, account: str, folder: str, uidvalidity: int, last_uid: int, rng: random.Random
    ) -> dict[int, tuple[str, str, int | None]]:
        """A probe of the UIDs a folder holds (see ``queries.held_pool``)."""
        return self.projector.read(queries.held_pool, account, folder, uidvalidity, last_uid, rng)

    def locations_in(
        self, source: str, spans: Sequence[tuple[str, int, int | None]]
    ) -> list[dict[str, Any]]:
        """The ``locations`` rows of ``source`` in each (folder, uidvalidity, highest UID)."""
        return self.projector.read(queries.locations_in, source, spans) if spans else []

    def stored_ids(self, ids: Sequence[str], *, as_writer: bool = False) -> dict[str, str]:
        """Of ``ids``, those the store holds, with the source that first stored each."""
        return self.projector.read(queries.stored_ids, ids, as_writer=as_writer)

    def folder_cursors(self, account: str) -> list[dict[str, Any]]:
        """The sync cursor of every folder of ``account`` the store has synced."""
        return self.projector.read(queries.folder_cursors, account)

    def cursor(self, account: str, folder: str) -> dict[str, Any] | None:
        """The sync cursor of (account, folder), or None before the first sync."""
        return self.projector.read(queries.cursor, account, folder)

    def cursor_log(self, account: str, folder: str) -> list[dict[str, Any]]:
        """Every move of a folder's cursor, oldest first, straight from the log."""
        return self.query(queries.CURSOR_LOG, [account, folder]).to_pylist()

    def contains_uidl(self, uidl: str) -> bool:
        return self.projector.read(queries.contains_uidl, uidl)

    def known_uidls(
        self, source: str, uidls: Sequence[str], *, legacy: bool = True
    ) -> dict[str, list[dict[str, Any]]]:
        """What the store knows of each POP3 UIDL (see ``queries.known_uidls``)."""
        args = (source, uidls, legacy, self.query)
        return self.projector.read(queries.known_uidls, *args) if uidls else {}

    def uidls(self) -> list[str]:
        """Every UIDL ever downloaded (the legacy program's ``_uidls``)."""
        return self.projector.read(queries.uidls)

    # -- reading --------------------------------------------------------------
    def get(self, msg_id: str) -> dict[str, Any] | None:
        """The primary record of ``msg_id`` (with or without angle brackets), or None."""
        return self.projector.read(queries.message, self.log, msg_id)

    def raw(self, msg_id: str) -> bytes:
        """The message's raw bytes, checked against its sha256."""
        return self.blobs.get(self.projector.read(queries.message_sha, msg_id))

    def message(self, msg_id: str) -> EmailMessage:
        """The message parsed as an ``email.message.EmailMessage``."""
        return _parsed(self.raw(msg_id))

    def message_ids(self) -> list[str]:
        return self.projector.read(queries.message_ids)

    def find(self, header: str, value: str) -> list[str]:
        """Message-IDs whose ``header`` matches ``value`` after the index normalization."""
        if queries.find_key(header, value) is None:  # (a usage error: before any hold)
            return []
        return self.projector.read(queries.find_ids, header, value)

    def listing(self, ids: Sequence[str]) -> list[str]:
        """``find``'s plain lines for ``ids``, in their order (see ``queries.listing``)."""
        return self.projector.read(queries.listing, ids) if ids else []

    def find_listing(self, header: str, value: str) -> pa.ChunkedArray:
        """``find``'s plain listing as an Arrow string column, a line per hit."""
        queries.find_key(header, value)  # (a usage error: before any hold)
        return self.projector.read(queries.find_listing, header, value)

    def message_rows(self, ids: Sequence[str], columns: str = "*") -> list[dict[str, Any]]:
        """``columns`` of the primary records of ``ids`` (those stored), in one query."""
        return self.projector.read(queries.message_rows, ids, columns) if ids else []

    def walk_thread(self, msg_id: str) -> list[str]:
        """Every stored message of ``msg_id``'s thread, oldest first (undated last)."""
        return self.projector.read(queries.thread_of, msg_id)

    def thread_tree(self, msg_id: str) -> list[queries.ThreadNode]:
        """The tree of ``msg_id``'s thread, ghosts included: its roots."""
        return self.projector.read(queries.thread_tree, msg_id)

    def search(
        self,
        plan: queries.SearchPlan,
        output: queries.Output = "summary",
        *,
        sort: queries.Sort = "newest",
        limit: int | None = None,
        offset: int = 0,
    ) -> pa.Table:
        """The answer to a compiled search query (``queries.compile_query``), in
        one query over the projections (see ``queries.search_table``) and the
        full-text index, brought up to them first, when the query reads it."""
        return self.projector.read_text(queries.search_table, plan, output, sort, limit, offset)

    def export_page(
        self, plan: queries.SearchPlan, after: int, limit: int, variants: bool = False
    ) -> list[queries.ExportRow]:
        """A page of the matches of ``plan`` an export writes (``queries.export_page``)."""
        return self.projector.read_text(queries.export_page, plan, after, limit, variants)

    def query(self, sql: str, params: Sequence[Any] | None = None) -> pa.Table:
        """Run SQL over the projections and the ``events`` view of the log."""
        return self.projector.query(sql, params)

    # -- the past (``--as-of``) -------------------------------------------------
    def seq_at(self, when: datetime) -> int:
        """The seq of the last event recorded at or before ``when`` (0: none was)."""
        return self.log.seq_at(when)

    def as_of(self, seq: int) -> PastStore:
        """The store as it stood after event ``seq``, for reading (``PastStore``):
        projections replayed up to it into the store's cache, the live ones untouched."""
        return PastStore(self.projector.as_of(seq, purging=self.purge_journal.exists))

    # -- upkeep ---------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        return upkeep.stats(self)

    def verify(self, *, blobs: bool = True, progress: Progress = NO_PROGRESS) -> list[str]:
        """Problems found: log damage, missing or corrupt blobs, projections that drifted."""
        return upkeep.verify(self, blobs=blobs, progress=progress)

    def reindex(self, *, progress: Progress = NO_PROGRESS, text: bool = False) -> int:
        """Rebuild every projection from the log (= ``mailledger replay``; ``text``:
        the full-text index too, from the blobs); returns last seq."""
        told = progress is not NO_PROGRESS
        on_phase = (lambda label: progress.start(None, label, unit=None)) if told else None
        return self.projector.reindex(on_phase=on_phase, text=text)

    def compact(self, target_rows: int = 100_000) -> tuple[int, int]:
        """Merge small log files and the projections' deltas: see ``upkeep.compact``."""
        return upkeep.compact(self, target_rows)

    @property
    def purge_journal(self) -> Path:
        return self.root / "purge-journal.json"

    def purge(self) -> PurgeReport:
        """Erase deleted messages for good (``compact --purge``): see ``upkeep.purge``."""
        return upkeep.purge(self)


class PastStore:
    """The reads ``search``, ``thread`` and ``query`` make, answered by the
    projections as they stood after an earlier event (``MessageStore.as_of``)."""

    def __init__(self, past: PastProjections) -> None:
        self.past = past
        self.seq = past.seq

    def __enter__(self) -> PastStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.past.close()

    def search(
        self,
        plan: queries.SearchPlan,
        output: queries.Output = "summary",
        *,
        sort: queries.Sort = "newest",
        limit: int | None = None,
        offset: int = 0,
    ) -> pa.Table:
        """As ``MessageStore.search``, then (structured terms only: the full-text
        index is kept for the present)."""
        if plan.text:
            raise UsageError(
                "--as-of answers structured terms only: words, phrases, body:, filename:"
                " and has:attachment read the full-text index, which is not kept for the past"
            )
        return self.past.read(queries.search_table, plan, output, sort, limit, offset)

    def walk_thread(self, msg_id: str) -> list[str]:
        """As ``MessageStore.walk_thread``, then."""
        return self.past.read(queries.thread_of, msg_id)

    def thread_tree(self, msg_id: str) -> list[queries.ThreadNode]:
        """As ``MessageStore.thread_tree``, then."""
        return self.past.read(queries.thread_tree, msg_id)

    def query(self, sql: str, params: Sequence[Any] | None = None) -> pa.Table:
        """As ``MessageStore.query``, then: the ``events`` view ends at that event."""
        return self.past.query(sql, params)


def _opened(store: MessageStore, *, check: bool) -> MessageStore:
    """``store``, its directories made, what killed writers left removed, its log
    checked (``check``), a purge that never finished named."""
    store.log.create()
    store.blobs.create()
    with contextlib.suppress(OSError):  # partial blobs of writers killed midway
        store.blobs.clean_tmp()
    store.projector.files.remove_dead()
    if check:
        store.log.check()
    _warn_of_purge(store.purge_journal)
    return store


def _parsed(raw: bytes) -> EmailMessage:
    import email
    import email.policy
    from email.message import EmailMessage

    msg = email.message_from_bytes(raw, policy=email.policy.default)
    assert isinstance(msg, EmailMessage)
    return msg


def _warn_of_purge(journal: Path) -> None:
    if journal.exists():
        log.warning(
            "%s: a purge is running or was interrupted; `mailledger compact --purge` finishes it",
            journal.parent,
        )

"""``MessageStore``: the API handlers and scripts use (README, "The store").

Every write goes through the event log (blobs first, then one atomic commit,
then the projections fold the new events); every read goes through the
projections. A store is a directory::

    STORE/log/*.parquet        the events: the truth
    STORE/blobs/               raw messages by sha256, compressed (packs of many,
                               or a file each): the truth
    STORE/projections.duckdb   derived; delete it and ``replay`` restores it
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import functools
import itertools
import json
import logging
import os
import shutil
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import duckdb
import pyarrow as pa

from pipeline.clock import Clock, SystemClock, new_run_id
from pipeline.event_factory import EventFactory
from pipeline.progress import NO_PROGRESS, Progress
from projections.fold import (
    FOLD_SCHEMA,
    REBUILD_PHASES,
    applied_seq,
    apply_chunks,
    hash_probe,
    key_hash,
    location_key,
    meta_values,
    rebuild,
    thread_counts,
)
from projections.lookup import INDEX_KEYS_MAX, rows_where_in
from projections.normalize import index_value, normalize_header_name, normalize_msgid
from projections.tables import (
    PROJECTION_VERSION,
    create_query_views,
    events_source,
    events_sql,
    fingerprint,
)
from stores import db
from stores.atomic import create_once, unique_name
from stores.blobs import BlobStore
from stores.errors import LockTimeout, LogIntegrityError, NotFoundError, UsageError
from stores.events import Event
from stores.log import EventLog, read_columns

if TYPE_CHECKING:
    from email.message import EmailMessage

    from stores.purge import PurgeReport

__all__ = ["MessageStore"]

log = logging.getLogger("mailledger.store")

_FORMAT = {"format": "mailledger-store", "version": 1}
_REPLAY_CHUNK = 50_000
# what a fold reads of the log: everything but the decoded headers (kept in the log only)
_FOLD_COLUMNS = FOLD_SCHEMA.names
# a deferred fold runs before the events it waits for hold this much memory
_FOLD_BYTES = 128 << 20


_F = TypeVar("_F", bound=Callable[..., Any])


def _uses_db(fn: _F) -> _F:
    """Release the projection database when the outermost store call returns.

    DuckDB lets a process that has the file open for writing keep every other
    process out, even readers; so a store holds it only for one operation
    (or for the span of an explicit ``with store.session():``).
    """

    @functools.wraps(fn)
    def wrapper(self: MessageStore, *args: Any, **kwargs: Any) -> Any:
        self._depth += 1
        try:
            return fn(self, *args, **kwargs)
        finally:
            self._depth -= 1
            if self._depth == 0 and not self._held:
                self.close()

    return wrapper  # type: ignore[return-value]


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
_FEW_PLACES = 100_000


class MessageStore:
    """A mail store backed by an event log; open it with ``MessageStore.open(path)``."""

    def __init__(
        self, root: Path, *, clock: Clock | None = None, run_id: str | None = None
    ) -> None:
        self.root = Path(root)
        self.clock: Clock = clock or SystemClock()
        self.run_id = run_id or new_run_id(self.clock)
        self.events = EventFactory(self.clock, self.run_id)
        self.log = EventLog(self.root / "log")
        self.blobs = BlobStore(self.root / "blobs")
        self.db_path = self.root / "projections.duckdb"
        self._con: duckdb.DuckDBPyConnection | None = None
        self._con_rw = False
        self._depth = 0
        self._held = 0
        # committed batches not yet folded: (first seq, last seq, the rows without their
        # headers, or None once the pending rows passed _FOLD_BYTES: read again then)
        self._unapplied: list[tuple[int, int, pa.Table | None]] = []
        self._unapplied_bytes = 0  # of the rows ``_unapplied`` still holds
        self.fold_every = 10_000  # events: a deferred fold runs at least this often
        # a deferred fold may also wait for this share of the events folded so far: a
        # fold costs in part what it touches of the store, so a bulk writer (an
        # import) that folds in steps growing with the store pays the same per message
        # into a large store as into a small one
        self.fold_share = 0.0
        self._folded = 0  # the seq the projections were at after this store's last fold
        # the applied seq this store last saw the projections at, when it was the log's end
        self._applied_seen: int | None = None
        # bytes a rebuild (replay, verify) may use in all; None: db.default_budget()
        self.memory_budget: int = db.default_budget()
        self._views_ok = False  # the file's events view is known to read this log

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
        ``verify`` opens without it so that it can list every problem.
        """
        root = Path(root)
        marker = root / "store.json"
        if not marker.exists():
            if not create:
                raise NotFoundError(f"{root}: no mailledger store here")
            _create_marker(root, marker)
        meta = json.loads(marker.read_text())
        if meta.get("format") != _FORMAT["format"] or meta.get("version") != 1:
            raise UsageError(f"{marker}: unknown store format {meta!r}")
        store = cls(root, clock=clock, run_id=run_id)
        store.log.create()
        store.blobs.create()
        with contextlib.suppress(OSError):  # partial blobs of writers killed midway
            store.blobs.clean_tmp()
        store._remove_dead_builds()
        if check:
            store.log.check()
        if store.purge_journal.exists():
            log.warning(
                "%s: a purge is running or was interrupted; `mailledger compact --purge`"
                " finishes it",
                root,
            )
        return store

    def close(self) -> None:
        """Release the projection database so other processes can open it."""
        if self._con is not None:
            db.release(self._con)
            self._con = None
            self._con_rw = False

    @contextlib.contextmanager
    def session(self) -> Iterator[MessageStore]:
        """Keep the projection database open across many calls (a script doing
        thousands of lookups). Other processes cannot write meanwhile: keep it short."""
        self._held += 1
        try:
            yield self
        finally:
            self._held -= 1
            if not self._held and not self._depth:
                self.close()

    def __enter__(self) -> MessageStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
        self.blobs.close()  # (the blob index's file too: done with the store)

    # -- projection database ----------------------------------------------------
    def _writer(self) -> duckdb.DuckDBPyConnection:
        if self._con is not None and not self._con_rw:
            self.close()
        if self._con is None:
            if not self.db_path.exists():
                self._create_projections()
            self._con = db.connect(self.db_path, read_only=False)
            self._con_rw = True
            if not _current(self._con):
                # built by another version: rebuilt beside the file and swapped in
                self.close()
                self.reindex()
                self._con = db.connect(self.db_path, read_only=False)
                self._con_rw = True
            if not self._views_ok:
                self._persist_views(self._con)
        return self._con

    def _reader(self, *, stale_ok: bool = False) -> duckdb.DuckDBPyConnection:
        """A connection whose projections are caught up with the log.

        ``stale_ok``: projections may lag the log (a writer batching its applies
        that remembers what it committed itself); no catch-up is forced.
        """
        if self._con is None:
            if self.db_path.exists():
                con = db.connect(self.db_path, read_only=True)
                meta = meta_values(con)  # (one query for the three values)
                if _current_meta(con, meta):
                    applied, last = meta.get("applied_seq", 0), self.log.last_seq()
                    if applied == last or (stale_ok and self._lag_is_ours(applied, last)):
                        if self._views_current(con, last):
                            if applied == last:
                                self._applied_seen = applied
                            self._con, self._con_rw = con, False
                            return con
                        db.release(con)
                        return self._mend_views()
                db.release(con)
            try:
                self._catch_up(self._writer())
            except BaseException:
                # (the fold rolled back) never keep a hold whose projections lag:
                # the next read would take it as caught up
                self.close()
                raise
        assert self._con is not None
        return self._con

    def _mend_views(self) -> duckdb.DuckDBPyConnection:
        """Projections current, but the views for stock DuckDB read another place (the
        store moved): made again through the writer. A store that cannot be written
        (a read-only copy) is still read: the views are a convenience for other tools."""
        try:
            self._catch_up(self._writer())
        except (duckdb.Error, OSError, LockTimeout) as exc:
            self.close()
            log.warning("%s: the views for stock DuckDB read another place: %s", self.db_path, exc)
            self._views_ok = True  # (not tried again by this store object)
            self._con, self._con_rw = db.connect(self.db_path, read_only=True), False
        assert self._con is not None
        return self._con

    def _nothing_to_fold(self) -> bool:
        """True when this store saw the projections hold the whole log, has committed
        nothing since and the log has not grown: a catch-up (the end of every sync,
        an idle one too) would take the write hold only to learn that, and wait for
        every other process reading the store to let go first."""
        return (
            not self._unapplied
            and self._views_ok
            and self._applied_seen is not None
            and self._applied_seen == self.log.last_seq()
        )

    @property
    def caught_up_seq(self) -> int | None:
        """The log's last seq when this store last saw the projections hold all of
        it (None: never seen so)."""
        return self._applied_seen

    def _lag_is_ours(self, applied: int, last: int) -> bool:
        """True when every event the projections lack is one this store committed and
        remembers (the log up to ``last``, its own batches contiguous). A lag left by
        another process (one killed before its fold, say) is not: a writer deciding
        from such projections would record again locations already in the log."""
        expected = applied + 1
        for first, end, _ in self._unapplied:
            if first > expected:
                return False  # another writer's batch between two of ours
            expected = max(expected, end + 1)
        return bool(self._unapplied) and expected == last + 1

    def _catch_up(self, con: duckdb.DuckDBPyConnection) -> None:
        seq = applied_seq(con)
        last = self.log.last_seq()
        if seq > last:  # (a directory's attributes may be stale: look again before blaming)
            last = self.log.last_seq(fresh=True)
        if seq > last:
            raise LogIntegrityError(
                f"{self.db_path}: projections are at seq {seq} but the log ends at {last}"
            )
        pending, self._unapplied = self._unapplied, []
        self._unapplied_bytes = 0
        if seq < last:
            chunks: Iterable[pa.Table]
            held = [t for _, _, t in pending if t is not None]
            contiguous = all(b[0] == a[1] + 1 for a, b in itertools.pairwise(pending))
            if pending and len(held) == len(pending) and contiguous and pending[0][0] <= seq + 1:
                # the batches this store committed itself, still in memory: no re-read
                chunks = itertools.chain(held, self._log_chunks(after=pending[-1][1]))
            else:
                chunks = self._log_chunks(after=seq)
            apply_chunks(con, chunks)  # one fold for all of them: its cost is mostly per call
        self._folded = max(seq, last)
        if not self._views_ok:  # (the log's first events: the view reads them now)
            self._persist_views(con)
        self._applied_seen = max(seq, last)

    def _rebuild(
        self, con: duckdb.DuckDBPyConnection, scratch: Path, progress: Progress = NO_PROGRESS
    ) -> int:
        files = self.log.files()
        events = files[-1].last if files else 0

        def phase(i: int, name: str) -> None:
            label = f"replay of {events:,} events, {i}/{len(REBUILD_PHASES)}: {name}"
            progress.start(None, label, unit=None)

        return rebuild(
            con,
            self._log_chunks(),
            files=[f.path for f in files],
            scratch=scratch,
            builders=db.builders(self.memory_budget),
            phase=phase if progress is not NO_PROGRESS else None,
        )

    def _build_connection(self, path: Path) -> duckdb.DuckDBPyConnection:
        """A connection to a new projection file for a rebuild (replay, verify), its
        DuckDB memory within the store's budget (the rest is this process's own)."""
        config = dict(db.CONFIG)
        config["memory_limit"] = f"{db.duckdb_share(self.memory_budget) >> 20}MiB"
        config["temp_directory"] = str(path) + ".tmp"
        return duckdb.connect(str(path), config=config)

    def _log_chunks(self, after: int = 0) -> Iterator[pa.Table]:
        files = [f for f in self.log.files() if f.last > after]
        while files:
            group, rows = [], 0
            while files and (not group or rows + files[0].rows <= _REPLAY_CHUNK):
                f = files.pop(0)
                group.append(f)
                rows += f.rows
            yield self._read_range(group)

    def _read_range(self, group: Sequence[Any]) -> pa.Table:
        """The events of files ``group`` (a compaction may have merged them since
        they were listed: then read the same seq range from a fresh listing)."""
        try:
            parts = [read_columns(f.path, FOLD_SCHEMA) for f in group]
        except FileNotFoundError:
            first, last = group[0].first, group[-1].last
            return self.log.read(after=first - 1).slice(0, last - first + 1)
        return pa.concat_tables(parts).replace_schema_metadata(None)

    # -- writing --------------------------------------------------------------
    @_uses_db
    def commit(self, events: Sequence[Event], *, apply: bool = True) -> pa.Table:
        """Make the batch's blobs durable, commit the events, fold them into projections.

        ``apply=False`` leaves the fold for a later ``catch_up()`` (a bulk writer
        folds many batches at once); readers catch up by themselves meanwhile.
        """
        table = self.log.append(events, before_commit=self.blobs.flush)
        if not table.num_rows:
            return table
        seqs = table.column("seq")
        # kept for the next fold without the headers, which no fold reads
        rows = table.select(_FOLD_COLUMNS)
        self._unapplied.append((seqs[0].as_py(), seqs[-1].as_py(), rows))
        # (a running sum: summing every held table at each commit cost an import
        # into 1,000,000 messages about 25 s, growing with the rows held)
        self._unapplied_bytes += rows.nbytes
        if self._unapplied_bytes >= _FOLD_BYTES:
            # memory stays bounded: the fold reads these rows from the log again
            self._unapplied = [(a, b, None) for a, b, _ in self._unapplied]
            self._unapplied_bytes = 0
        pending = sum(b - a + 1 for a, b, _ in self._unapplied)
        due = pending >= max(self.fold_every, int(self.fold_share * self._folded))
        # A store with no projections yet (a new store an import fills) has them
        # built once, from the whole log, as a replay builds them, when first read
        # or at the writer's catch_up: a replay's cost per event is flat from 100k
        # to 1M events (bench-scale), where each fold into tables that grow with
        # the store costs more than the one before.
        if apply or (due and self.db_path.exists()):
            self.catch_up()
        return table

    @_uses_db
    def catch_up(self) -> int:
        """Fold every committed event the projections have not seen; returns their seq."""
        if self._nothing_to_fold():
            assert self._applied_seen is not None
            return self._applied_seen
        try:
            con = self._writer()
            self._catch_up(con)  # applies this batch (and any a crash left unapplied)
        except (LockTimeout, duckdb.IOException, duckdb.TransactionException) as exc:
            # The events are durable; only the projections lag (another process holds
            # the database, or the disk is full). They catch up at the next open: a
            # committed write must never be reported as a failed one.
            self.close()
            log.warning("projections not updated now (%s); they catch up later", exc)
            return -1
        except BaseException:
            self.close()  # (rolled back) no hold is kept whose projections lag
            raise
        seq = applied_seq(con)
        if self._held:
            self.close()  # inside a session: give the write lock back at once
        return seq

    @_uses_db
    def deleted_contents(self, source: str) -> dict[tuple[Any, ...], set[str]]:
        """(folder, uidvalidity, uid, uidl) -> sha256s on record at that location of
        ``source`` for a message no longer stored (deleted, perhaps purged). Read
        as a writer that remembers what it committed itself (``stale_ok``)."""
        con = self._reader(stale_ok=True)
        (n,) = con.execute("SELECT count(*) FROM locations WHERE source = ?", [source]).fetchall()[
            0
        ]
        sql = _DELETED_FEW if n <= _FEW_PLACES else _DELETED_MANY
        out: dict[tuple[Any, ...], set[str]] = {}
        for folder, uidvalidity, uid, uidl, sha in con.execute(sql, [source]).fetchall():
            out.setdefault((folder, uidvalidity, uid, uidl), set()).add(sha)
        return out

    @_uses_db
    def held_shas(self, shas: list[str]) -> set[str]:
        """Those of ``shas`` a stored message holds (at any location of any source),
        as a writer that remembers what it committed itself sees them."""
        con = self._reader(stale_ok=True)
        con.register("_q_sha", pa.table({"sha": pa.array(shas, pa.string())}))
        try:
            rows = con.execute(
                "SELECT DISTINCT sha256 FROM locations WHERE sha256 IN (SELECT sha FROM _q_sha)"
                " AND message_id IN (SELECT message_id FROM messages)"
            ).fetchall()
        finally:
            con.unregister("_q_sha")
        return {r[0] for r in rows}

    @_uses_db
    def holds_messages(self) -> bool:
        """True when the store holds at least one message (or has committed one
        that its projections have not folded yet)."""
        if self._unapplied:
            return True
        return bool(self._reader().execute("SELECT 1 FROM messages LIMIT 1").fetchall())

    @_uses_db
    def known_records(
        self, pairs: Sequence[tuple[str, int]], *, owners: dict[str, str] | None = None
    ) -> dict[tuple[str, int], dict[str, Any]]:
        """Primary records matching (Message-ID, size) pairs: content the store already holds.

        A fetcher that learns a message's id and size from an envelope asks this
        before downloading the body; a match costs a location event, not a body.
        ``owners``: filled with the source of each asked id the store holds, whatever
        its size (what ``stored_ids`` would say of them now).
        """
        if not pairs:
            return {}
        wanted = set(pairs)
        con = self._reader()
        # The ids first, from three narrow columns; the records' other columns only
        # for the matches. Many ids (a first sync) are one scan of the table: its
        # list columns read for every row held 208 MiB of DuckDB's buffer pool for
        # 9,900 ids asked of 1,000,000 messages, and none matched.
        ids = rows_where_in(
            con, "messages", "message_id", [p[0] for p in wanted], "message_id, size, source"
        )
        if owners is not None:
            owners.update(zip(ids.column(0).to_pylist(), ids.column(2).to_pylist(), strict=True))
        hits = [
            i
            for i, size in zip(ids.column(0).to_pylist(), ids.column(1).to_pylist(), strict=True)
            if (i, size) in wanted
        ]
        if not hits:
            return {}
        table = rows_where_in(
            con,
            "messages",
            "message_id",
            hits,
            "message_id, seq, size, sha256, date_utc, date_offset_min, from_addr, to_addrs,"
            ' in_reply_to, "references", list_id, subject, synthetic_id, defects',
        )
        rows = [r for r in table.to_pylist() if (r["message_id"], r["size"]) in wanted]
        headers = self._headers_at([r["seq"] for r in rows])
        for r in rows:
            r["headers"] = headers.get(r.pop("seq"), ())
        return {(r["message_id"], r["size"]): r for r in rows}

    @_uses_db
    def locations_at(
        self,
        source: str,
        places: Sequence[tuple[str, int | None, int | None, str | None]],
        *,
        stale_ok: bool = False,
        columns: str = "*",
    ) -> list[dict[str, Any]]:
        """The ``locations`` rows at ``places`` of ``source``, each place a (folder,
        uidvalidity, uid, uidl): probed through the index on the location key, so
        the cost follows the places asked for, never the store.

        ``stale_ok``: as for a writer that remembers what it committed itself.
        ``columns``: those wanted (each row found is fetched column by column).
        """
        if not places:
            return []
        keys = [location_key(source, *place) for place in places]
        con = self._reader(stale_ok=stale_ok)
        return rows_where_in(con, "locations", "loc_key", keys, columns).to_pylist()

    @_uses_db
    def locations_in(
        self, source: str, spans: Sequence[tuple[str, int, int | None]]
    ) -> list[dict[str, Any]]:
        """The ``locations`` rows of ``source`` in each span (folder, uidvalidity,
        highest UID): every row at UIDs 1..highest under that folder's UIDVALIDITY,
        vanished or not, for a caller that must account for a whole folder.

        The cost follows the spans: up to ``INDEX_KEYS_MAX`` UIDs in all are probed
        through the index on the location key (a small folder of a large store
        reads its own rows); more, or a span whose highest UID is not known
        (None), are read in one pass filtered on folder and UIDVALIDITY, which
        then also returns rows above the highest UID. Past that many keys one
        pass costs less than the probes (1,000,000 locations: 20,000 UIDs probed
        2.0 s, one pass 0.06 s), as for every lookup (``projections.lookup``).
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
                return self.locations_at(source, places)
        where = " OR ".join("(folder = ? AND uidvalidity = ?)" for _ in spans)
        params: list[Any] = [source]
        for folder, uv, _ in spans:
            params += [folder, uv]
        cur = self._reader().execute(
            f"SELECT * FROM locations WHERE source = ? AND ({where}) AND uid IS NOT NULL", params
        )
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    @_uses_db
    def folder_cursors(self, account: str) -> list[dict[str, Any]]:
        """The sync cursor of every folder of ``account`` the store has synced, one
        row a folder (its name, uidvalidity, last_uid, uidnext): the folders the
        store holds locations in, at a cost that follows the account's folders."""
        cur = self._reader().execute(
            "SELECT folder, uidvalidity, last_uid, uidnext FROM cursors WHERE account = ?"
            " ORDER BY folder",
            [account],
        )
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    @_uses_db
    def stored_ids(self, ids: Sequence[str], *, stale_ok: bool = False) -> dict[str, str]:
        """Of ``ids``, those the store holds, with the source that first stored each."""
        con = self._reader(stale_ok=stale_ok)
        table = rows_where_in(con, "messages", "message_id", ids, "message_id, source")
        return dict(zip(table.column(0).to_pylist(), table.column(1).to_pylist(), strict=True))

    @_uses_db
    def cursor(self, account: str, folder: str) -> dict[str, Any] | None:
        """The sync cursor of (account, folder), or None before the first sync."""
        cur = self._reader().execute(
            "SELECT uidvalidity, last_uid, uidnext, mode, seq FROM cursors"
            " WHERE account = ? AND folder = ?",
            [account, folder],
        )
        rows = cur.fetchall()
        if not rows:
            return None
        return dict(zip([d[0] for d in cur.description], rows[0], strict=True))

    @_uses_db
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

    @_uses_db
    def delete(self, msg_id: str, *, reason: str = "", actor: str = "api") -> bool:
        """Drop a message from the store; False if it was not there."""
        rec = self.get(msg_id)
        if rec is None:
            return False
        mid = rec["message_id"]
        self.commit([self.events.deleted(mid, actor=actor, reason=reason)])
        return True

    def _build_files(self) -> list[Path]:
        """The files a rebuild writes beside the projections (replay's, verify's)."""
        return [
            self.db_path.with_suffix(".duckdb.rebuild"),
            self.root / "projections.verify.duckdb",
        ]

    @contextlib.contextmanager
    def _building(self, path: Path) -> Iterator[None]:
        """Hold the build lock (a ``flock`` of the store's directory: no file of its
        own to leave behind) while a rebuild writes ``path``, and remove what the
        rebuild wrote when it ends, however it ends (a kill -9 leaves them to
        ``_remove_dead_builds``, at the next open). Rebuilds take turns."""
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # (a concurrent replay: wait for it)
            _remove_build_files(path)
            try:
                yield
            finally:
                _remove_build_files(path)
        finally:
            os.close(fd)

    def _remove_dead_builds(self) -> None:
        """Remove the files of rebuilds killed midway (when no rebuild is running)."""
        paths = self._build_files()
        if not any(Path(f"{p}{x}").exists() for p in paths for x in ("", ".stage", ".tmp")):
            return
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return  # a rebuild is running
        try:
            for path in paths:
                _remove_build_files(path)
        finally:
            os.close(fd)

    def reindex(self, *, progress: Progress = NO_PROGRESS) -> int:
        """Rebuild every projection from the log (= ``mailledger replay``); returns last seq.

        The new database is built beside the old one and renamed over it, so a
        crash or a failure midway leaves the old projections in use; whatever the
        rebuild had written (its file, its scratch file, its spill directory) is
        removed on the way out, and by the next rebuild after a kill -9.
        """
        self.close()
        tmp = self.db_path.with_suffix(".duckdb.rebuild")
        with self._building(tmp):
            con = self._build_connection(tmp)
            try:
                last = self._rebuild(con, scratch=Path(str(tmp) + ".stage"), progress=progress)
                self._persist_views(con, fresh=True)
                con.execute("CHECKPOINT")
            finally:
                con.close()
            os.chmod(tmp, 0o600)
            Path(str(self.db_path) + ".wal").unlink(missing_ok=True)
            os.replace(tmp, self.db_path)
        return last

    def _create_projections(self) -> None:
        """Build the projection file of a store that has none (a new store, or one
        whose file was deleted) beside it, and put it in place only if it is still
        absent. A connection would otherwise create an empty file that another
        process, finding it empty, replaced with its rebuild under the feet of a
        third that held it (a WAL written for one file, replayed into the other)."""
        tmp = self.db_path.with_suffix(".duckdb.rebuild")
        with self._building(tmp):  # creators take turns with each other and rebuilds
            if self.db_path.exists():
                return  # made by the creator we waited for
            con = self._build_connection(tmp)
            try:
                self._rebuild(con, scratch=Path(str(tmp) + ".stage"))
                con.execute("CHECKPOINT")
            finally:
                con.close()
            os.chmod(tmp, 0o600)
            try:
                os.link(tmp, self.db_path)
            except FileExistsError:
                pass  # made behind the lock (not by a store): that one stays
            except OSError:
                os.replace(tmp, self.db_path)  # no hard links here; absent, under the lock

    # -- reading --------------------------------------------------------------
    @_uses_db
    def get(self, msg_id: str) -> dict[str, Any] | None:
        """The primary record of ``msg_id`` (with or without angle brackets), or None."""
        con = self._reader()
        for mid in _id_candidates(msg_id):
            cur = con.execute("SELECT * FROM messages WHERE message_id = ?", [mid])
            rows = cur.fetchall()
            if rows:
                break
        else:
            return None
        names = [d[0] for d in cur.description]
        rec = dict(zip(names, rows[0], strict=True))
        rec["headers"] = list(self._headers_at([rec["seq"]]).get(rec["seq"], ()))
        return rec

    def _headers_at(self, seqs: Sequence[int]) -> dict[int, tuple[tuple[str, str], ...]]:
        """The decoded headers of the events at ``seqs``, read from the log (the
        projections keep no copy)."""
        table = self.log.read_at(seqs, ["headers"])
        return {
            seq: tuple((h["name"], h["value"]) for h in headers or ())
            for seq, headers in zip(
                table.column("seq").to_pylist(), table.column("headers").to_pylist(), strict=True
            )
        }

    @_uses_db
    def raw(self, msg_id: str) -> bytes:
        """The message's raw bytes, checked against its sha256."""
        con = self._reader()
        for mid in _id_candidates(msg_id):
            row = con.execute("SELECT sha256 FROM messages WHERE message_id = ?", [mid]).fetchall()
            if row:
                return self.blobs.get(row[0][0])
        raise NotFoundError(f"no message {msg_id!r} in the store")

    def message(self, msg_id: str) -> EmailMessage:
        """The message parsed as an ``email.message.EmailMessage``."""
        import email
        import email.policy
        from email.message import EmailMessage

        msg = email.message_from_bytes(self.raw(msg_id), policy=email.policy.default)
        assert isinstance(msg, EmailMessage)
        return msg

    @_uses_db
    def find(self, header: str, value: str) -> list[str]:
        """Message-IDs whose ``header`` matches ``value`` after the index normalization."""
        found = _find_key(header, value)
        if found is None:
            return []
        name, key = found
        con = self._reader()
        if name == "message-id":
            rows = con.execute("SELECT message_id FROM messages WHERE message_id = ?", [key])
            return [r[0] for r in rows.fetchall()]
        # the index probe finds the key's hash; a (vanishingly rare) other key of
        # the same hash is told apart by its header and value
        kh = key_hash(con, name, key)
        found = con.execute(
            f"SELECT header, value, message_id FROM header_index WHERE kh = {kh}"
        ).fetchall()
        return sorted(mid for h, v, mid in found if h == name and v == key)

    @_uses_db
    def summaries(self, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """What a listing prints of each stored message of ``ids``: its ``date_iso``,
        ``from_addr`` and ``subject``, by Message-ID, read in one query (a probe
        of the index per id for a few ids, one scan for many)."""
        rows = self.message_rows(ids, "message_id, date_iso, from_addr, subject")
        return {r["message_id"]: r for r in rows}

    @_uses_db
    def listing(self, ids: Sequence[str]) -> list[str]:
        """``find``'s plain lines for ``ids``, in their order: Message-ID, ``date_iso``
        (``-`` when undated) and subject, tab-separated, spelled by DuckDB in one
        query (a probe of the index per id for a few ids, one scan for many): a
        listing of 250,000 hits costs what reading them costs, not a Python dict
        per row."""
        if not ids:
            return []
        line = _LISTING_LINE.format(m="")
        rows = rows_where_in(self._reader(), "messages", "message_id", ids, f"message_id, {line}")
        got = dict(zip(rows.column(0).to_pylist(), rows.column(1).to_pylist(), strict=True))
        return [got.get(mid) or f"{mid}\t-\t" for mid in ids]

    @_uses_db
    def find_listing(self, header: str, value: str) -> pa.ChunkedArray:
        """``find``'s plain listing: a line per hit of ``find(header, value)``, in its
        order, each as ``listing`` spells it and ending in a newline, as an Arrow
        string column. A caller printing it writes the column's bytes: 250,000 hits
        are never 250,000 Python strings (``listing(find(...))`` built them twice,
        and their table again to send the ids back to DuckDB: 3 s of a 3.6 s
        ``find`` at 1,000,000 messages).

        Few hits are listed through the index on ``messages.message_id``, as by
        ``listing``; more are joined with ``messages`` in one scan, their ids never
        leaving DuckDB's and Arrow's buffers."""
        found = _find_key(header, value)
        if found is None or found[0] == "message-id":  # (one hit at most)
            return _lines(self.listing(self.find(header, value)))
        name, key = found
        con = self._reader()
        # the index probe finds the key's hash; a (vanishingly rare) other key of
        # the same hash is flagged, not filtered in the query: a filter on header
        # or value beside kh's turns DuckDB's index scan into a scan of the table
        kh = key_hash(con, name, key)
        hits = con.sql(
            f"SELECT message_id, header <> ? OR value <> ? AS other FROM header_index"
            f" WHERE kh = {kh}",
            params=[name, key],
        ).to_arrow_table()
        if hits.num_rows <= INDEX_KEYS_MAX:
            ids, other = hits.column(0).to_pylist(), hits.column(1).to_pylist()
            return _lines(self.listing(sorted(m for m, o in zip(ids, other, strict=True) if not o)))
        con.register("_q_hits", hits)
        try:
            return (
                con.sql(
                    f"SELECT coalesce({_LISTING_LINE.format(m='m.')}, q.message_id || chr(9) || '-'"
                    " || chr(9)) || chr(10) AS line"
                    " FROM _q_hits q LEFT JOIN messages m ON m.message_id = q.message_id"
                    " WHERE NOT q.other ORDER BY q.message_id"
                )
                .to_arrow_table()
                .column(0)
            )
        finally:
            con.unregister("_q_hits")

    @_uses_db
    def message_rows(self, ids: Sequence[str], columns: str = "*") -> list[dict[str, Any]]:
        """``columns`` of the primary records of ``ids`` (those stored), in one query."""
        if not ids:
            return []
        return rows_where_in(self._reader(), "messages", "message_id", ids, columns).to_pylist()

    @_uses_db
    def walk_thread(self, msg_id: str) -> list[str]:
        """Every stored message of ``msg_id``'s thread, oldest first (undated last).

        The thread is the connected component of the reply graph, ghost nodes
        (ids never stored or since deleted) included, so gaps never split it.
        """
        con = self._reader()
        found: list[Any] = []
        for mid in _id_candidates(msg_id):
            q = "SELECT thread_id FROM thread_nodes WHERE message_id = ?"
            found = con.execute(q, [mid]).fetchall()
            if found:
                break
        if not found:
            raise NotFoundError(f"no message {msg_id!r} in the store")
        members = rows_where_in(con, "thread_nodes", "thread_id", [found[0][0]], "message_id")
        dated = rows_where_in(
            con, "messages", "message_id", members.column("message_id").to_pylist(),
            "message_id, date_iso",
        ).to_pylist()  # fmt: skip
        # oldest first, undated last; ties by id (code point order, as DuckDB sorts)
        dated.sort(key=lambda r: (r["date_iso"] is None, r["date_iso"] or "", r["message_id"]))
        return [r["message_id"] for r in dated]

    @_uses_db
    def contains_uidl(self, uidl: str) -> bool:
        row = (
            self._reader()
            .execute("SELECT 1 FROM locations WHERE uidl = ? LIMIT 1", [uidl])
            .fetchall()
        )
        return bool(row)

    @_uses_db
    def known_uidls(
        self, source: str, uidls: Sequence[str], *, legacy: bool = True
    ) -> dict[str, list[dict[str, Any]]]:
        """What the store knows of each POP3 UIDL in ``uidls``, in one batched query.

        Returns ``uidl -> [{"source", "sha256", "size", "message_id"}, ...]`` for
        the UIDLs on record at ``source`` and, with ``legacy``, at any legacy
        GDBM import (``import:gdbm:*``): a UIDL migrated from the old store is
        not downloaded again. A UIDL can have several entries when a server
        reused it for other content. ``size`` is the stored size of that
        content (from the primary record, else from the log when the message
        was deleted since), None only when neither still holds it.
        """
        wanted = sorted(set(uidls))
        if not wanted:
            return {}
        con = self._reader()
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
            table = self.query(
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

    @_uses_db
    def uidls(self) -> list[str]:
        """Every UIDL ever downloaded (the legacy program's ``_uidls``)."""
        rows = self._reader().execute(
            "SELECT DISTINCT uidl FROM locations WHERE uidl IS NOT NULL ORDER BY uidl"
        )
        return [r[0] for r in rows.fetchall()]

    @_uses_db
    def message_ids(self) -> list[str]:
        rows = self._reader().execute("SELECT message_id FROM messages ORDER BY message_id")
        return [r[0] for r in rows.fetchall()]

    @_uses_db
    def query(self, sql: str, params: Sequence[Any] | None = None) -> pa.Table:
        """Run SQL over the projections and the ``events`` view of the log."""
        con = self._reader()
        self._define_views(con)
        with db.all_threads(con):
            rel = con.sql(sql, params=list(params) if params else None)
            return rel.to_arrow_table() if rel is not None else pa.table({})

    def _define_views(self, con: duckdb.DuckDBPyConnection) -> None:
        # this connection's own views, over the exact listing of the log: a query
        # running while a compaction merges files never sees an event twice
        files = [str(f.path) for f in self.log.files()]
        create_query_views(con, events_sql(con, files), temp=True)

    def _log_glob(self) -> str:
        """What the file's ``events`` view reads: every log file, by absolute path
        (the directory's own ``[``, ``*`` and ``?`` escaped as one-character classes:
        DuckDB's glob knows no backslash escape)."""
        where = str(self.log.root.resolve())
        escaped = "".join(f"[{c}]" if c in "[*?" else c for c in where)
        return escaped + "/*.parquet"

    def _views_current(self, con: duckdb.DuckDBPyConnection, last: int) -> bool:
        """Whether the file's ``events`` view reads this store's log (checked once
        per store object: a catalog lookup)."""
        if not self._views_ok:
            source = events_source(con)
            self._views_ok = source == self._log_glob()
            return self._views_ok or (last == 0 and source == "")
        return True

    def _persist_views(self, con: duckdb.DuckDBPyConnection, *, fresh: bool = False) -> None:
        """Keep in the projection file the views and the macro ``query`` offers, for
        stock DuckDB (``README``: "Stock DuckDB"). The ``events`` view reads the log
        by absolute path, so that it works from any directory; a store that moved
        has it made again by its next command. Unless ``fresh`` (a rebuild's new
        file), only when it is missing or reads another place."""
        glob = self._log_glob()
        if not fresh and events_source(con) == glob:
            self._views_ok = True
            return
        source = glob if self.log.files() else ""
        try:
            create_query_views(con, events_sql(con, source or None), source=source)
        except duckdb.Error as exc:  # a convenience for other tools: never a failed write
            log.warning("%s: the views for stock DuckDB were not made: %s", self.db_path, exc)
            self._views_ok = True  # (not tried again by this store object)
            return
        self._views_ok = bool(source)

    @_uses_db
    def cursor_log(self, account: str, folder: str) -> list[dict[str, Any]]:
        """Every move of a folder's cursor, oldest first, straight from the log."""
        table = self.query(
            "SELECT seq, type, run_id, recorded_at, mode, uidvalidity, cursor_from, cursor_to,"
            " uidnext, old_uidvalidity, new_uidvalidity, action, reason FROM events"
            " WHERE type IN ('cursor-moved', 'uidvalidity-changed')"
            " AND source = ? AND folder = ? ORDER BY seq",
            [account, folder],
        )
        return table.to_pylist()

    @_uses_db
    def stats(self) -> dict[str, Any]:
        con = self._reader()
        one = lambda sql: con.execute(sql).fetchall()[0][0]  # noqa: E731
        threads, ghosts = thread_counts(con)  # (kept by the folds: no scan of the graph)
        blob_count = self.blobs.count()
        blob_bytes = self.blobs.stored_bytes()
        files = self.log.files()  # (listed once: 1,000 files are 25 ms a listing)
        log_bytes = sum(f.path.stat().st_size for f in files)
        db_bytes = self.db_path.stat().st_size if self.db_path.exists() else 0
        return {
            "events": files[-1].last if files else 0,
            "log_files": len(files),
            "messages": one("SELECT count(*) FROM messages"),
            "threads": threads,
            "ghosts": ghosts,
            "locations": one("SELECT count(*) FROM locations"),
            "malformed": one("SELECT count(*) FROM messages WHERE len(defects) > 0"),
            "synthetic_ids": one("SELECT count(*) FROM messages WHERE synthetic_id"),
            "blobs": blob_count,
            "blob_bytes": blob_bytes,
            "log_bytes": log_bytes,
            "projection_bytes": db_bytes,
            "bytes": blob_bytes + log_bytes + db_bytes,
        }

    # -- integrity ------------------------------------------------------------
    @_uses_db
    def verify(self, *, blobs: bool = True, progress: Progress = NO_PROGRESS) -> list[str]:
        """Problems found: log damage, missing or corrupt blobs, projections that drifted.

        ``progress``: told of each step (the log, each blob, the fresh replay)."""
        progress.start(None, "verify: the log", unit=None)
        problems = self.log.verify()
        if problems:
            return problems
        con = self._reader()
        last = self.log.last_seq()
        seq = applied_seq(con)
        if seq != last:
            problems.append(f"projections are at seq {seq}, the log at {last}")
        have = fingerprint(con)
        if blobs:
            # streamed: a million hashes are never a Python list
            if progress is not NO_PROGRESS:  # (one scan more, before reading every blob)
                total = con.execute(
                    "SELECT count(DISTINCT sha256) FROM locations"
                    " WHERE message_id IN (SELECT message_id FROM messages)"
                ).fetchall()[0][0]
                progress.start(total, "verify: blobs", unit="blob")
            reader = con.sql(
                "SELECT DISTINCT sha256 FROM locations"
                " WHERE message_id IN (SELECT message_id FROM messages) ORDER BY 1"
            ).to_arrow_reader(1 << 16)
            for batch in reader:
                for sha in batch.column(0).to_pylist():
                    try:
                        self.blobs.get(sha)
                    except Exception as exc:
                        problems.append(str(exc))
                    progress.advance()
            # a pack whose index is damaged, even when every blob it still holds reads
            self.blobs.check_packs()
            problems.extend(sorted(self.blobs.damaged.values()))
        # The projections are let go before the fresh replay: what DuckDB cached of
        # them would otherwise sit beside the replay's budget (1.4 GB at 1,000,000).
        self.close()
        # a file, not memory: a large store's replay spills to disk
        scratch = self.root / "projections.verify.duckdb"
        progress.start(None, f"verify: a fresh replay of {last:,} events", unit=None)
        with self._building(scratch):
            fresh = self._build_connection(scratch)
            try:
                self._rebuild(fresh, scratch=Path(str(scratch) + ".stage"))
                want = fingerprint(fresh)
            finally:
                fresh.close()
        for table, digest in want.items():
            if have.get(table) != digest:
                problems.append(
                    f"projection table {table!r} differs from a fresh replay of the log"
                )
        return problems

    def compact(self, target_rows: int = 100_000) -> tuple[int, int]:
        """Merge small log files; returns (files before, files after)."""
        return self.log.compact(target_rows=target_rows)

    @property
    def purge_journal(self) -> Path:
        return self.root / "purge-journal.json"

    def purge(self) -> PurgeReport:
        """Erase deleted messages for good (``compact --purge``; see ``stores.purge``).

        Blobs no stored message holds are erased, the personal columns of their
        events are rewritten away, and the projections are rebuilt into a fresh
        file (an old DuckDB file may keep a deleted subject in a free page).
        Safe to kill at any point: a re-run finishes the purge.
        """
        from stores.purge import finish_purge, purge_log

        self.close()
        report = purge_log(
            self.log,
            self.blobs,
            self.purge_journal,
            run_id=self.run_id,
            now=self.clock.now,
            drop_projections=self._drop_projections,
        )
        if report.changed:
            self._unapplied, self._unapplied_bytes = [], 0  # pre-purge rows: never fold again
            self.reindex()
            finish_purge(self.purge_journal)
        return report

    def _drop_projections(self) -> None:
        """Remove the projection database and every file DuckDB keeps beside it."""
        self.close()
        self._unapplied, self._unapplied_bytes = [], 0
        with contextlib.suppress(duckdb.Error, OSError):
            db.release(db.connect(self.db_path, read_only=False, timeout=60))  # no other holder
        base = str(self.db_path)
        for name in (base, base + ".wal"):
            Path(name).unlink(missing_ok=True)
        shutil.rmtree(base + ".tmp", ignore_errors=True)
        for path in self._build_files():  # (a killed rebuild's staged events hold mail)
            _remove_build_files(path)


def _is_marker_temp(name: str) -> bool:
    """A creator's temporary marker (``store.json.tmp`` of older versions,
    ``store.json.{pid}.{random}.tmp`` now): left alone by a crash before its link."""
    return name.startswith("store.json.") and name.endswith(".tmp")


def _create_marker(root: Path, marker: Path) -> None:
    """Make ``root`` a store by publishing its ``store.json``, safe against other
    processes creating the same store at the same moment.

    The marker is written in full under a name of this process's own, fsynced,
    then hard-linked to ``store.json``: the link succeeds for exactly one creator,
    and every other one finds the winner's complete marker and opens that store.
    Nothing else of the store exists before its marker, so a directory holding
    anything but markers (or a winner's marker) is someone else's and refused.
    """
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    if any(not (p.name == marker.name or _is_marker_temp(p.name)) for p in root.iterdir()):
        if not marker.exists():  # (a concurrent creator may have won meanwhile)
            raise UsageError(f"{root}: exists, is not empty and is not a mailledger store")
        return
    # (a name _is_marker_temp knows: a crash before the link leaves a file that
    # does not make the directory someone else's)
    tmp = unique_name(marker, prefix=f"{marker.name}.")
    create_once(marker, (json.dumps(_FORMAT) + "\n").encode(), tmp=tmp)


def _current(con: duckdb.DuckDBPyConnection) -> bool:
    """True when the projections were built by this version's rules and hash."""
    return _current_meta(con, meta_values(con))


def _current_meta(con: duckdb.DuckDBPyConnection, meta: dict[str, int]) -> bool:
    """``_current`` from the values ``meta_values`` read."""
    version_ok = meta.get("projection_version") == PROJECTION_VERSION
    return version_ok and meta.get("hash_probe") == hash_probe(con)


def _remove_build_files(path: Path) -> None:
    """A rebuild's file and everything DuckDB keeps beside it (the WAL, the
    scratch file of staged events, the spill directories)."""
    for name in (str(path), f"{path}.wal", f"{path}.stage", f"{path}.stage.wal"):
        Path(name).unlink(missing_ok=True)
    for name in (f"{path}.tmp", f"{path}.stage.tmp"):
        shutil.rmtree(name, ignore_errors=True)


# a listing's line of a primary record (``m``: the table's qualifier, with its dot)
# A control character in a subject (a tab or a newline decoded from an encoded
# word) would split the line or its fields: it is shown as a space.
_LISTING_LINE = (
    "{m}message_id || chr(9) || coalesce({m}date_iso, '-') || chr(9)"
    " || regexp_replace(coalesce({m}subject, ''), '[[:cntrl:]]', ' ', 'g')"
)


def _lines(lines: Sequence[str]) -> pa.ChunkedArray:
    """Listing lines as ``find_listing`` returns them: a string column, each line
    ending in a newline."""
    return pa.chunked_array([pa.array([f"{line}\n" for line in lines], pa.string())])


def _find_key(header: str, value: str) -> tuple[str, str] | None:
    """(index header name, normalized key) that ``find(header, value)`` looks up;
    None when ``value`` normalizes to nothing (no message can match). A header
    that is not indexed is a usage error."""
    name = normalize_header_name(header)
    if name is None:
        raise UsageError(
            f"cannot search header {header!r}: use subject, from, to, cc, date, "
            "in-reply-to, references, list-id or message-id"
        )
    key = index_value(name, value)
    return None if key is None else (name, key)


def _id_candidates(msg_id: str) -> list[str]:
    """The stored ids ``msg_id`` may mean, most likely first.

    An id as the store spells it (no angle brackets, no whitespace) is tried
    as given first: normalizing it again could change it (an id made from
    ``<a b, c;d@x>`` is stored as ``ab,c;d@x``). Anything else is normalized.
    """
    norm = normalize_msgid(msg_id)
    if msg_id and not any(c in msg_id for c in "<> \t\r\n"):
        return [msg_id] + ([norm] if norm and norm != msg_id else [])
    return [norm or msg_id]

"""The projector: the one owner of a store's projection file and its connections.

It opens ``projections.duckdb`` (briefly: DuckDB lets a process writing a file
keep every other process out, even readers), hands out a reader caught up with
the log or a writer, folds the batches a writer committed (at once or deferred,
as a bulk writer asks), rebuilds the file from the log beside it when it is
missing, stale or asked for, and keeps the views stock DuckDB reads.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import duckdb
import pyarrow as pa

from projections import snapshot
from projections.fold import FOLD_SCHEMA, applied_seq, apply_chunks, hash_probe, meta_values
from projections.fold.deltas import delta_rows, stamp_filters
from projections.past import PastProjections
from projections.queries import counts, run_sql, snapshot_folders
from projections.rebuilds import RebuildFiles, cache_dir
from projections.tables import PROJECTION_VERSION, create_query_views, events_source, events_sql
from stores import db
from stores.blobs import BlobStore
from stores.errors import LockTimeout, LogIntegrityError
from stores.log import EventLog

if TYPE_CHECKING:
    from projections.fulltext.index import FullText

__all__ = ["Projector"]

log = logging.getLogger("mailledger.store")

# what a fold reads of the log: everything but the decoded headers (kept in the log only)
_FOLD_COLUMNS = FOLD_SCHEMA.names
# a deferred fold runs before the events it waits for hold this much memory
_FOLD_BYTES = 128 << 20

_T = TypeVar("_T")


def _current(con: duckdb.DuckDBPyConnection, meta: dict[str, int] | None = None) -> bool:
    """True when the projections were built by this version's rules and hash."""
    meta = meta_values(con) if meta is None else meta
    version_ok = meta.get("projection_version") == PROJECTION_VERSION
    return version_ok and meta.get("hash_probe") == hash_probe(con)


class Projector:
    """The projections of the store whose log is ``log``, in ``root/projections.duckdb``."""

    def __init__(self, root: Path, log: EventLog, blobs: BlobStore | None = None) -> None:
        self.log = log
        self.root = root
        self._blobs = blobs
        self.db_path = root / "projections.duckdb"
        self.files = RebuildFiles(root, self.db_path, log)
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
        self._folded = 0  # the seq the projections were at after this projector's last fold
        # the applied seq this projector last saw the projections at, when it was the log's end
        self._applied_seen: int | None = None
        self._views_ok = False  # the file's events view is known to read this log

    # -- holding the file -------------------------------------------------------
    def close(self) -> None:
        """Release the projection database so other processes can open it."""
        if "fulltext" in self.__dict__ and self.fulltext is not None:
            self.fulltext.let_go()  # (its connection was for the file as held)
        if self._con is not None:
            db.release(self._con)
            self._con = None
            self._con_rw = False

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        """One store operation: the file is released when the outermost one ends
        (unless a ``session`` keeps it)."""
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            if self._depth == 0 and not self._held:
                self.close()

    @contextlib.contextmanager
    def session(self) -> Iterator[None]:
        """Keep the file open across many operations (other processes cannot write
        meanwhile: keep it short)."""
        self._held += 1
        try:
            yield
        finally:
            self._held -= 1
            if not self._held and not self._depth:
                self.close()

    def read(
        self,
        fn: Callable[..., _T],
        *args: Any,
        as_writer: bool = False,
        views: bool = False,
    ) -> _T:
        """``fn(reader, *args)`` within one hold (``as_writer``: see ``reader``;
        ``views``: the ``events`` view of the log defined on the reader first)."""
        with self.hold():
            con = self.reader(as_writer=as_writer)
            if views:
                self._define_views(con)
            return fn(con, *args)

    @functools.cached_property
    def fulltext(self) -> FullText | None:
        """The full-text index (None without the blobs it reads); imported when used."""
        if self._blobs is None:
            return None
        from projections.fulltext.index import FullText

        return FullText(self.root, self._blobs)

    def read_text(self, fn: Callable[..., _T], plan: Any, *args: Any) -> _T:
        """``fn(reader, plan, *args)`` within one hold, given ``text=`` the full-text
        index (brought up to the projections first) when the search ``plan`` reads it;
        on both cores (4,300 hits at 1M messages: 122 ms on one thread, 64 on two)."""
        with self.hold():
            con = self.reader()
            with db.all_threads(con):
                if not plan.text or self.fulltext is None:
                    return fn(con, plan, *args)
                if self._held and not self._con_rw:  # (kept with the file read-only: ``reader``)
                    return fn(con, plan, *args, text=self.fulltext.reader(con))
                self.fulltext.sync(con)
                with self.fulltext.connection() as text:
                    return fn(con, plan, *args, text=text)

    def query(self, sql: str, params: Sequence[Any] | None = None) -> pa.Table:
        """Run SQL over the projections and the ``events`` view of the log."""
        with self.hold():
            con = self.reader()
            self._define_views(con)
            with db.all_threads(con), db.interruptible(con):
                return run_sql(con, sql, params)

    def writer(self) -> duckdb.DuckDBPyConnection:
        """The file held for writing (made first if missing; rebuilt first if made
        by another version)."""
        if self._con is not None and not self._con_rw:
            self.close()
        if self._con is None:
            created = not self.db_path.exists()
            if created:
                self.files.create()
            self._con = db.connect(self.db_path, read_only=False)
            self._con_rw = True
            if created:
                self._follow_text(self._con)
            if not _current(self._con):
                # built by another version: rebuilt beside the file and swapped in
                self.close()
                self.reindex()
                self._con = db.connect(self.db_path, read_only=False)
                self._con_rw = True
            stamp_filters(self._con)
            if not self._views_ok:
                self._persist_views(self._con)
        return self._con

    def reader(self, *, as_writer: bool = False) -> duckdb.DuckDBPyConnection:
        """A connection whose projections are caught up with the log.

        ``as_writer``: the projections as this projector's writer may read them: they
        may lack exactly the batches it committed and has not folded yet (its caller
        remembers those), and no catch-up is forced for them. A lag anyone else left
        (another writer's batch, one killed before its fold) is still caught up.
        """
        if self._con is None:
            if self.db_path.exists():
                con = db.connect(self.db_path, read_only=True)
                meta = meta_values(con)  # (one query for the three values)
                if _current(con, meta):
                    applied, last = meta.get("applied_seq", 0), self.log.last_seq()
                    if applied == last or (as_writer and self._lag_is_ours(applied, last)):
                        if self._views_current(con, last):
                            if applied == last:
                                self._applied_seen = applied
                            self._con, self._con_rw = con, False
                            return con
                        db.release(con)
                        return self._mend_views()
                db.release(con)
            try:
                self._catch_up(self.writer())
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
            self._catch_up(self.writer())
        except (duckdb.Error, OSError, LockTimeout) as exc:
            self.close()
            log.warning("%s: the views for stock DuckDB read another place: %s", self.db_path, exc)
            self._views_ok = True  # (not tried again by this projector)
            self._con, self._con_rw = db.connect(self.db_path, read_only=True), False
        assert self._con is not None
        return self._con

    # -- folding ----------------------------------------------------------------
    @property
    def caught_up_seq(self) -> int | None:
        """The log's last seq when this projector last saw the projections hold all
        of it (None: never seen so)."""
        return self._applied_seen

    @property
    def unfolded(self) -> int:
        """How many events this projector's writer committed and has not folded yet."""
        return sum(b - a + 1 for a, b, _ in self._unapplied)

    def committed(self, table: pa.Table, *, fold: bool) -> None:
        """Take note of a batch the log just committed (``table``: its rows) and fold
        it now (``fold``), or later, when enough are pending for a fold to be due.

        A store with no projections yet (a new store an import fills) has them built
        once, from the whole log, as a replay builds them, when first read or at the
        writer's ``catch_up``: a replay's cost per event is flat from 100k to 1M
        events, where each fold into tables that grow with the store costs more than
        the one before."""
        if not table.num_rows:
            return
        seqs = table.column("seq")
        rows = table.select(_FOLD_COLUMNS)  # (kept without the headers: no fold reads them)
        self._unapplied.append((seqs[0].as_py(), seqs[-1].as_py(), rows))
        # (a running sum: summing every held table at each commit cost an import
        # into 1,000,000 messages about 25 s, growing with the rows held)
        self._unapplied_bytes += rows.nbytes
        if self._unapplied_bytes >= _FOLD_BYTES:
            # memory stays bounded: the fold reads these rows from the log again
            self._unapplied = [(a, b, None) for a, b, _ in self._unapplied]
            self._unapplied_bytes = 0
        due = self.unfolded >= max(self.fold_every, int(self.fold_share * self._folded))
        if fold or (due and self.db_path.exists()):
            self.catch_up()

    def merge_deltas(self) -> bool:
        """Put the rows the folds appended into the bases of the split tables by
        rebuilding the projections (``reindex``: within the replay's memory
        budget, beside the file, swapped in whole; ``fold.deltas`` says why not in
        place); False when the deltas hold none (nothing done)."""
        with self.hold():
            con = self.writer()
            self._catch_up(con)
            if not delta_rows(con):
                return False
        self.reindex()
        return True

    def forget_pending(self) -> None:
        """Drop the batches held for a fold (the log was rewritten under them)."""
        self._unapplied, self._unapplied_bytes = [], 0

    def catch_up(self) -> int:
        """Fold every committed event the projections have not seen; returns their
        seq (-1: the file could not be written now; the projections catch up later)."""
        if self._nothing_to_fold():
            assert self._applied_seen is not None
            return self._applied_seen
        with self.hold():
            try:
                con = self.writer()
                self._catch_up(con)  # this writer's batches (and any a crash left unfolded)
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

    def _nothing_to_fold(self) -> bool:
        """True when this projector saw the projections hold the whole log, its
        writer has committed nothing since and the log has not grown: a catch-up
        would take the write hold only to learn that, and wait for every other
        process reading the store to let go first."""
        return (
            not self._unapplied
            and self._views_ok
            and self._applied_seen is not None
            and self._applied_seen == self.log.last_seq()
        )

    def _lag_is_ours(self, applied: int, last: int) -> bool:
        """True when every event the projections lack is one this projector's writer
        committed and remembers (the log up to ``last``, its own batches contiguous).
        A lag left by another process is not: a writer deciding from such
        projections would record again locations already in the log."""
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
        pending = self._unapplied
        self.forget_pending()
        if seq < last:
            chunks: Iterable[pa.Table]
            held = [t for _, _, t in pending if t is not None]
            contiguous = all(b[0] == a[1] + 1 for a, b in itertools.pairwise(pending))
            if pending and len(held) == len(pending) and contiguous and pending[0][0] <= seq + 1:
                # the batches this writer committed itself, still in memory: no re-read
                chunks = itertools.chain(held, self.files.log_chunks(after=pending[-1][1]))
            else:
                chunks = self.files.log_chunks(after=seq)
            touched = snapshot.Touched()
            # one fold for all of them: its cost is mostly per call
            apply_chunks(con, touched.watch(chunks))
            self._write_snapshot(con, kept=touched.untouched(snapshot.read(self.root, seq)))
            self._follow_text(con)
        self._folded = max(seq, last)
        if not self._views_ok:  # (the log's first events: the view reads them now)
            self._persist_views(con)
        self._applied_seen = max(seq, last)

    # -- rebuilding -----------------------------------------------------------------
    @property
    def memory_budget(self) -> int:
        """Bytes a rebuild (replay, verify) may use in all."""
        return self.files.memory_budget

    @memory_budget.setter
    def memory_budget(self, value: int) -> None:
        self.files.memory_budget = value

    def reindex(self, *, on_phase: Callable[[str], None] | None = None, text: bool = False) -> int:
        """Rebuild every projection from the log beside the file and swap it in;
        returns the last seq (``on_phase``: told the name of each phase).

        The full-text index is rebuilt from the blobs only when ``text`` is asked
        for, or when it is missing, of another version or ahead of the log;
        otherwise it is brought up to the replayed projections like after a fold.
        Its rebuild reads and extracts every stored message (a thousand or two a
        second): a replay of the DuckDB tables takes a minute at 1,000,000 events,
        the text's rebuild ten times that."""
        self.close()

        def finish(con: duckdb.DuckDBPyConnection) -> None:
            self._fresh_views(con)
            if self.fulltext is not None and text:
                self.fulltext.rebuild(con)
            else:
                self._follow_text(con)

        return self.files.replace(on_phase=on_phase, finish=finish)

    def _fresh_views(self, con: duckdb.DuckDBPyConnection) -> None:
        self._persist_views(con, fresh=True)
        self._write_snapshot(con)

    def _follow_text(self, con: duckdb.DuckDBPyConnection) -> None:
        """Bring the full-text index to the projections just folded (a failure is
        logged, never a failed fold: the next search or fold brings it up)."""
        if self.fulltext is None:
            return
        try:
            self.fulltext.sync(con)
        except Exception as exc:
            log.warning("full-text index not updated now (%s); it catches up later", exc)

    def _write_snapshot(
        self,
        con: duckdb.DuckDBPyConnection,
        kept: dict[tuple[str, str], dict[str, Any]] | None = None,
    ) -> None:
        """Rewrite the cursor snapshot (``projections.snapshot``) from the
        projections ``con`` holds: the counts the folds keep, and each synced
        folder's cursor and pool (``kept``: those of the snapshot before that no
        folded event touched, carried over rather than probed again)."""
        try:
            snapshot.write(self.root, applied_seq(con), snapshot_folders(con, kept), counts(con))
        except Exception as exc:  # (disposable: a sync without it takes its full path;
            # never a committed fold reported as a failed one)
            with contextlib.suppress(OSError):
                snapshot.drop(self.db_path.parent)
            log.warning("%s: the cursor snapshot was not written: %s", self.db_path, exc)

    def fresh_fingerprint(self) -> dict[str, Any]:
        """The fingerprint of projections replayed afresh from the log (in a
        scratch file: a large store's replay spills to disk)."""
        self.close()
        return self.files.fresh_fingerprint()

    def as_of(self, seq: int, *, purging: Callable[[], bool]) -> PastProjections:
        """The projections as they stood after event ``seq`` (read only; built into
        the store's cache when not there yet: ``projections.past``). ``purging()``:
        True while a purge is unfinished (the past is refused then)."""
        self.close()  # (a build may take a while: no hold on the live file meanwhile)
        return PastProjections(self.files, self.log, seq, purging=purging)

    def drop(self) -> None:
        """Remove the projection file, everything DuckDB keeps beside it, what
        rebuilds killed midway left and the past projections of the cache."""
        self.close()
        self.forget_pending()
        snapshot.drop(self.db_path.parent)
        self.files.drop()
        self.files.drop_past(cache_dir(self.db_path.parent))
        if self.fulltext is not None:
            self.fulltext.drop()

    # -- the views stock DuckDB reads ---------------------------------------------
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
        per projector: a catalog lookup)."""
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
            self._views_ok = True  # (not tried again by this projector)
            return
        self._views_ok = bool(source)

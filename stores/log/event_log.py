"""``EventLog``: the Parquet event log, the only truth of a store.

Each commit writes one Parquet file named after the seq range it holds,
``00000000000000000001-00000000000000000250.parquet``. A commit is atomic: the
batch goes to a temporary name, is fsynced, renamed into place, and the
directory is fsynced; a reader lists only finished names, so it never sees half
a batch. A writer lock (``flock`` on ``log/.lock``) serializes commits and
assigns seq contiguously. Every file carries a digest of its rows
(``stores.digest``).

Compaction writes a merged file first and removes the small ones after; while
both exist, readers take the file that covers the wider range, so no reader
ever sees an event twice or misses one. Each append also has one run of small
files merged (``stores.log.tiers``), on a thread and outside the writer lock
(``stores.log.merging``): the number of files follows the events.

``check()`` runs when a store is opened: every file must be whole (a truncated
or damaged file is refused with its name). A file is digest-checked in full the
first time it is met and whenever its size, mtime or inode change
(``stores.log.checks``). ``verify()`` always checks every file in full.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from pathlib import Path

import pyarrow as pa

from stores import arrow
from stores.atomic import fsync_dir, link_new
from stores.digest import table_digest
from stores.errors import LockTimeout, LogIntegrityError
from stores.events import SCHEMA, SCHEMA_VERSION, Event, batch_of, events_to_table
from stores.fence import Fence
from stores.log.checks import CheckedCache, check_file, checked_rows
from stores.log.files import (
    DIGEST_KEY,
    EPOCH_KEY,
    FIRST_KEY,
    LAST_KEY,
    PRODUCER_KEY,
    ROW_GROUP_ROWS,
    VERSION_KEY,
    Listing,
    LogDirectory,
    LogFile,
    file_name,
    stat_key,
)
from stores.log.merging import SmallFiles
from stores.log.reading import read_after, read_at

__all__ = ["EventLog"]

log = logging.getLogger("mailledger.log")

_BARE_SCHEMA = SCHEMA.remove_metadata()


class EventLog:
    """Append-only, crash-safe Parquet log with a global contiguous ``seq``."""

    def __init__(self, root: Path, *, durable: bool = True, merge_small: bool = True) -> None:
        """``merge_small``: off only where a test needs every commit's file kept."""
        self.root = Path(root)
        self.durable = durable
        self.merge_small = merge_small
        self.small = SmallFiles(self)  # the merges of small files, and their rows
        # the writer lock is reentrant for the thread holding it (a purge appends
        # and rewrites under one lock); other threads wait as other processes do
        self._lock_owner: int | None = None
        self._dir = LogDirectory(self.root)
        self._checked = CheckedCache(self.root)
        # the commit protocol's writer epoch and cursors (beside the log: STORE/fence)
        self.fence = Fence(self.root.parent / "fence")

    # -- layout -------------------------------------------------------------
    def create(self) -> None:
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)

    def files(self, *, fresh: bool = False) -> list[LogFile]:
        """The files that hold the log, in seq order, each seq exactly once.

        Files wholly covered by a wider one (left by a compaction that has not
        removed them yet) are passed over. A gap or a partial overlap is damage.

        The listing is the kept one while the directory is unchanged (1,000 files
        at 1,000,000 messages were 5-6 ms a listing, asked at every read).
        ``fresh``: list it whatever its stat says (NFS attributes may be stale).
        """
        return self._dir.files(fresh=fresh)

    def last_seq(self, *, fresh: bool = False) -> int:
        files = self.files(fresh=fresh)
        return files[-1].last if files else 0

    # -- locking ------------------------------------------------------------
    @contextlib.contextmanager
    def lock(self, timeout: float = 60.0) -> Iterator[None]:
        """Hold the writer lock; raises LockTimeout after ``timeout`` seconds.

        Reentrant within one thread of one ``EventLog``."""
        if self._lock_owner == threading.get_ident():
            yield
            return
        self.create()
        fd = os.open(self.root / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + timeout
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise LockTimeout(f"{self.root}: writer lock held elsewhere") from None
                    time.sleep(0.002)  # (a commit holds it ~10 ms: 20 ms polls doubled waits)
            self._lock_owner = threading.get_ident()
            try:
                yield
            finally:
                self._lock_owner = None
        finally:
            os.close(fd)  # closing releases the flock

    def take_epoch(self, holder: str, producer: str | None = None) -> int:
        """Become the store's (or ``producer``'s) one committer: the new writer epoch,
        for every ``append`` (``stores.fence``); earlier committers are refused."""
        with self.lock():
            return self.fence.take(holder, producer)

    # -- writing ------------------------------------------------------------
    def settle(self) -> None:
        """Until the small-file merges this log's commits asked for are made (not
        by a thread holding the writer lock: the merge takes it to link its file)."""
        if self._lock_owner != threading.get_ident():
            self.small.wait()

    def append(
        self,
        events: Sequence[Event],
        *,
        before_commit: Callable[[], object] | None = None,
        epoch: int | None = None,
        producer: str | None = None,
        compare_cursors: bool = False,
    ) -> pa.Table:
        """Commit ``events`` as one atomic batch; returns the committed rows (with seq).

        ``before_commit`` runs before the lock is taken (the store makes the batch's
        blobs durable). ``epoch``: the one this committer took (``take_epoch``, the
        store's or ``producer``'s): a stale one is refused. ``compare_cursors``: so
        is a batch whose cursor events start where no cursor stands (off for a tool
        writing a log of any events). A refused batch writes nothing (``stores.fence``).
        """
        events = batch_of(events)  # an event read back from the log is never appended again
        if not events:
            return SCHEMA.empty_table()
        # the critical section is the commit alone (a shard's sync tasks wait on it
        # in turn): rows built and blobs durable first, only seq filled in under it
        rows = events_to_table(events, first_seq=0)
        if before_commit is not None:
            before_commit()
        with self.lock():
            # One listing for the whole append: under the lock no other writer adds,
            # merges or removes a file, so what it shows holds until this write (at
            # 1,000 files a listing costs 4 ms, and an append made six of them).
            try:
                listing = self._dir.listed()
            except FileNotFoundError:
                listing = Listing((), [], [], [])
            self._remove_leftovers(listing.names)
            files = self._dir.chosen(listing)
            # a crashed compaction's leftovers double-count in a glob
            self._remove_covered(listing.every, files)
            first = (files[-1].last if files else 0) + 1
            # the fence first: a refused batch writes nothing, not even its blobs
            stamp = self.fence.check_epoch(epoch, len(events), producer)
            cursors = None
            if compare_cursors:
                cursors = self.fence.check_cursors(
                    events, first - 1, lambda seq, cols: read_after(files, seq, cols)
                )
            table = rows.set_column(
                0, SCHEMA.field("seq"), pa.array(range(first, first + len(events)), pa.int64())
            )
            last = first + len(events) - 1
            self._write(table, first, last, [f.name for f in files], epoch=stamp, producer=producer)
            self.fence.committed(cursors, last)
            self.small.remember(file_name(first, last), table)
        self.small.after_commit()  # (on a thread, outside the lock: ``stores.log.merging``)
        return table

    def _merge(self, run: Sequence[LogFile], doing: str) -> None:
        """Replace the consecutive files ``run`` with one file of their rows (those
        this process holds, else read back and checked). The merged file is
        durable before the small ones go. Under the lock (a compaction)."""
        merged = self.small.rows(run, doing)
        tmp = self.write_temp(merged, run[0].first, run[-1].last)
        self.put_in_place(tmp, run[0].first, run[-1].last)
        self.small.forget([f.name for f in run])
        for f in run:
            f.path.unlink()
        if self.durable:
            fsync_dir(self.root)

    def _write(
        self,
        table: pa.Table,
        first: int,
        last: int,
        present: Sequence[str] | None = None,
        *,
        epoch: int | None = None,
        producer: str | None = None,
        replace: bool = False,
    ) -> Path:
        """``table`` as the file of seqs ``first``..``last`` (``write_temp``, ``put_in_place``)."""
        tmp = self.write_temp(table, first, last, epoch=epoch, producer=producer)
        return self.put_in_place(tmp, first, last, present, replace=replace)

    def write_temp(
        self,
        table: pa.Table,
        first: int,
        last: int,
        *,
        epoch: int | None = None,
        producer: str | None = None,
        prefix: str = ".tmp-",
    ) -> Path:
        """``table`` as the rows of seqs ``first``..``last``, in a durable temporary
        file named ``prefix``FIRST-LAST-PID. ``epoch``: the writer epoch stamped on
        it (None: the store's), with the ``producer`` whose epoch it is, if any."""
        self.small.forget([file_name(first, last)])  # (a rewrite: other rows now)
        if epoch is None:
            epoch = self.fence.current().epoch
        meta = {
            DIGEST_KEY: table_digest(table).encode(),
            FIRST_KEY: str(first).encode(),
            LAST_KEY: str(last).encode(),
            VERSION_KEY: str(SCHEMA_VERSION).encode(),
            EPOCH_KEY: str(epoch).encode(),
        }
        if producer is not None:
            meta[PRODUCER_KEY] = producer.encode()
        table = table.replace_schema_metadata({**(SCHEMA.metadata or {}), **meta})
        # No ".parquet" suffix: a crashed writer's file must not match the
        # documented glob `read_parquet('log/*.parquet')` (DuckDB matches dotfiles).
        tmp = self.root / f"{prefix}{first}-{last}-{os.getpid()}"
        try:
            with open(tmp, "wb", opener=lambda p, fl: os.open(p, fl, 0o600)) as fh:
                arrow.parquet().write_table(
                    table,
                    fh,
                    compression="zstd",
                    row_group_size=ROW_GROUP_ROWS,
                )
                fh.flush()
                if self.durable:
                    os.fsync(fh.fileno())
        except BaseException as exc:
            tmp.unlink(missing_ok=True)  # a full disk: give the space back at once
            if isinstance(exc, OSError):
                raise OSError(exc.errno, f"cannot write the log: {exc.strerror}", str(tmp)) from exc
            raise
        return tmp

    def put_in_place(
        self,
        tmp: Path,
        first: int,
        last: int,
        present: Sequence[str] | None = None,
        *,
        replace: bool = False,
    ) -> Path:
        """Give the finished ``tmp`` its name as the file of ``first``..``last``:
        created only if absent, unless ``replace`` (a purge's rewrite of its rows).
        ``present``: the other log files as the caller listed them under the lock
        (None: list them). Under the lock."""
        final = self.root / file_name(first, last)
        if replace:
            os.replace(tmp, final)
        else:
            if not link_new(tmp, final):
                raise LogIntegrityError(
                    f"{final}: exists already; a commit never replaces a log file"
                    " (another writer committed these seqs)"
                )
        if self.durable:
            fsync_dir(self.root)
        self._note_checked([final], present)
        return final

    # -- integrity at open ----------------------------------------------------
    def check(self) -> None:
        """Refuse a damaged log, naming the file (run when a store is opened).

        Every listed file must exist whole; one never checked before, or whose
        size, mtime or inode changed since, is read in full and its digest,
        row count and seq column compared with its name. Raises LogIntegrityError.
        """
        for attempt in range(20):
            try:
                self._check_once()
                return
            except FileNotFoundError:
                if attempt == 19:  # a file vanished under us again and again: damage
                    raise LogIntegrityError(f"{self.root}: log files keep disappearing") from None
                time.sleep(0.005)  # a compaction removed a file we listed: list again

    def _check_once(self) -> None:
        files = self.files()
        cache = self._checked.load()
        fresh: dict[str, list[int]] = {}
        root = str(self.root)
        for f in files:
            key = stat_key(os.path.join(root, f.name))  # (no Path per file: 1,000 at 1M)
            if cache.get(f.name) != key:
                problem = self.check_file(f)
                if problem is not None:
                    raise LogIntegrityError(problem)
            fresh[f.name] = key
        if fresh != cache:
            self._checked.save(fresh)

    def checked_files(self) -> dict[str, list[int]]:
        """Files found whole, or written whole: name -> ``stat_key`` then."""
        return self._checked.load()

    def check_file(self, f: LogFile) -> str | None:
        """What is wrong with file ``f`` (None when whole and untampered)."""
        return check_file(f)

    def _note_checked(self, paths: Sequence[Path], others: Sequence[str] | None = None) -> None:
        """Remember files this process wrote (and so knows whole) as checked.
        ``others``: the other files of the log (None: list them)."""
        try:
            entries = self._checked.load()
            for path in paths:
                entries[path.name] = stat_key(path)
        except OSError:
            return
        if others is None:
            present = {f.name for f in self._dir.every_file()}
        else:
            present = {*others, *(path.name for path in paths)}
        self._checked.save({k: v for k, v in entries.items() if k in present})

    def _remove_leftovers(self, names: Sequence[str] | None = None) -> None:
        """Drop temporary files of crashed writers (only ever called under the lock).
        ``names``: the directory's names as the caller listed them under the lock."""
        for name in self._dir.listed().names if names is None else names:
            if name.startswith(".tmp-"):
                (self.root / name).unlink(missing_ok=True)

    # -- reading ------------------------------------------------------------
    def read(self, after: int = 0, columns: Sequence[str] | None = None) -> pa.Table:
        """Events with seq > ``after``, in seq order, as a table of the log schema."""
        # A compaction may remove a file we listed (group after group), and a
        # listing taken while it renames may show a gap: list again for as long
        # as the listing keeps changing. A failure on an unchanged listing is damage.
        return self._retried(lambda: read_after(self.files(), after, columns), LogIntegrityError)

    def seq_at(self, when: datetime) -> int:
        """The seq of the last event recorded at or before ``when`` (0: none was).
        (Reads two columns of the whole log: what ``--as-of DATETIME`` pays once.)"""
        pc = arrow.compute()
        table = self.read(columns=["seq", "recorded_at"])
        before = table.filter(pc.less_equal(table.column("recorded_at"), pa.scalar(when)))
        last = pc.max(before.column("seq")).as_py() if before.num_rows else None
        return int(last or 0)

    def read_at(self, seqs: Sequence[int], columns: Sequence[str]) -> pa.Table:
        """``columns`` (and ``seq``) of the events at ``seqs``, reading only the files
        that hold them; retried like ``read`` while a compaction renames files."""
        wanted = sorted(set(seqs))
        return self._retried(lambda: read_at(self.files(), wanted, ["seq", *columns]))

    def _retried(self, read: Callable[[], pa.Table], *also: type[Exception]) -> pa.Table:
        """``read()``, again while the listing of files keeps changing under it (a
        compaction renaming files); a failure on an unchanged listing is raised."""
        retry_on: tuple[type[Exception], ...] = (FileNotFoundError, *also)
        failed_on: list[LogFile] | None = None
        while True:
            try:
                return read()
            except retry_on:
                listing = self._dir.every_file()
                if listing == failed_on:
                    raise
                failed_on = listing
                time.sleep(0.005)

    # -- maintenance --------------------------------------------------------
    def verify(self) -> list[str]:
        """Problems found in the log (empty when it is whole and untampered).

        Every file is read in full, whatever the open-time cache says."""
        problems: list[str] = []
        try:
            files = self.files()
        except LogIntegrityError as exc:
            return [str(exc)]
        for f in files:
            try:
                problem = self.check_file(f)
            except FileNotFoundError:
                problem = f"{f.path}: disappeared while being verified"
            if problem is not None:
                problems.append(problem)
        return problems

    def compact(self, target_rows: int = 100_000) -> tuple[int, int]:
        """Merge runs of small files; returns (files before, files after).

        No event or seq changes. The merged file is durable before the small
        ones are removed, and readers prefer the wider file meanwhile.
        """
        self.small.wait()  # (before the lock: a merge under way waits for it)
        with self.lock():
            self.small.forget(list(self.small.recent))
            self._remove_leftovers()
            files = self.files()
            before = len(files)
            groups: list[list[LogFile]] = []
            current: list[LogFile] = []
            rows = 0
            for f in files:
                if f.rows >= target_rows:
                    if current:
                        groups.append(current)
                    current, rows = [], 0
                    continue
                if current and rows + f.rows > target_rows:
                    groups.append(current)
                    current, rows = [], 0
                current.append(f)
                rows += f.rows
            if current:
                groups.append(current)
            for group in groups:
                if len(group) < 2:
                    continue
                self._merge(group, "compacting")
            self._remove_covered()
            return before, len(self.files())

    def tidy(self) -> None:
        """Remove what a crashed writer or compaction left: temporary files, and
        small files a merged one covers. The caller holds ``lock()``."""
        self._remove_leftovers()
        self._remove_covered()

    def read_checked(self, f: LogFile, doing: str = "compacting") -> pa.Table:
        """File ``f``'s rows, refused when they no longer match its digest or name.

        Compaction and purge write a fresh digest; rewriting an altered file
        would hide the alteration from ``verify`` for good.
        """
        table, problem = checked_rows(f)  # rows against their digest and the file's name
        if table is None:
            raise LogIntegrityError(f"{problem}; not {doing} (run verify)")
        if table.schema.remove_metadata() == _BARE_SCHEMA:
            return table.replace_schema_metadata(SCHEMA.metadata)  # (read once, not twice)
        return arrow.parquet().read_table(f.path, schema=SCHEMA)

    def _remove_covered(
        self, every: Sequence[LogFile] | None = None, chosen: Sequence[LogFile] | None = None
    ) -> None:
        """Remove files wholly covered by a wider one (a compaction that crashed midway).
        ``every`` and ``chosen``: the log files and ``files()`` of one listing the
        caller took under the lock (None: list them)."""
        if every is None or chosen is None:
            every, chosen = self._dir.every_file(), self.files()
        if len(every) == len(chosen):
            return  # nothing is covered
        keep = set(chosen)  # (compared as tuples: a Path per file was 2,000 a commit)
        for f in every:
            if f not in keep:
                f.path.unlink(missing_ok=True)

    def rewrite(self, f: LogFile, table: pa.Table) -> None:
        """Replace file ``f`` with ``table`` (same seq range, every event kept) in one
        atomic rename, with a fresh digest of the new rows; used by a purge.
        Call it under ``lock()``."""
        if table.num_rows != f.rows or table.column("seq").to_pylist() != list(
            range(f.first, f.last + 1)
        ):
            raise LogIntegrityError(f"{f.path}: a rewrite must keep every event and its seq")
        self._write(table.cast(SCHEMA).replace_schema_metadata(None), f.first, f.last, replace=True)

"""The merge of small log files each append asks for (``stores.log.tiers``), made
outside the writer lock.

A merge reads ten small files and writes their rows as one: at 4 committers on
one shard it was a fifth of the time the writer lock was held, and the whole of
its tail (a level-two merge of 510 rows read back from other processes' files:
90 ms at p95, 150 ms at worst), which every other committer waited out. So a
merge now holds the writer lock only to put its finished file in place:

1. Under ``log/.merge-lock`` (taken without waiting: a merge already under way
   elsewhere makes this one unneeded), the run is chosen from a fresh listing,
   each file's ``stat_key`` noted, its rows read (those this process wrote and
   still holds, else read back and digest-checked) and written to a temporary
   ``.merging-FIRST-LAST-PID``, fsynced.
2. Under the writer lock: if every file of the run is still as it was read (a
   purge's rewrite replaces a file, a compaction removes it), the merged file is
   linked into place (created only if absent), the small ones removed and the
   directory fsynced. Else the temporary file goes and nothing changed.

And the committer does not wait for it: a commit returns once its own file is
durable, and the merge runs on a thread of its own (``after_commit``), beside
the committer's next fetch, as a log-structured merge tree compacts in the
background. Measured with 4 committers on one shard, the merge made in the
commit put 90-580 ms on one commit in ten. The thread is not a daemon (a command
ends after its merge), ``wait`` joins it (``EventLog.close``), and a fork of the
process waits for it first (``os.register_at_fork``): a child never starts with
a merge's locks half taken.

Readers never took the writer lock: they see the small files, or the merged file
(the wider is preferred while both exist), as before. A commit's own reads of
the log (the fence's cursors) list under the writer lock and cannot lose a file
to a merge meanwhile. A merger killed anywhere leaves a ``.merging-`` file the
next merger removes (``_remove_leftovers`` of a commit leaves them alone: they
may be a live merge's).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import threading
import weakref
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa

from stores import arrow
from stores.atomic import fsync_dir
from stores.log.files import LogFile, file_name, stat_key
from stores.log.tiers import LIMITS, next_merge

if TYPE_CHECKING:
    from stores.log.event_log import EventLog

__all__ = ["MERGING_PREFIX", "SmallFiles"]

log = logging.getLogger("mailledger.log")

MERGING_PREFIX = ".merging-"
"""The temporary name of a merge under way (never a leftover a commit removes)."""

_RECENT_ROWS = 20_000
"""Rows of the small files it wrote that an ``EventLog`` keeps for their merge."""

_FORK_WAIT = 30.0
"""Seconds a fork waits for a merge under way (one merge holds at most 100,000
events: seconds at worst)."""

_merging: weakref.WeakSet[SmallFiles] = weakref.WeakSet()


def _before_fork() -> None:
    for small in list(_merging):
        small.wait(_FORK_WAIT)


os.register_at_fork(before=_before_fork)


@contextlib.contextmanager
def _merge_lock(path: os.PathLike[str]) -> Iterator[bool]:
    """``log/.merge-lock``, if no other merge holds it (True), without waiting."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except FileNotFoundError:
        yield False
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)  # (releases the flock)


class SmallFiles:
    """The small-file merges of one ``EventLog``, and the rows of the small files
    it wrote that they will take."""

    def __init__(self, event_log: EventLog) -> None:
        self.log = event_log
        self.recent: dict[str, pa.Table] = {}
        self._mu = threading.Lock()  # guards ``recent``, ``_wanted``, ``_thread``
        self._wanted = 0  # merges asked for and not yet made (one a commit)
        self._thread: threading.Thread | None = None

    def after_commit(self) -> None:
        """Have the next run of small files merged, on the merge thread (started if
        none runs): one merge a commit, as many as were asked for."""
        if not self.log.merge_small:
            return
        with self._mu:
            self._wanted += 1
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._run, name="mailledger-log-merge")
            _merging.add(self)
            self._thread.start()

    def _run(self) -> None:
        while True:
            with self._mu:
                if not self._wanted:
                    self._thread = None
                    return
                self._wanted -= 1
            if not self.merge_next():
                with self._mu:
                    self._wanted = 0  # (no run left to merge: the others would find none)

    def wait(self, timeout: float | None = None) -> None:
        """Until the merges asked for are made (or ``timeout`` seconds)."""
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def remember(self, name: str, table: pa.Table) -> None:
        """Keep the rows of small file ``name`` that this process just wrote, for the
        merge that will take it: an import merges its 1,000-event files ten at a
        time, and reading each back and checking its digest cost 0.39 s a merge
        (rows never out of this process's hands need no check). At most
        ``_RECENT_ROWS`` rows are kept, the oldest let go first."""
        if not self.log.merge_small or table.num_rows >= LIMITS[-1]:
            return
        with self._mu:
            recent = self.recent
            recent[name] = table.replace_schema_metadata(None)
            while sum(t.num_rows for t in recent.values()) > _RECENT_ROWS:
                del recent[next(iter(recent))]

    def forget(self, names: Sequence[str]) -> None:
        """Let go of the rows of files ``names`` (merged, rewritten, compacted)."""
        with self._mu:
            for name in names:
                self.recent.pop(name, None)

    def rows(self, run: Sequence[LogFile], doing: str) -> pa.Table:
        """The rows of the consecutive files ``run``: those this process holds, else
        read back and checked against their digests."""
        with self._mu:
            held = [self.recent.get(f.name) for f in run]
        found_whole = self.log.checked_files()
        return pa.concat_tables(
            [
                rows or self._read(f, doing, found_whole.get(f.name))
                for f, rows in zip(run, held, strict=True)
            ]
        )

    def _read(self, f: LogFile, doing: str, whole_as: list[int] | None) -> pa.Table:
        """File ``f``'s rows: checked against its digest, unless the log's cache of
        files found whole (``.checked.json``, which the committer that wrote it
        filled) has it with the ``stat_key`` it has now -- the trust an open of the
        store gives it. (Checking each of another committer's files again made a
        merge of ten 51-event files cost 150 ms at p95 on a shard of 4 committers,
        on a thread beside the commits of its own process.)"""
        if whole_as is not None and whole_as == stat_key(f.path):
            table = arrow.parquet().read_table(f.path, use_threads=False)
            if table.num_rows == f.rows:
                return table.replace_schema_metadata(None)
        return self.log.read_checked(f, doing).replace_schema_metadata(None)

    def merge_next(self) -> bool:
        """Merge the next run of small files (``tiers.next_merge``), if the log has
        one and no other merge is under way (on the merge thread, outside the
        writer lock: ``after_commit``). A merge that fails (a damaged file, a full
        disk) leaves every file as it was and is tried again after a later commit.
        False when the log has no run to merge."""
        ev = self.log
        if not ev.merge_small:
            return False
        with _merge_lock(ev.root / ".merge-lock") as mine:
            if not mine:
                return True  # (another process merges: asked again after the next commit)
            self._remove_stale(os.listdir(ev.root))
            run = next_merge(ev.files(fresh=True))
            if run is None:
                return False
            first, last = run[0].first, run[-1].last
            tmp = None
            try:
                seen = [stat_key(f.path) for f in run]
                merged = self.rows(run, "merging small files")
                tmp = ev.write_temp(merged, first, last, prefix=MERGING_PREFIX)
                with ev.lock():
                    if [stat_key(f.path) for f in run] != seen:
                        return True  # rewritten by a purge meanwhile: merged another time
                    ev.put_in_place(tmp, first, last)
                    tmp = None
                    for f in run:
                        f.path.unlink()
                    if ev.durable:
                        fsync_dir(ev.root)
            except FileNotFoundError:
                return True  # a compaction took the run meanwhile
            except Exception as exc:  # (never the commit's failure: it has committed)
                log.warning("%s: small log files not merged: %s", ev.root, exc)
                return False
            finally:
                if tmp is not None:
                    tmp.unlink(missing_ok=True)
            self.forget([f.name for f in run])
            self.remember(file_name(first, last), merged)
            return True

    def _remove_stale(self, names: Sequence[str]) -> None:
        """Remove what merges killed midway left (under the merge lock: no merge is
        under way)."""
        for name in names:
            if name.startswith(MERGING_PREFIX):
                (self.log.root / name).unlink(missing_ok=True)

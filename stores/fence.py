"""The fence: one committer at a time per store, enforced by the store itself.

A scheduler's lease (Dask's ``Lock`` or ``Semaphore``) expires on a timer: a holder
paused past it keeps writing after its lease is gone. So the store refuses a stale
committer by itself, the way Kafka fences a producer:

- **The writer lock** (``flock`` on ``log/.lock``, ``EventLog.lock``) serializes
  every commit: the critical section is the commit alone, never the fetch.
- **A durable writer epoch** (``STORE/fence/epoch.json``). A committer that must
  be the only one (a cluster's shard committer) takes the epoch: under the lock
  it bumps it and keeps the number. Every commit is stamped with the store's
  epoch (the log file's metadata, ``mailledger.epoch``); a commit made with an
  epoch that is no longer the store's is refused (``StaleEpochError``) and its
  batch discarded. A writer that took no epoch (one person's ``sync`` from cron,
  a ``delete`` from the command line) is serialized by the lock alone, as always.
- **Log files created only if absent** (a hard link, which fails on an existing
  name: ``EventLog``), at the seq the commit found under the lock.
- **Cursors advance by compare-and-set.** A batch's ``cursor-moved`` and
  ``uidvalidity-changed`` events name the position they start from; each must
  match the folder's cursor as the log stands when the batch commits, else the
  batch is refused (``CursorMovedError``): a sync task that ran twice, or a
  committer that planned on a cursor another moved meanwhile, commits once.

The cursors the comparison needs are kept in ``STORE/fence/cursors.json`` with the
seq they reflect, and brought up to the log by reading only the events after that
seq (their cursor columns): a cost that follows the new events, never the store.
The file is derived from the log (deleted, it is rebuilt from it), as every
projection is; it lives here, not among the projections, because the commit
protocol must not read the projections behind the projector's back.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from stores import arrow
from stores.atomic import replace_file
from stores.errors import CursorMovedError, LogIntegrityError, StaleEpochError
from stores.events import CursorMoved, Event, UidvalidityChanged

__all__ = ["CURSOR_COLUMNS", "Fence", "Holder", "holder_name"]

# the columns of the log the cursors are folded from
CURSOR_COLUMNS = (
    "seq", "type", "source", "folder", "uidvalidity", "cursor_to", "new_uidvalidity",
)  # fmt: skip

_MOVED = CursorMoved.type
_UIDV = UidvalidityChanged.type

Cursor = tuple[int | None, int | None]
"""A folder's cursor as the fence compares it: (uidvalidity, last_uid)."""


@dataclass(frozen=True)
class Holder:
    """Who holds the store's writer epoch."""

    epoch: int
    holder: str  # who took it (host, pid, what for): said in a refusal


class Fence:
    """The writer epoch and the cursors' compare-and-set of one store.

    Every method but ``current`` is called under the writer lock (``EventLog``
    holds it while it commits)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._cursors: dict[tuple[str, str], Cursor] | None = None
        self._cursors_seq = -1  # the seq the kept cursors reflect (-1: not loaded)

    def _epoch_file(self, producer: str | None) -> Path:
        if producer is None:
            return self.root / "epoch.json"
        # (a name of the producer's own: account names may hold any character)
        return self.root / "epochs" / f"{hashlib.sha256(producer.encode()).hexdigest()[:32]}.json"

    @property
    def _cursor_file(self) -> Path:
        return self.root / "cursors.json"

    # -- the writer epoch ---------------------------------------------------------
    def current(self, producer: str | None = None) -> Holder:
        """The writer epoch (0: nobody ever took one) of the store, or of ``producer``."""
        path = self._epoch_file(producer)
        try:
            meta = json.loads(path.read_bytes())
        except FileNotFoundError:
            return Holder(0, "")
        except (OSError, ValueError) as exc:
            raise LogIntegrityError(f"{path}: unreadable writer epoch: {exc}") from exc
        return Holder(int(meta["epoch"]), str(meta.get("holder", "")))

    def take(self, holder: str, producer: str | None = None) -> int:
        """Bump the epoch for a new committer (under the writer lock); returns it.
        Durable before it returns: a committer that took an epoch is never handed
        the same number again, whatever crashes.

        ``producer``: the epoch of one producer rather than the store's, as Kafka
        keys a producer's epoch by its transactional id. A cluster's sync task
        takes its account's: a second attempt at the same account (a task Dask
        started again while the first was paused, a second ``sync`` run) fences the
        first, and tasks of other accounts on the same shard go on committing."""
        path = self._epoch_file(producer)
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        epoch = self.current(producer).epoch + 1
        meta = {"epoch": epoch, "holder": holder}
        if producer is not None:
            meta["producer"] = producer
        replace_file(path, (json.dumps(meta) + "\n").encode(), durable=True)
        return epoch

    def check_epoch(self, epoch: int | None, events: int, producer: str | None = None) -> int:
        """The epoch to stamp on the commit; refuses a committer whose ``epoch`` (of
        the store, or of ``producer``) is no longer the current one (None: a
        committer that took no epoch)."""
        now = self.current(producer)
        if epoch is not None and epoch != now.epoch:
            whose = "the store's" if producer is None else f"{producer}'s"
            raise StaleEpochError(
                f"{self.root.parent}: writer epoch {epoch} is stale, {whose} is"
                f" {now.epoch} (taken by {now.holder or 'another committer'});"
                f" the batch of {events} events is discarded"
            )
        return now.epoch

    # -- the cursors' compare-and-set -----------------------------------------------
    def check_cursors(
        self,
        events: Sequence[Event],
        last_seq: int,
        read_after: Callable[[int, Sequence[str]], pa.Table],
    ) -> dict[tuple[str, str], Cursor]:
        """The cursors after ``events`` commit on a log that ends at ``last_seq``;
        refuses a batch one of whose cursor events does not start where its
        folder's cursor stands (``CursorMovedError``). ``read_after(seq, columns)``:
        the log's events after ``seq`` (read only where a writer that compares no
        cursors committed since the file was last brought up to the log)."""
        moves = [e for e in events if isinstance(e, CursorMoved | UidvalidityChanged)]
        cursors = self._up_to(last_seq, read_after)
        if not moves:
            return cursors
        cursors = dict(cursors)
        for e in moves:
            key = (e.source, e.folder)
            now = cursors.get(key)
            if isinstance(e, UidvalidityChanged):
                if (now[0] if now else None) != e.old_uidvalidity:
                    raise _moved(key, f"a UIDVALIDITY change from {e.old_uidvalidity}", now)
                cursors[key] = (e.new_uidvalidity, None)
                continue
            if not _starts_at(e, now):
                raise _moved(key, f"uidvalidity={e.uidvalidity} cursor={e.cursor_from}", now)
            cursors[key] = (e.uidvalidity, e.cursor_to)
        return cursors

    def committed(self, cursors: dict[tuple[str, str], Cursor] | None, last_seq: int) -> None:
        """Record the cursors a commit ending at ``last_seq`` left (from
        ``check_cursors``; None: a commit that compared none, nothing is written).
        Every comparing commit writes them, moved or not: the next commit, in this
        process or another, then finds them at the log's end and reads no log."""
        if cursors is None:
            return
        self._cursors, self._cursors_seq = cursors, last_seq
        by_account: dict[str, dict[str, list[int | None]]] = {}
        for (account, folder), (uidvalidity, last_uid) in sorted(cursors.items()):
            by_account.setdefault(account, {})[folder] = [uidvalidity, last_uid]
        data = json.dumps({"seq": last_seq, "cursors": by_account}, separators=(",", ":"))
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        # (derived: not fsynced, a commit's critical section is short; a copy lost or
        # torn in a crash is rebuilt from the log, whose files are durable)
        replace_file(self._cursor_file, data.encode(), durable=False)

    def cursor(self, account: str, folder: str) -> Cursor | None:
        """The folder's cursor as the fence last recorded it (None: none recorded),
        for a test or a status line: a commit compares against the log itself."""
        return self._load()[1].get((account, folder))

    def _up_to(
        self, last_seq: int, read_after: Callable[[int, Sequence[str]], pa.Table]
    ) -> dict[tuple[str, str], Cursor]:
        """The cursors as the log stands at ``last_seq``: those recorded, brought up
        to it from the events after their seq."""
        if self._cursors is not None and self._cursors_seq == last_seq:
            return self._cursors  # (this process made the last commit)
        seq, cursors = self._load()
        if seq > last_seq:  # (a log restored from an older copy): from the start
            seq, cursors = 0, {}
        if seq < last_seq:
            _fold(cursors, read_after(seq, CURSOR_COLUMNS))
        self._cursors, self._cursors_seq = cursors, last_seq
        return cursors

    def _load(self) -> tuple[int, dict[tuple[str, str], Cursor]]:
        try:
            meta: dict[str, Any] = json.loads(self._cursor_file.read_bytes())
        except FileNotFoundError:
            return 0, {}
        except (OSError, ValueError):
            return 0, {}  # derived: a damaged copy is rebuilt from the log
        cursors = {
            (account, folder): (pos[0], pos[1])
            for account, folders in meta["cursors"].items()
            for folder, pos in folders.items()
        }
        return int(meta["seq"]), cursors


def _starts_at(e: CursorMoved, now: Cursor | None) -> bool:
    """Whether cursor move ``e`` starts where the folder's cursor ``now`` stands."""
    if now is None:
        return e.cursor_from is None  # first contact
    uidvalidity, last_uid = now
    if uidvalidity != e.uidvalidity:
        return False
    if last_uid is None:
        # after a recorded UIDVALIDITY change: the rescan's move names the old
        # cursor (whose UIDs mean nothing now) or none
        return True
    return e.cursor_from == last_uid


def _fold(cursors: dict[tuple[str, str], Cursor], table: pa.Table) -> None:
    """Apply the cursor events of ``table`` (the log's rows, seq order) to ``cursors``:
    the same rule as the ``cursors`` projection."""
    if not table.num_rows:
        return
    pc = arrow.compute()
    moves = table.filter(pc.is_in(table.column("type"), pa.array([_MOVED, _UIDV])))
    for r in moves.to_pylist():
        if r["type"] == _MOVED:
            cursors[(r["source"], r["folder"])] = (r["uidvalidity"], r["cursor_to"])
        elif r["type"] == _UIDV:
            cursors[(r["source"], r["folder"])] = (r["new_uidvalidity"], None)


def _moved(key: tuple[str, str], started: str, now: Cursor | None) -> CursorMovedError:
    account, folder = key
    stands = "no cursor" if now is None else f"uidvalidity={now[0]} cursor={now[1]}"
    return CursorMovedError(
        f"{account} {folder}: the cursor moved underneath this commit: it started from"
        f" {started}, the store's stands at {stands}; the batch is discarded"
    )


def holder_name(what: str) -> str:
    """A holder's name for the epoch file: what took it, on which host, which pid."""
    return f"{what} on {os.uname().nodename} pid {os.getpid()}"

"""Per-shard snapshots: what every cluster read opens instead of a live projection
file (DuckDB lets no other process open a file one process writes, not even to
read it).

A shard's committer publishes one after its commits (``publish_snapshot``):
under the projector's hold, with the projections caught up with the log and the
full-text index with them, it copies both files into ``SHARD/snapshots/.tmp-*``,
fsyncs them, and renames the directory to ``SHARD/snapshots/EPOCH-SEQ``: the
writer epoch and the log's seq it holds, so a reader can say how stale it is. The
newest ``KEEP`` are kept; an older one is removed when no reader holds it (a
reader holds a shared ``flock`` on its ``reader.lock`` while it reads it: the
remover takes it exclusive, without waiting, and leaves it to the next publish
when it cannot).

A copy costs what the shard's files weigh (``docs/scale-out.md`` has the figures);
a publish finds nothing to do, and costs a directory listing, when the newest
snapshot already holds the log's last seq.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stores.atomic import fsync_dir
from stores.errors import UsageError

if TYPE_CHECKING:
    from pipeline.store import MessageStore

__all__ = [
    "KEEP",
    "PROJECTIONS",
    "SNAPSHOTS",
    "TEXT",
    "Snapshot",
    "holding",
    "newest_snapshot",
    "publish_snapshot",
]

KEEP = 2  # snapshots kept per shard, the newest
SNAPSHOTS = "snapshots"
PROJECTIONS = "projections.duckdb"
TEXT = "fulltext.sqlite"
_META = "snapshot.json"
_READER_LOCK = "reader.lock"
_FORMAT = "mailledger-snapshot"


@dataclass(frozen=True)
class Snapshot:
    """One published snapshot of a shard: the projections (and the full-text
    index) as they stood at ``seq``, made under writer epoch ``epoch``."""

    path: Path
    epoch: int
    seq: int
    published_at: float  # (seconds since 1970, the store's clock)
    seconds: float  # what the copy took
    bytes: int  # what it copied

    @property
    def projections(self) -> Path:
        return self.path / PROJECTIONS

    @property
    def text(self) -> Path | None:
        """The full-text index's copy (None: the shard had none to copy)."""
        path = self.path / TEXT
        return path if path.exists() else None


def _read(path: Path) -> Snapshot | None:
    try:
        meta: dict[str, Any] = json.loads((path / _META).read_bytes())
    except (OSError, ValueError):
        return None
    if meta.get("format") != _FORMAT:
        return None
    return Snapshot(
        path,
        int(meta["epoch"]),
        int(meta["seq"]),
        float(meta["published_at"]),
        float(meta.get("seconds", 0.0)),
        int(meta.get("bytes", 0)),
    )


def _published(shard: Path) -> list[Snapshot]:
    """The shard's snapshots, oldest first (by seq, then epoch)."""
    where = Path(shard) / SNAPSHOTS
    try:
        names = [p for p in where.iterdir() if not p.name.startswith(".")]
    except FileNotFoundError:
        return []
    found = [s for s in map(_read, names) if s is not None]
    return sorted(found, key=lambda s: (s.seq, s.epoch))


def newest_snapshot(shard: Path) -> Snapshot | None:
    """The shard's newest published snapshot (None: none yet)."""
    found = _published(shard)
    return found[-1] if found else None


@contextlib.contextmanager
def holding(snapshot: Snapshot) -> Iterator[Snapshot]:
    """Keep ``snapshot`` from being removed while a reader reads it (a shared lock
    on its ``reader.lock``; UsageError when it went before it could be held)."""
    try:
        fd = os.open(snapshot.path / _READER_LOCK, os.O_RDONLY)
    except FileNotFoundError:
        raise UsageError(f"{snapshot.path}: the snapshot was removed; ask again") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        yield snapshot
    finally:
        os.close(fd)


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def publish_snapshot(
    store: MessageStore, *, keep: int = KEEP, min_interval: float = 0.0
) -> Snapshot:
    """Publish a snapshot of ``store`` (a shard) as it stands now; returns it.

    Under the projector's hold: the projections are caught up with the log, the
    full-text index with them, and no fold runs (in this process or another: the
    file is held for writing) while they are copied. Nothing is copied when the
    newest snapshot already holds the log's last seq, or (``min_interval``
    seconds) when it was published less than that ago: it is returned."""
    if keep < 1:
        raise UsageError(f"keep {keep}: at least the newest snapshot is kept")
    from projections.fold import applied_seq
    from stores.fence import Fence

    root = store.root
    where = root / SNAPSHOTS
    newest = newest_snapshot(root)
    if newest is not None and (
        newest.seq == store.log.last_seq()
        or store.clock.now().timestamp() - newest.published_at < min_interval
    ):
        _remove_old(root, keep)  # (those a reader held at the last publish)
        return newest
    where.mkdir(mode=0o700, exist_ok=True)
    projector = store.projector
    start = time.perf_counter()
    tmp = where / f".tmp-{os.getpid()}-{os.urandom(4).hex()}"
    tmp.mkdir(mode=0o700)
    try:
        with projector.hold():
            store.catch_up()
            con = projector.writer()  # (held for writing: no other process folds meanwhile)
            seq = applied_seq(con)
            epoch = Fence(root / "fence").current().epoch
            if projector.fulltext is not None:
                projector.fulltext.sync(con)
                _copy_text(projector.fulltext.path, tmp / TEXT)
            con.execute("CHECKPOINT")  # (the file whole, its WAL empty)
            shutil.copyfile(projector.db_path, tmp / PROJECTIONS)
        copied = sum(p.stat().st_size for p in tmp.iterdir())
        for path in tmp.iterdir():
            _fsync_file(path)
        (tmp / _READER_LOCK).touch(mode=0o600)
        seconds = time.perf_counter() - start
        meta = {
            "format": _FORMAT,
            "epoch": epoch,
            "seq": seq,
            "published_at": store.clock.now().timestamp(),
            "seconds": round(seconds, 4),
            "bytes": copied,
        }
        (tmp / _META).write_text(json.dumps(meta) + "\n")
        _fsync_file(tmp / _META)
        fsync_dir(tmp)
        final = where / f"{epoch}-{seq}"
        if final.exists():  # (published by another process meanwhile: the same content)
            shutil.rmtree(tmp)
        else:
            os.rename(tmp, final)
            fsync_dir(where)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _remove_old(root, keep)
    made = _read(final)
    assert made is not None
    return made


def _copy_text(source: Path, dest: Path) -> None:
    """A consistent copy of the full-text index (SQLite's backup: the committed
    pages, those still in its WAL included), left in rollback-journal mode so that
    a read-only reader needs no ``-shm`` beside it."""
    import apsw

    if not source.exists():
        return
    src = apsw.Connection(str(source), flags=apsw.SQLITE_OPEN_READONLY)
    out = apsw.Connection(str(dest))
    try:
        with out.backup("main", src, "main") as backup:
            backup.step()
        for _ in out.execute("PRAGMA journal_mode=DELETE"):
            pass
    finally:
        out.close()
        src.close()


def _remove_old(shard: Path, keep: int) -> None:
    """Remove all but the ``keep`` newest snapshots of ``shard``, those no reader
    holds (one held is left for a later publish), and temporary directories a
    killed publish left (named by a pid no longer running)."""
    for old in _published(shard)[:-keep]:
        try:
            fd = os.open(old.path / _READER_LOCK, os.O_RDONLY)
        except FileNotFoundError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue  # (a reader has it open)
        try:
            gone = old.path.with_name(f".gone-{old.path.name}-{os.getpid()}")
            os.rename(old.path, gone)  # (no reader finds it by name from now on)
            shutil.rmtree(gone, ignore_errors=True)
        finally:
            os.close(fd)
    for left in (Path(shard) / SNAPSHOTS).glob(".tmp-*"):
        pid = left.name.split("-")[1]
        if pid.isdigit() and not _running(int(pid)):
            shutil.rmtree(left, ignore_errors=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True

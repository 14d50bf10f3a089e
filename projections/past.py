"""Past projections: the read model as it stood after a given event (``--as-of``).

Replayed from the log's events up to that seq into a file of its own under the
store's ``cache/`` (``asof-SEQ.duckdb``), built beside it and renamed into place,
and kept for the next question about the same moment; the live
``projections.duckdb`` is never opened. The events up to a seq never change but
by a purge, and a purge removes the whole cache (``Projector.drop``). The few
most recently used files are kept; the others are removed.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import duckdb
import pyarrow as pa

from projections.fold import hash_probe, meta_values
from projections.queries import run_sql
from projections.rebuilds import RebuildFiles, cache_dir
from projections.tables import PROJECTION_VERSION, create_query_views, events_sql
from stores import db
from stores.errors import UsageError
from stores.log import EventLog

__all__ = ["KEEP", "PastProjections", "cache_dir"]

KEEP = 4  # past projection files kept in the cache, the most recently used
_T = TypeVar("_T")


def _usable(path: Path, seq: int) -> bool:
    """True when ``path`` holds projections built by this version's rules and
    hash, up to ``seq``."""
    if not path.exists():
        return False
    try:
        con = db.connect(path, read_only=True)
    except duckdb.Error:
        return False
    try:
        meta = meta_values(con)
        probe = hash_probe(con)
    except duckdb.Error:
        return False
    finally:
        db.release(con)
    version_ok = meta.get("projection_version") == PROJECTION_VERSION
    return version_ok and meta.get("hash_probe") == probe and meta.get("applied_seq") == seq


class PastProjections:
    """The projections of the store at ``root`` as they stood after event ``seq``:
    read as a ``Projector`` is (``read``, ``query``), never written."""

    def __init__(
        self, files: RebuildFiles, log: EventLog, seq: int, *, purging: Callable[[], bool]
    ) -> None:
        """``purging()``: True while a purge runs (or waits to be finished): the
        past is then refused, before and after a build (a build must not keep
        events a purge is erasing)."""
        last = log.last_seq()
        if seq < 0 or seq > last:
            raise UsageError(f"--as-of {seq}: the log holds events 1..{last}")
        if purging():
            raise UsageError("a purge is running or was interrupted: the past is not read")
        self.log = log
        self.seq = seq
        self.path = cache_dir(files.root) / f"asof-{seq}.duckdb"
        if not _usable(self.path, seq):
            ready = lambda: _usable(self.path, seq)  # noqa: E731
            files.build_past(seq, self.path, ready=ready, keep=lambda: not purging())
        with contextlib.suppress(OSError):
            os.utime(self.path)  # (most recently used)
        self._evict()
        self._con: duckdb.DuckDBPyConnection | None = None

    def _evict(self) -> None:
        """Remove all but the ``KEEP`` most recently used files of the cache."""
        kept = sorted(
            self.path.parent.glob("asof-*.duckdb"), key=lambda p: p.stat().st_mtime, reverse=True
        )
        for old in kept[KEEP:]:
            if old != self.path:
                for name in (str(old), f"{old}.wal"):
                    Path(name).unlink(missing_ok=True)

    def _reader(self) -> duckdb.DuckDBPyConnection:
        if self._con is None:
            self._con = db.connect(self.path, read_only=True)
        return self._con

    def close(self) -> None:
        if self._con is not None:
            db.release(self._con)
            self._con = None

    def _define_views(self, con: duckdb.DuckDBPyConnection) -> None:
        """The ``events`` view (and what reads it) up to this seq only."""
        files = [str(f.path) for f in self.log.files() if f.first <= self.seq]
        events = f"SELECT * FROM ({events_sql(con, files)}) WHERE seq <= {int(self.seq)}"
        create_query_views(con, events, temp=True)

    def read(
        self, fn: Callable[..., _T], *args: Any, as_writer: bool = False, views: bool = False
    ) -> _T:
        """``fn(reader, *args)``, as ``Projector.read``; ``as_writer`` is refused."""
        if as_writer:
            raise UsageError("the store as it stood in the past is read only")
        con = self._reader()
        if views:
            self._define_views(con)
        return fn(con, *args)

    def query(self, sql: str, params: Sequence[Any] | None = None) -> pa.Table:
        """SQL over these projections and the ``events`` view up to this seq."""
        con = self._reader()
        self._define_views(con)
        with db.all_threads(con), db.interruptible(con):
            return run_sql(con, sql, params)

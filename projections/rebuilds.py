"""Projection files built from the whole log: made, replaced, replayed to compare.

A rebuild writes a new DuckDB file beside ``projections.duckdb`` (never the file
in use), under a lock rebuilds take turns on, and removes whatever it wrote
however it ends; a rebuild killed midway leaves its files to the next open.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from projections.fold import FOLD_SCHEMA, REBUILD_PHASES, rebuild
from projections.tables import fingerprint
from stores import db
from stores.errors import UsageError
from stores.log import EventLog, LogFile, read_columns

__all__ = ["RebuildFiles", "cache_dir"]

_REPLAY_CHUNK = 50_000


def _remove_build_files(path: Path) -> None:
    """A rebuild's file and everything DuckDB keeps beside it (the WAL, the
    scratch file of staged events, the spill directories)."""
    for name in (str(path), f"{path}.wal", f"{path}.stage", f"{path}.stage.wal"):
        Path(name).unlink(missing_ok=True)
    for name in (f"{path}.tmp", f"{path}.stage.tmp"):
        shutil.rmtree(name, ignore_errors=True)


def cache_dir(root: Path) -> Path:
    """Where the store at ``root`` keeps its past projections (``projections.past``)."""
    return root / "cache"


class RebuildFiles:
    """The rebuilds of the projection file ``db_path`` of the store at ``root``."""

    def __init__(self, root: Path, db_path: Path, log: EventLog) -> None:
        self.root = root
        self.db_path = db_path
        self.log = log
        self.memory_budget: int = db.default_budget()  # bytes a rebuild may use in all
        self._replacement = db_path.with_suffix(".duckdb.rebuild")
        self._scratch = root / "projections.verify.duckdb"

    def log_chunks(self, after: int = 0, upto: int | None = None) -> Iterator[pa.Table]:
        """The log's events after seq ``after`` (up to seq ``upto``, when given), in
        tables of about 50,000 rows."""
        files = [f for f in self.log.files() if f.last > after]
        if upto is not None:
            files = [f for f in files if f.first <= upto]
        while files:
            group: list[LogFile] = []
            rows = 0
            while files and (not group or rows + files[0].rows <= _REPLAY_CHUNK):
                f = files.pop(0)
                group.append(f)
                rows += f.rows
            chunk = self._read_range(group)
            if upto is not None and group[-1].last > upto:
                chunk = chunk.slice(0, max(0, upto - group[0].first + 1))
            yield chunk

    def _read_range(self, group: Sequence[LogFile]) -> pa.Table:
        """The events of files ``group`` (a compaction may have merged them since
        they were listed: then read the same seq range from a fresh listing)."""
        try:
            parts = [read_columns(f.path, FOLD_SCHEMA) for f in group]
        except FileNotFoundError:
            first, last = group[0].first, group[-1].last
            return self.log.read(after=first - 1).slice(0, last - first + 1)
        return pa.concat_tables(parts).replace_schema_metadata(None)

    def _connect(self, path: Path) -> duckdb.DuckDBPyConnection:
        """A connection to a new projection file for a rebuild, its DuckDB memory
        within the budget (the rest is this process's own)."""
        config: dict[str, str | bool | int | float | list[str]] = dict(db.CONFIG)
        config["memory_limit"] = f"{db.duckdb_share(self.memory_budget) >> 20}MiB"
        config["temp_directory"] = str(path) + ".tmp"
        return duckdb.connect(str(path), config=config)

    def _rebuild(
        self,
        con: duckdb.DuckDBPyConnection,
        scratch: Path,
        on_phase: Callable[[str], None] | None = None,
        upto: int | None = None,
    ) -> int:
        # (this process's small-file merges made first: one replacing files under
        # the build failed its read, and the build was made again from the chunks)
        self.log.settle()
        files = self.log.files()
        events = files[-1].last if files else 0
        if upto is not None:  # (the log's files hold later events: the chunks are cut)
            files, events = [], min(events, upto)

        def phase(i: int, name: str) -> None:
            assert on_phase is not None
            on_phase(f"replay of {events:,} events, {i}/{len(REBUILD_PHASES)}: {name}")

        return rebuild(
            con,
            self.log_chunks(upto=upto),
            files=[f.path for f in files],
            scratch=scratch,
            builders=db.builders(self.memory_budget),
            phase=phase if on_phase is not None else None,
        )

    @contextlib.contextmanager
    def _building(self, path: Path) -> Iterator[None]:
        """Hold the build lock (a ``flock`` of the store's directory: no file of its
        own to leave behind) while a rebuild writes ``path``, and remove what the
        rebuild wrote when it ends, however it ends (a kill -9 leaves them to
        ``remove_dead``, at the next open). Rebuilds take turns."""
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

    def remove_dead(self) -> None:
        """Remove the files of rebuilds killed midway (when no rebuild is running),
        the builds of past projections in ``cache/`` included."""
        cache = cache_dir(self.root)
        paths = (self._replacement, self._scratch)
        dead = any(Path(f"{p}{x}").exists() for p in paths for x in ("", ".stage", ".tmp"))
        past = {
            p.with_name(p.name.split(".building")[0] + ".building")
            for p in (cache.glob("*.building*") if cache.is_dir() else ())
        }
        if not dead and not past:
            return
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return  # a rebuild is running
        try:
            for path in (*paths, *past):
                _remove_build_files(path)
        finally:
            os.close(fd)

    def replace(
        self,
        *,
        on_phase: Callable[[str], None] | None = None,
        finish: Callable[[duckdb.DuckDBPyConnection], None] | None = None,
    ) -> int:
        """Rebuild every projection from the log (= ``mailledger replay``); returns
        the last seq. The new file is built beside the old one (``finish`` called on
        it last) and renamed over it, so a crash or a failure midway leaves the old
        projections in use."""
        tmp = self._replacement
        with self._building(tmp):
            con = self._connect(tmp)
            try:
                last = self._rebuild(con, Path(str(tmp) + ".stage"), on_phase)
                if finish is not None:
                    finish(con)
                con.execute("CHECKPOINT")
            finally:
                con.close()
            os.chmod(tmp, 0o600)
            Path(str(self.db_path) + ".wal").unlink(missing_ok=True)
            os.replace(tmp, self.db_path)
        return last

    def create(self) -> None:
        """Build the projection file of a store that has none (a new store, or one
        whose file was deleted) beside it, and put it in place only if it is still
        absent. A connection would otherwise create an empty file that another
        process, finding it empty, replaced with its rebuild under the feet of a
        third that held it (a WAL written for one file, replayed into the other)."""
        tmp = self._replacement
        with self._building(tmp):  # creators take turns with each other and rebuilds
            if self.db_path.exists():
                return  # made by the creator we waited for
            con = self._connect(tmp)
            try:
                self._rebuild(con, Path(str(tmp) + ".stage"))
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

    def fresh_fingerprint(self) -> dict[str, Any]:
        """The fingerprint of projections replayed afresh from the log into a
        scratch file (a large store's replay spills to disk), removed after."""
        with self._building(self._scratch):
            fresh = self._connect(self._scratch)
            try:
                self._rebuild(fresh, Path(str(self._scratch) + ".stage"))
                return dict(fingerprint(fresh))
            finally:
                fresh.close()

    def build_past(
        self, upto: int, path: Path, *, ready: Callable[[], bool], keep: Callable[[], bool]
    ) -> None:
        """Projections replayed from the log's events up to seq ``upto`` only (the
        store as it stood then), built beside ``path`` and renamed onto it, unless
        ``ready()`` says another process did meanwhile; the live file is not
        touched. ``keep()`` is asked last, under the lock ``drop_past`` takes: False
        (a purge began meanwhile) leaves nothing and raises ``UsageError``."""
        tmp = path.with_name(path.name + ".building")
        with self._building(tmp):
            if ready():
                return
            path.parent.mkdir(mode=0o700, exist_ok=True)
            con = self._connect(tmp)
            try:
                self._rebuild(con, Path(str(tmp) + ".stage"), upto=upto)
                con.execute("CHECKPOINT")
            finally:
                con.close()
            if not keep():
                raise UsageError("a purge is running or was interrupted: the past is not read")
            os.chmod(tmp, 0o600)
            Path(f"{path}.wal").unlink(missing_ok=True)
            os.replace(tmp, path)

    def drop_past(self, cache: Path) -> None:
        """Remove every file in ``cache`` (past projections hold mail), waiting for a
        build of one to end first: none is left behind, half-built or not."""
        with self._building(self._scratch.with_name("projections.asof-drop")):
            shutil.rmtree(cache, ignore_errors=True)

    def drop(self) -> None:
        """Remove the projection file and every file DuckDB keeps beside it, and the
        files of killed rebuilds (their staged events hold mail)."""
        with contextlib.suppress(duckdb.Error, OSError):
            db.release(db.connect(self.db_path, read_only=False, timeout=60))  # no other holder
        base = str(self.db_path)
        for name in (base, base + ".wal"):
            Path(name).unlink(missing_ok=True)
        shutil.rmtree(base + ".tmp", ignore_errors=True)
        for path in (self._replacement, self._scratch):
            _remove_build_files(path)

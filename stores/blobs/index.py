"""Where packs hold each blob: ``blobs/.packs.sqlite``, SQLite from the standard library.

A lookup is a B-tree probe, whatever the number of packs, where reading every
pack's index into a dict cost 4.8 s and 300 MB in each process that wanted one
blob of a 1,000,000-message store. The file is derived from the packs.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from stores.blobs.pack import Entry

__all__ = ["Location", "PackIndex"]

_INDEX_VERSION = 3

Location = tuple[str, int, int]  # pack file name, offset, length


class PackIndex:
    """``sha256 -> [(pack, offset, length)]`` of the packs it lists, in SQLite.

    Each process opens its own connection (a forked child opens a new one: a
    SQLite connection must not cross a fork). WAL, so readers never wait for a
    writer; ``synchronous = NORMAL``: a crash may lose the last entries but never
    damages the file, and lost entries come back from the packs themselves (a
    pack the file does not list is indexed at the next listing). A file SQLite
    cannot read is removed and built again from the packs.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._con: sqlite3.Connection | None = None
        self._pid = 0
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            if self._con is not None and self._pid == os.getpid():
                self._con.close()
            self._con = None

    def _exists(self) -> bool:
        """Whether there is an index to read (none before the first pack)."""
        return (self._con is not None and self._pid == os.getpid()) or self.path.exists()

    def connection(self) -> sqlite3.Connection:
        if self._con is not None and self._pid == os.getpid():
            return self._con
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        # Processes open the index at once (an import's workers): its shape is set
        # up by one of them at a time, under a lock, in one transaction; a second
        # opener finds it done. Without the lock one dropped what another had made
        # ("no such table: blobs").
        with _flocked(Path(f"{self.path}.lock")):
            for attempt in range(2):
                con = sqlite3.connect(
                    self.path, timeout=60, isolation_level=None, check_same_thread=False
                )
                try:
                    _set_up(con)
                    break
                except sqlite3.DatabaseError as exc:
                    con.close()
                    if attempt or _errorname(exc) not in _UNREADABLE:
                        raise _os_error(exc, self.path) from exc
                    # not a database: derived, so built again from the packs
                    for suffix in ("", "-wal", "-shm"):
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(f"{self.path}{suffix}")
        os.chmod(self.path, 0o600)
        self._con, self._pid = con, os.getpid()
        return con

    def lookup(self, sha: str) -> list[Location]:
        if not self._exists():
            return []
        with self._lock:
            rows = (
                self.connection()
                .execute(
                    "SELECT p.name, b.off, b.len FROM blobs b JOIN packs p ON p.id = b.pack"
                    " WHERE b.sha = ? ORDER BY p.name",
                    [bytes.fromhex(sha)],
                )
                .fetchall()
            )
        return [(name, off, length) for name, off, length in rows]

    def locate(self, shas: Sequence[str]) -> dict[str, Location]:
        """Where a pack holds each of ``shas`` it lists (the first pack by name, as
        ``lookup``'s first): one query for them all, where a text rebuild's
        workers spent a twentieth of their time on one query a blob."""
        rows = self._rows_of(
            "SELECT b.sha, p.name, b.off, b.len FROM blobs b JOIN packs p ON p.id = b.pack"
            " WHERE b.sha IN ({marks}) ORDER BY p.name DESC",
            set(shas),
        )
        return {sha.hex(): (name, off, length) for sha, name, off, length in rows}

    def present(self, shas: set[str]) -> set[str]:
        """Those of ``shas`` some listed pack holds (one query for them all)."""
        rows = self._rows_of("SELECT DISTINCT sha FROM blobs WHERE sha IN ({marks})", shas)
        return {r[0].hex() for r in rows}

    def _rows_of(self, sql: str, shas: set[str]) -> list[tuple[Any, ...]]:
        """The rows of ``sql`` for ``shas``, its ``{marks}`` their placeholders (in
        as many queries as SQLite's limit on variables needs)."""
        if not shas or not self._exists():
            return []
        keys = [bytes.fromhex(sha) for sha in shas]
        rows: list[tuple[Any, ...]] = []
        with self._lock:
            con = self.connection()
            for at in range(0, len(keys), _SQL_VARS):
                part = keys[at : at + _SQL_VARS]
                rows.extend(con.execute(sql.format(marks=",".join("?" * len(part))), part))
        return rows

    def damaged(self) -> dict[str, str]:
        """Pack name -> what is wrong with it, for the packs indexed by a scan."""
        if not self._exists():
            return {}
        with self._lock:
            rows = (
                self.connection()
                .execute("SELECT name, damage FROM packs WHERE damage IS NOT NULL")
                .fetchall()
            )
        return dict(rows)

    def has(self, name: str) -> bool:
        """Whether pack ``name`` is listed."""
        if not self._exists():
            return False
        with self._lock:
            row = self.connection().execute("SELECT 1 FROM packs WHERE name = ?", [name]).fetchone()
        return row is not None

    def names(self) -> set[str]:
        if not self._exists():
            return set()
        with self._lock:
            return {r[0] for r in self.connection().execute("SELECT name FROM packs")}

    def shas(self) -> list[str]:
        if not self._exists():
            return []
        with self._lock:
            return [r[0].hex() for r in self.connection().execute("SELECT DISTINCT sha FROM blobs")]

    def totals(self) -> tuple[int, int]:
        """(blobs, bytes) of the packs listed (a blob two packs hold counts twice:
        only writers racing on the same content make that)."""
        if not self._exists():
            return 0, 0
        with self._lock:
            blobs, size = (
                self.connection()
                .execute("SELECT coalesce(sum(blobs), 0), coalesce(sum(bytes), 0) FROM packs")
                .fetchone()
            )
        return int(blobs), int(size)

    def add(
        self,
        name: str,
        entries: Sequence[Entry],
        size: int,
        damage: str | None = None,
    ) -> None:
        """List pack ``name`` (``size`` bytes) and its ``entries``; ``damage``: what
        is wrong with it (its entries then come from a scan of its records)."""
        with self._lock:
            con = self.connection()
            with _transaction(con, self.path):
                con.execute(
                    "INSERT OR IGNORE INTO packs (name, blobs, bytes, damage) VALUES (?, ?, ?, ?)",
                    [name, len(entries), size, damage],
                )
                (pack,) = con.execute("SELECT id FROM packs WHERE name = ?", [name]).fetchone()
                con.executemany(
                    "INSERT OR IGNORE INTO blobs VALUES (?, ?, ?, ?)",
                    [(bytes.fromhex(sha), pack, off, length) for sha, off, length in entries],
                )

    def remove(self, name: str) -> None:
        if not self._exists():
            return
        with self._lock:
            con = self.connection()
            with _transaction(con):
                con.execute(
                    "DELETE FROM blobs WHERE pack IN (SELECT id FROM packs WHERE name = ?)", [name]
                )
                con.execute("DELETE FROM packs WHERE name = ?", [name])


# host parameters in one statement: the least any SQLite allows (999 before 3.32)
_SQL_VARS = 999

_UNREADABLE = frozenset({"SQLITE_CORRUPT", "SQLITE_NOTADB"})


def _errorname(exc: sqlite3.Error) -> str:
    return getattr(exc, "sqlite_errorname", "")


def _os_error(exc: sqlite3.DatabaseError, path: Path) -> Exception:
    """A full disk or a failed write of the index as the ``OSError`` the CLI reports
    (the file and the cause); any other SQLite error as it is."""
    name = _errorname(exc)
    if name == "SQLITE_FULL":
        why = "cannot write the blob index: No space left on device"
        return OSError(errno.ENOSPC, why, str(path))
    if name.startswith("SQLITE_IOERR") or name in ("SQLITE_READONLY", "SQLITE_CANTOPEN"):
        return OSError(errno.EIO, f"cannot use the blob index: {exc}", str(path))
    return exc


def _set_up(con: sqlite3.Connection) -> None:
    """The index's shape, in one transaction (the caller holds the set-up lock)."""
    con.execute("PRAGMA journal_mode = WAL")
    con.execute("PRAGMA synchronous = NORMAL")
    with _transaction(con):
        if con.execute("PRAGMA user_version").fetchone()[0] != _INDEX_VERSION:
            con.execute("DROP TABLE IF EXISTS blobs")  # another shape: built again
            con.execute("DROP TABLE IF EXISTS packs")
            con.execute(f"PRAGMA user_version = {_INDEX_VERSION}")
        # a pack by number in the blobs' rows: its name once (half the file);
        # its blobs and bytes counted, so that stats reads no pack
        con.execute(
            "CREATE TABLE IF NOT EXISTS packs (id INTEGER PRIMARY KEY,"
            " name TEXT NOT NULL UNIQUE, blobs INTEGER NOT NULL, bytes INTEGER NOT NULL,"
            " damage TEXT)"
        )
        con.execute(
            "CREATE TABLE IF NOT EXISTS blobs (sha BLOB NOT NULL, pack INTEGER NOT NULL,"
            " off INTEGER NOT NULL, len INTEGER NOT NULL, PRIMARY KEY (sha, pack))"
            " WITHOUT ROWID"
        )
        con.execute("CREATE INDEX IF NOT EXISTS blobs_pack ON blobs (pack)")
    con.execute("SELECT count(*) FROM packs").fetchall()


@contextlib.contextmanager
def _transaction(con: sqlite3.Connection, path: Path | None = None) -> Iterator[None]:
    """One write transaction (``BEGIN IMMEDIATE`` ... ``COMMIT``), rolled back on any
    error; with ``path``, a SQLite error in it is raised as ``_os_error`` says."""
    con.execute("BEGIN IMMEDIATE")
    try:
        yield
        con.execute("COMMIT")
    except BaseException as exc:
        with contextlib.suppress(sqlite3.Error):
            con.execute("ROLLBACK")
        if path is not None and isinstance(exc, sqlite3.DatabaseError):
            raise _os_error(exc, path) from exc
        raise


@contextlib.contextmanager
def _flocked(path: Path) -> Iterator[None]:
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        if exc.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
            raise
        yield  # a store this process cannot write: nobody here sets the index up
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock

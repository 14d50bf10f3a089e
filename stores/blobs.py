"""Raw messages, content-addressed by sha256 and compressed, under ``blobs/``.

Two layouts, both always read:

- ``blobs/ab/abcd...``: one file per blob (single writes: ``put``);
- ``blobs/packs/*.pack``: many blobs in one file (bulk writes: ``put_many``, what
  imports and syncs use). Creating a file costs far more than writing its bytes
  on many file systems (about 0.4 ms an inode on the ext4 this was measured on:
  40 s for 100,000 messages), so a batch of blobs is one file. A pack is a run
  of self-describing records (``MLR1``, sha256, length, encoded blob) followed
  by an index of them with a checksum; a pack whose index is damaged is read by
  scanning its records, so damage costs the blobs it touches, not the pack.

Where packs hold each blob is kept in ``blobs/.packs.sqlite`` (SQLite, from
the standard library): a lookup is a B-tree probe, whatever the number of packs,
where reading every pack's index into a dict cost 4.8 s and 300 MB in each
process that wanted one blob of a 1,000,000-message store. The file is derived:
a pack it does not list (written by a process killed before it recorded it) is
indexed when a reader lists the directory, and a damaged or missing file is
built again from the packs.

Every file is written to a temporary name and renamed into place, so a crash
never leaves a partial blob or pack under its final name. Durability is bought once per batch
with ``flush()`` (one ``syncfs`` of the store's file system instead of one fsync
per message), and the event log calls it before it commits the events that name
the blobs: a blob is durable before the event that names it.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import hashlib
import os
import sqlite3
import struct
import threading
import time
import zlib
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import zstandard

from stores.errors import BlobIntegrityError, NotFoundError

__all__ = ["BlobStore", "encode_blob", "pack_records", "sha256_hex"]

_MAGIC = b"MLB1"
_HEADER = struct.Struct(">4sBQ")  # magic, codec (0 raw, 1 zstd), original size
_RAW, _ZSTD = 0, 1

# packs: records, then the index, then the trailer
_RECORD = struct.Struct(">4s32sQ")  # b"MLR1", sha256 (raw), length of the encoded blob
_RECORD_MAGIC = b"MLR1"
_ENTRY = struct.Struct(">32sQQ")  # sha256 (raw), offset of the encoded blob, its length
_TRAILER = struct.Struct(">4sIIQ")  # b"MLPX", entries, crc32 of the index, index offset
_TRAILER_MAGIC = b"MLPX"
_PACKS = "packs"
_PACK_INDEX = ".packs.sqlite"
_INDEX_VERSION = 3

Location = tuple[str, int, int]  # pack file name, offset, length


def sha256_hex(data: bytes) -> str:
    """The content address of ``data``."""
    return hashlib.sha256(data).hexdigest()


# zstd level 1: what blobs were always written with (Arrow's default level, when
# pyarrow compressed them), so old and new blobs are the same frames. zstandard
# rather than pyarrow: a worker process that fetches, parses and stores mail then
# loads neither pyarrow nor DuckDB (25 MB and 0.1 s to start instead of 85 MB and
# 0.35 s). Its (de)compressor objects are not thread-safe: one per thread.
_ZSTD_LEVEL = 1
_zstd = threading.local()


def _compressor() -> zstandard.ZstdCompressor:
    c = getattr(_zstd, "c", None)
    if c is None:
        c = _zstd.c = zstandard.ZstdCompressor(level=_ZSTD_LEVEL)
    return c


def _decompressor() -> zstandard.ZstdDecompressor:
    d = getattr(_zstd, "d", None)
    if d is None:
        d = _zstd.d = zstandard.ZstdDecompressor()
    return d


def encode_blob(data: bytes) -> bytes:
    """The on-disk form of ``data``: a small header, then zstd (or the raw bytes when
    compression does not pay). Pure, so a worker process can do it."""
    compressed = _compressor().compress(data) if data else b""
    if len(compressed) < len(data):
        return _HEADER.pack(_MAGIC, _ZSTD, len(data)) + compressed
    return _HEADER.pack(_MAGIC, _RAW, len(data)) + data


_libc: list[ctypes.CDLL | None] = []  # (looked up once a process)


def _syncfs_of_libc() -> Any:
    """libc's ``syncfs``, or None. Looked up among the symbols the process has
    loaded already (``CDLL(None)``): ``ctypes.util.find_library`` runs ``ldconfig -p``
    in a subprocess, 3-17 ms and 41M instructions of every command that writes."""
    if not _libc:
        try:
            _libc.append(ctypes.CDLL(None, use_errno=True))
        except OSError:
            _libc.append(None)
    return getattr(_libc[0], "syncfs", None)


def _syncfs(path: Path) -> None:
    """Flush every dirty page of the file system holding ``path`` (Linux syncfs)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        syncfs = _syncfs_of_libc()
        if syncfs is None or syncfs(fd) != 0:
            os.sync()
    finally:
        os.close(fd)


class BlobStore:
    """Content-addressed, compressed raw messages."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._tmp = self.root / ".tmp"
        self._root_s = str(self.root)
        self._tmp_s = str(self._tmp)
        self._shards: set[str] = set()
        self._dirty = False
        self._packs = self.root / _PACKS
        self._packs_s = str(self._packs)
        self._where = _PackIndex(self.root / _PACK_INDEX)  # sha256 -> where packs hold it
        self._pack_names: set[str] = set()  # the packs ``_where`` lists, as last seen
        self._packs_seen: tuple[int, int] | None = None  # the directory's (mtime, size)
        self.damaged: dict[str, str] = {}  # pack name -> what is wrong with it

    def create(self) -> None:
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._tmp.mkdir(mode=0o700, exist_ok=True)

    def path(self, sha: str) -> Path:
        return self.root / sha[:2] / sha

    def _loose(self, sha: str) -> str:
        """``path`` as a string join: building a Path cost a worker 20 us a message."""
        return os.path.join(self._root_s, sha[:2], sha)

    def has(self, sha: str) -> bool:
        if os.path.exists(self._loose(sha)):
            return True
        return bool(self._locate(sha))

    def holding(self, shas: Iterable[str]) -> set[str]:
        """Those of ``shas`` stored (as ``has`` says, without looking for packs written
        since the last ``refresh``): one query of the pack index for them all, and a
        look for a loose file only where its shard directory
        exists (an import's workers ask for every message: a query and a stat each
        cost them a sixth of their time)."""
        wanted = set(shas)
        if not wanted:
            return set()
        found = self._where.present(wanted)
        rest = wanted - found
        if rest:
            try:
                shards = {n for n in os.listdir(self._root_s) if len(n) == 2}
            except FileNotFoundError:
                shards = set()
            found.update(
                sha for sha in rest if sha[:2] in shards and os.path.exists(self._loose(sha))
            )
        return found

    # -- packs ------------------------------------------------------------------
    def _locate(self, sha: str) -> list[Location]:
        """Where packs hold ``sha`` (the directory is re-read when it changed)."""
        where = self._where.lookup(sha)
        if not where and self.refresh():
            where = self._where.lookup(sha)
        return where

    def refresh(self) -> bool:
        """Learn the packs written (or removed) since the last look; True if any."""
        try:
            st = os.stat(self._packs)
        except FileNotFoundError:
            return False
        # a directory changed within the last second may change again under the
        # same coarse mtime: look at it again until it has been still for a while
        seen = (st.st_mtime_ns, st.st_size)
        if seen == self._packs_seen and time.time_ns() - st.st_mtime_ns > 2_000_000_000:
            return False
        names = {n for n in os.listdir(self._packs) if n.endswith(".pack")}
        self._packs_seen = seen
        if names == self._pack_names:
            return False
        if self._pack_names:
            # only the packs new since the last look are asked about (the index is
            # shared: most were listed by the process that wrote them)
            unseen = names - self._pack_names
            indexed = (names & self._pack_names) | {n for n in unseen if self._where.has(n)}
        else:
            indexed = self._where.names()
            for gone in indexed - names:
                self._forget(gone)
        for name in sorted(names - indexed):
            try:
                entries = self._read_index(name)
            except FileNotFoundError:  # removed since the listing (a purge rewrote it)
                names.discard(name)
                continue
            self._where.add(name, entries, _size(self._packs / name), self.damaged.get(name))
        self._pack_names = names
        return True

    def _forget(self, name: str) -> None:
        self._where.remove(name)
        self.damaged.pop(name, None)

    def check_packs(self) -> None:
        """Read every pack's index (scanning those whose index is damaged, which
        ``damaged`` then names): what ``verify`` reports, whichever process first
        indexed the pack."""
        self.refresh()
        for name in sorted(self._pack_names):
            with contextlib.suppress(FileNotFoundError):
                self._read_index(name)

    def _read_index(self, name: str) -> list[tuple[str, int, int]]:
        """(sha256, offset, length) of each blob of pack ``name``: from its index,
        or, when the index is damaged, by scanning its records."""
        path = self._packs / name
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size >= _TRAILER.size:
                fh.seek(size - _TRAILER.size)
                magic, count, crc, at = _TRAILER.unpack(fh.read(_TRAILER.size))
                if magic == _TRAILER_MAGIC and at + count * _ENTRY.size == size - _TRAILER.size:
                    fh.seek(at)
                    raw = fh.read(count * _ENTRY.size)
                    if zlib.crc32(raw) == crc:
                        return [
                            (sha.hex(), off, length) for sha, off, length in _ENTRY.iter_unpack(raw)
                        ]
            fh.seek(0)
            data = fh.read()
        return self._scan(name, data)

    def _scan(self, name: str, data: bytes) -> list[tuple[str, int, int]]:
        """The records of a pack whose index is damaged or missing, read in order
        up to the first damaged one (the damage is kept in ``damaged``)."""
        out = list(pack_records(data))
        at = out[-1][1] + out[-1][2] if out else 0
        self.damaged[name] = (
            f"{self._packs / name}: index damaged or pack cut short; {len(out)} blobs"
            f" read by scanning its records up to byte {at} of {len(data)}"
        )
        return out

    def put_many(self, blobs: Iterable[tuple[str, bytes]]) -> set[str]:
        """Store encoded blobs (sha256, ``encode_blob`` output) in one new pack;
        returns the shas written (those not already stored, each once). Blobs in
        packs the index does not list yet (a writer killed before it listed its
        pack) are written again: a duplicate, never a loss."""
        given = list(blobs)
        held = self.holding(sha for sha, _ in given)
        records: list[tuple[str, bytes]] = []
        fresh: set[str] = set()
        for sha, encoded in given:
            if sha in fresh or sha in held:
                continue
            fresh.add(sha)
            records.append((sha, encoded))
        self._dirty = True  # found ones may be a crashed writer's: flush them too
        if records:
            self._write_pack(records)
        return fresh

    def _write_pack(self, records: list[tuple[str, bytes]]) -> str:
        parts: list[bytes] = []
        entries: list[bytes] = []
        at = 0
        for sha, encoded in records:
            raw_sha = bytes.fromhex(sha)
            head = _RECORD.pack(_RECORD_MAGIC, raw_sha, len(encoded))
            parts += (head, encoded)
            entries.append(_ENTRY.pack(raw_sha, at + len(head), len(encoded)))
            at += len(head) + len(encoded)
        index = b"".join(entries)
        parts += (index, _TRAILER.pack(_TRAILER_MAGIC, len(entries), zlib.crc32(index), at))
        pid = os.getpid()
        name = f"{time.time_ns():020d}-{pid}-{os.urandom(4).hex()}.pack"
        final = os.path.join(self._packs, name)
        tmp = os.path.join(self._tmp_s, f"pack.{pid}.{os.urandom(6).hex()}")
        try:
            os.makedirs(self._packs, mode=0o700, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with open(fd, "wb") as fh:
                fh.writelines(parts)
            os.replace(tmp, final)
        except OSError as exc:  # a full disk, say: name the pack, give the space back
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise OSError(exc.errno, f"cannot write blobs: {exc.strerror}", final) from exc
        self._where.add(
            name,
            [(sha.hex(), off, n) for sha, off, n in map(_ENTRY.unpack, entries)],
            at + len(index) + _TRAILER.size,
        )
        self._pack_names.add(name)
        self._dirty = True
        return name

    def location(self, sha: str) -> tuple[Path, int, int] | None:
        """(file, offset, length) of blob ``sha``'s encoded bytes, or None."""
        legacy = self.path(sha)
        if legacy.exists():
            return legacy, 0, legacy.stat().st_size
        where = self._locate(sha)
        if not where:
            return None
        name, off, length = where[0]
        return self._packs / name, off, length

    def put(self, data: bytes, sha: str | None = None) -> tuple[str, bool]:
        """Store ``data``; returns (sha256, True if new bytes were written).

        The blob is looked for first: data already stored is not compressed again.
        """
        sha = sha or sha256_hex(data)
        # Maybe written by a writer that crashed before its flush: the event we are
        # about to commit names it, so it must be made durable too.
        self._dirty = True
        if self.has(sha):
            return sha, False
        return sha, self._write(sha, encode_blob(data))

    def put_encoded(self, sha: str, encoded: bytes) -> bool:
        """Store a blob already encoded by ``encode_blob``; True if it was new."""
        self._dirty = True  # a blob already there may be a crashed writer's: flush it too
        if self.has(sha):
            return False
        return self._write(sha, encoded)

    def mark_dirty(self) -> None:
        """Blobs were written (or found) by other processes for the next commit:
        the next ``flush()`` must sync. ``syncfs`` covers every page of the file
        system, whichever process wrote it, once that process's writes returned."""
        self._dirty = True

    def _write(self, sha: str, encoded: bytes) -> bool:
        shard = os.path.join(self._root_s, sha[:2])
        final = os.path.join(shard, sha)
        # Unique per writer (threads of one process too, worker processes by their
        # pid): a shared name let one writer truncate the file another was renaming.
        tmp = os.path.join(self._tmp_s, f"{sha}.{os.getpid()}.{os.urandom(6).hex()}")
        try:
            if shard not in self._shards:
                os.makedirs(shard, mode=0o700, exist_ok=True)
                self._shards.add(shard)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with open(fd, "wb") as fh:  # writes every byte (os.write may write fewer)
                fh.write(encoded)
            try:
                os.replace(tmp, final)
            except FileNotFoundError:  # the shard went away under a long-lived writer
                os.makedirs(shard, mode=0o700, exist_ok=True)
                os.replace(tmp, final)
        except OSError as exc:  # a full disk, say: name the blob, give the space back
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise OSError(exc.errno, f"cannot write blob: {exc.strerror}", final) from exc
        return True

    def flush(self) -> None:
        """Make every blob written since the last flush durable."""
        if self._dirty:
            _syncfs(self.root)
            self._dirty = False

    def get(self, sha: str, *, check: bool = True) -> bytes:
        """The raw bytes of blob ``sha``; checks the hash unless told not to."""
        # (strings and os calls, not Path and file objects: 20 us of a 90 us get)
        where = self._loose(sha)
        try:
            blob: bytes | None = _pread(where, 0, None)
        except FileNotFoundError:
            blob = None
        if blob is None:
            for attempt in range(2):
                located = self._locate(sha)
                if not located:
                    break
                name, off, length = located[0]
                where = os.path.join(self._packs_s, name)
                try:
                    blob = _pread(where, off, length)
                    if len(blob) < length:  # cut short since it was indexed: scan it
                        blob = None
                        self._forget(name)
                        entries = self._read_index(name)
                        self._where.add(name, entries, _size(where), self.damaged.get(name))
                        continue
                    break
                except FileNotFoundError:  # rewritten by a purge since: look again
                    self._forget(name)
                    self._pack_names.discard(name)
                    if attempt:
                        raise NotFoundError(f"blob {sha}: {where} is gone") from None
        if blob is None:
            # (a pack another process found damaged is named too: the index keeps it)
            damaged = "; ".join(sorted({**self._where.damaged(), **self.damaged}.values()))
            more = f" (damaged packs: {damaged})" if damaged else ""
            raise NotFoundError(f"blob {sha} is not in {self.root}{more}")
        data = self._decode(sha, blob, where)
        if check and sha256_hex(data) != sha:
            raise BlobIntegrityError(f"blob {sha} in {where} does not match its sha256")
        return data

    def _decode(self, sha: str, blob: bytes, where: Path | str) -> bytes:
        if len(blob) < _HEADER.size:
            raise BlobIntegrityError(f"blob {sha} in {where} is truncated")
        magic, codec, size = _HEADER.unpack_from(blob)
        payload = blob[_HEADER.size :]
        if magic != _MAGIC or codec not in (_RAW, _ZSTD):
            raise BlobIntegrityError(f"blob {sha} in {where} has no mailledger header")
        if codec == _RAW:
            if len(payload) != size:
                raise BlobIntegrityError(f"blob {sha} in {where} is truncated")
            return payload
        try:
            # streamed: a damaged frame header claiming an absurd size allocates nothing
            data = _decompressor().decompressobj().decompress(payload)
        except (zstandard.ZstdError, MemoryError) as exc:
            raise BlobIntegrityError(f"blob {sha} in {where} does not decompress: {exc}") from exc
        if len(data) != size:
            raise BlobIntegrityError(
                f"blob {sha} in {where} does not decompress: {len(data)} bytes, not {size}"
            )
        return data

    def delete(self, sha: str) -> bool:
        """Erase blob ``sha`` (its file, and every pack holding it); True if it existed."""
        return sha in self.delete_many([sha])

    def delete_many(self, shas: Iterable[str]) -> set[str]:
        """Erase blobs; returns those that existed. A pack holding any of them is
        rewritten without them (the new pack is in place before the old goes, so a
        crash leaves copies of the other blobs, never a loss; a re-run erases what
        a crash left)."""
        gone: set[str] = set()
        wanted = set(shas)
        for sha in wanted:
            try:
                self.path(sha).unlink()
                gone.add(sha)
            except FileNotFoundError:
                pass
        self.refresh()
        packs = {w[0] for sha in wanted for w in self._where.lookup(sha)}
        for name in sorted(packs):
            entries = self._read_index(name)
            keep = [(sha, off, n) for sha, off, n in entries if sha not in wanted]
            gone |= {sha for sha, _, _ in entries if sha in wanted}
            if keep:
                with open(self._packs / name, "rb") as fh:
                    data = fh.read()
                self._write_pack([(sha, data[off : off + n]) for sha, off, n in keep])
            os.unlink(self._packs / name)
            self._forget(name)
            self._pack_names.discard(name)
        if gone:
            self._dirty = True
        return gone

    def shas(self) -> Iterator[str]:
        """Every stored blob's sha256 (each once, sorted)."""
        if not self.root.exists():
            return
        self.refresh()
        found = set(self._where.shas())
        for sub in self.root.iterdir():
            if sub.is_dir() and len(sub.name) == 2:
                found.update(f.name for f in sub.iterdir() if len(f.name) == 64)
        yield from sorted(found)

    def count(self) -> int:
        """How many blobs are stored (from the pack index and the loose files: no
        pack is read)."""
        if not self.root.exists():
            return 0
        self.refresh()
        loose = sum(
            1
            for sub in self.root.iterdir()
            if sub.is_dir() and len(sub.name) == 2
            for f in sub.iterdir()
            if len(f.name) == 64
        )
        return self._where.totals()[0] + loose

    def stored_bytes(self) -> int:
        """Bytes the blobs take on disk (compressed, headers and pack indexes included)."""
        if not self.root.exists():
            return 0
        self.refresh()
        total = self._where.totals()[1]  # the packs (their sizes listed: no stat of each)
        for sub in self.root.iterdir():
            if sub.is_dir() and len(sub.name) == 2:
                total += sum(f.stat().st_size for f in sub.iterdir() if f.is_file())
        return total

    def close(self) -> None:
        """Close the blob index's file (it opens again when next needed)."""
        self._where.close()

    def clean_tmp(self) -> None:
        """Remove temporary files a crashed writer left behind.

        Safe while others write: a file whose writer (the pid in its name) is
        still running, this process included, is in flight and left alone.
        """
        if self._tmp.exists():
            for f in self._tmp.iterdir():
                if not _writer_alive(f.name):
                    f.unlink(missing_ok=True)


class _PackIndex:
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

    def _open(self) -> sqlite3.Connection:
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
                self._open()
                .execute(
                    "SELECT p.name, b.off, b.len FROM blobs b JOIN packs p ON p.id = b.pack"
                    " WHERE b.sha = ? ORDER BY p.name",
                    [bytes.fromhex(sha)],
                )
                .fetchall()
            )
        return [(name, off, length) for name, off, length in rows]

    def present(self, shas: set[str]) -> set[str]:
        """Those of ``shas`` some listed pack holds (one query for them all)."""
        if not shas or not self._exists():
            return set()
        keys = [bytes.fromhex(sha) for sha in shas]
        found: set[str] = set()
        with self._lock:
            con = self._open()
            for at in range(0, len(keys), _SQL_VARS):
                part = keys[at : at + _SQL_VARS]
                marks = ",".join("?" * len(part))
                rows = con.execute(f"SELECT DISTINCT sha FROM blobs WHERE sha IN ({marks})", part)
                found.update(r[0].hex() for r in rows)
        return found

    def damaged(self) -> dict[str, str]:
        """Pack name -> what is wrong with it, for the packs indexed by a scan."""
        if not self._exists():
            return {}
        with self._lock:
            rows = (
                self._open()
                .execute("SELECT name, damage FROM packs WHERE damage IS NOT NULL")
                .fetchall()
            )
        return dict(rows)

    def has(self, name: str) -> bool:
        """Whether pack ``name`` is listed."""
        if not self._exists():
            return False
        with self._lock:
            row = self._open().execute("SELECT 1 FROM packs WHERE name = ?", [name]).fetchone()
        return row is not None

    def names(self) -> set[str]:
        if not self._exists():
            return set()
        with self._lock:
            return {r[0] for r in self._open().execute("SELECT name FROM packs")}

    def shas(self) -> list[str]:
        if not self._exists():
            return []
        with self._lock:
            return [r[0].hex() for r in self._open().execute("SELECT DISTINCT sha FROM blobs")]

    def totals(self) -> tuple[int, int]:
        """(blobs, bytes) of the packs listed (a blob two packs hold counts twice:
        only writers racing on the same content make that)."""
        if not self._exists():
            return 0, 0
        with self._lock:
            blobs, size = (
                self._open()
                .execute("SELECT coalesce(sum(blobs), 0), coalesce(sum(bytes), 0) FROM packs")
                .fetchone()
            )
        return int(blobs), int(size)

    def add(
        self,
        name: str,
        entries: Sequence[tuple[str, int, int]],
        size: int,
        damage: str | None = None,
    ) -> None:
        """List pack ``name`` (``size`` bytes) and its ``entries``; ``damage``: what
        is wrong with it (its entries then come from a scan of its records)."""
        with self._lock:
            con = self._open()
            con.execute("BEGIN IMMEDIATE")
            try:
                con.execute(
                    "INSERT OR IGNORE INTO packs (name, blobs, bytes, damage) VALUES (?, ?, ?, ?)",
                    [name, len(entries), size, damage],
                )
                (pack,) = con.execute("SELECT id FROM packs WHERE name = ?", [name]).fetchone()
                con.executemany(
                    "INSERT OR IGNORE INTO blobs VALUES (?, ?, ?, ?)",
                    [(bytes.fromhex(sha), pack, off, length) for sha, off, length in entries],
                )
                con.execute("COMMIT")
            except BaseException as exc:
                with contextlib.suppress(sqlite3.Error):
                    con.execute("ROLLBACK")
                if isinstance(exc, sqlite3.DatabaseError):
                    raise _os_error(exc, self.path) from exc
                raise

    def remove(self, name: str) -> None:
        if not self._exists():
            return
        with self._lock:
            con = self._open()
            con.execute("BEGIN IMMEDIATE")
            try:
                con.execute(
                    "DELETE FROM blobs WHERE pack IN (SELECT id FROM packs WHERE name = ?)", [name]
                )
                con.execute("DELETE FROM packs WHERE name = ?", [name])
                con.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    con.execute("ROLLBACK")
                raise


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
    con.execute("BEGIN IMMEDIATE")
    try:
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
        con.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            con.execute("ROLLBACK")
        raise
    con.execute("SELECT count(*) FROM packs").fetchall()


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


def _pread(path: str, offset: int, length: int | None) -> bytes:
    """``length`` bytes of the file at ``path`` from ``offset`` (fewer at its end),
    or all of it (None)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        if length is None:
            length = os.fstat(fd).st_size
        parts = []
        while length > 0:
            part = os.pread(fd, length, offset)
            if not part:
                break
            parts.append(part)
            offset += len(part)
            length -= len(part)
        return parts[0] if len(parts) == 1 else b"".join(parts)
    finally:
        os.close(fd)


def _size(path: Path | str) -> int:
    try:
        return os.path.getsize(path)
    except FileNotFoundError:
        return 0


def _writer_alive(tmp_name: str) -> bool:
    """True when the process that named ``{sha}.{pid}.{random}`` may still be writing it."""
    try:
        pid = int(tmp_name.split(".")[1])
    except (IndexError, ValueError):
        return False
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, another user's
    return True


def pack_records(data: bytes) -> Iterator[tuple[str, int, int]]:
    """(sha256, offset, length) of each blob record of pack bytes ``data``, in
    order, up to the first damaged one (read without the pack's index)."""
    at = 0
    while at + _RECORD.size <= len(data):
        magic, sha, length = _RECORD.unpack_from(data, at)
        if magic != _RECORD_MAGIC or at + _RECORD.size + length > len(data):
            return
        yield sha.hex(), at + _RECORD.size, length
        at += _RECORD.size + length

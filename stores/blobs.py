"""Raw messages, content-addressed by sha256 and compressed, under ``blobs/``.

A blob is written to a temporary name and renamed into place, so a crash never
leaves a partial blob under its final name. Durability is bought once per batch
with ``flush()`` (one ``syncfs`` of the store's file system instead of one fsync
per message), and the event log calls it before it commits the events that name
the blobs: a blob is durable before the event that names it.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import hashlib
import os
import struct
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

from stores.errors import BlobIntegrityError, NotFoundError

__all__ = ["BlobStore", "encode_blob", "sha256_hex"]

_MAGIC = b"MLB1"
_HEADER = struct.Struct(">4sBQ")  # magic, codec (0 raw, 1 zstd), original size
_RAW, _ZSTD = 0, 1


def sha256_hex(data: bytes) -> str:
    """The content address of ``data``."""
    return hashlib.sha256(data).hexdigest()


def encode_blob(data: bytes) -> bytes:
    """The on-disk form of ``data``: a small header, then zstd (or the raw bytes when
    compression does not pay). Pure, so a worker process can do it."""
    compressed = pa.compress(data, codec="zstd", asbytes=True) if data else b""
    if len(compressed) < len(data):
        return _HEADER.pack(_MAGIC, _ZSTD, len(data)) + compressed
    return _HEADER.pack(_MAGIC, _RAW, len(data)) + data


def _syncfs(path: Path) -> None:
    """Flush every dirty page of the file system holding ``path`` (Linux syncfs)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        libc_name = ctypes.util.find_library("c")
        libc = ctypes.CDLL(libc_name, use_errno=True) if libc_name else None
        if libc is None or not hasattr(libc, "syncfs") or libc.syncfs(fd) != 0:
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

    def create(self) -> None:
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._tmp.mkdir(mode=0o700, exist_ok=True)

    def path(self, sha: str) -> Path:
        return self.root / sha[:2] / sha

    def has(self, sha: str) -> bool:
        return os.path.exists(os.path.join(self._root_s, sha[:2], sha))

    def put(self, data: bytes, sha: str | None = None) -> tuple[str, bool]:
        """Store ``data``; returns (sha256, True if new bytes were written)."""
        sha = sha or sha256_hex(data)
        if self.has(sha):
            # Maybe written by a writer that crashed before its flush: the event
            # we are about to commit names it, so it must be made durable too.
            self._dirty = True
            return sha, False
        return sha, self.put_encoded(sha, encode_blob(data))

    def put_encoded(self, sha: str, encoded: bytes) -> bool:
        """Store a blob already encoded by ``encode_blob``; True if it was new."""
        shard = os.path.join(self._root_s, sha[:2])
        final = os.path.join(shard, sha)
        self._dirty = True  # a blob already there may be a crashed writer's: flush it too
        if os.path.exists(final):
            return False
        if shard not in self._shards:
            os.makedirs(shard, mode=0o700, exist_ok=True)
            self._shards.add(shard)
        # Unique per writer (threads of one process too): a shared name let one
        # writer truncate the file another was renaming into place.
        tmp = os.path.join(self._tmp_s, f"{sha}.{os.getpid()}.{os.urandom(6).hex()}")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with open(fd, "wb") as fh:  # writes every byte (os.write may write fewer)
                fh.write(encoded)
        except OSError as exc:  # a full disk, say: name the blob, give the space back
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise OSError(exc.errno, f"cannot write blob: {exc.strerror}", final) from exc
        os.replace(tmp, final)
        return True

    def flush(self) -> None:
        """Make every blob written since the last flush durable."""
        if self._dirty:
            _syncfs(self.root)
            self._dirty = False

    def get(self, sha: str, *, check: bool = True) -> bytes:
        """The raw bytes of blob ``sha``; checks the hash unless told not to."""
        try:
            blob = self.path(sha).read_bytes()
        except FileNotFoundError:
            raise NotFoundError(f"blob {sha} is not in {self.root}") from None
        data = self._decode(sha, blob)
        if check and sha256_hex(data) != sha:
            raise BlobIntegrityError(f"blob {self.path(sha)} does not match its sha256")
        return data

    def _decode(self, sha: str, blob: bytes) -> bytes:
        if len(blob) < _HEADER.size:
            raise BlobIntegrityError(f"blob {self.path(sha)} is truncated")
        magic, codec, size = _HEADER.unpack_from(blob)
        payload = blob[_HEADER.size :]
        if magic != _MAGIC or codec not in (_RAW, _ZSTD):
            raise BlobIntegrityError(f"blob {self.path(sha)} has no mailledger header")
        if codec == _RAW:
            if len(payload) != size:
                raise BlobIntegrityError(f"blob {self.path(sha)} is truncated")
            return payload
        try:
            return pa.decompress(payload, decompressed_size=size, codec="zstd", asbytes=True)
        except (OSError, ValueError, MemoryError, pa.ArrowException) as exc:
            # MemoryError: a damaged header claiming an absurd size
            raise BlobIntegrityError(f"blob {self.path(sha)} does not decompress: {exc}") from exc

    def delete(self, sha: str) -> bool:
        """Erase blob ``sha``; True if it existed."""
        try:
            self.path(sha).unlink()
        except FileNotFoundError:
            return False
        self._dirty = True
        return True

    def shas(self) -> Iterator[str]:
        """Every stored blob's sha256."""
        if not self.root.exists():
            return
        for sub in sorted(self.root.iterdir()):
            if sub.is_dir() and len(sub.name) == 2:
                for f in sorted(sub.iterdir()):
                    if len(f.name) == 64:
                        yield f.name

    def stored_bytes(self) -> int:
        """Bytes the blobs take on disk (compressed, headers included)."""
        return sum(self.path(s).stat().st_size for s in self.shas())

    def clean_tmp(self) -> None:
        """Remove temporary files a crashed writer left behind.

        Safe while others write: a file whose writer (the pid in its name) is
        still running, this process included, is in flight and left alone.
        """
        if self._tmp.exists():
            for f in self._tmp.iterdir():
                if not _writer_alive(f.name):
                    f.unlink(missing_ok=True)


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

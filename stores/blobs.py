"""Raw messages, content-addressed by sha256 and compressed, under ``blobs/``.

A blob is written to a temporary name and renamed into place, so a crash never
leaves a partial blob under its final name. Durability is bought once per batch
with ``flush()`` (one ``syncfs`` of the store's file system instead of one fsync
per message), and the event log calls it before it commits the events that name
the blobs: a blob is durable before the event that names it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import hashlib
import os
import struct
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

from stores.errors import BlobIntegrityError, NotFoundError

__all__ = ["BlobStore", "sha256_hex"]

_MAGIC = b"MLB1"
_HEADER = struct.Struct(">4sBQ")  # magic, codec (0 raw, 1 zstd), original size
_RAW, _ZSTD = 0, 1


def sha256_hex(data: bytes) -> str:
    """The content address of ``data``."""
    return hashlib.sha256(data).hexdigest()


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
        self._dirty = False

    def create(self) -> None:
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._tmp.mkdir(mode=0o700, exist_ok=True)

    def path(self, sha: str) -> Path:
        return self.root / sha[:2] / sha

    def has(self, sha: str) -> bool:
        return self.path(sha).exists()

    def put(self, data: bytes, sha: str | None = None) -> tuple[str, bool]:
        """Store ``data``; returns (sha256, True if new bytes were written)."""
        sha = sha or sha256_hex(data)
        final = self.path(sha)
        if final.exists():
            return sha, False
        compressed = pa.compress(data, codec="zstd", asbytes=True) if data else b""
        if len(compressed) < len(data):
            payload, codec = compressed, _ZSTD
        else:
            payload, codec = data, _RAW
        final.parent.mkdir(mode=0o700, exist_ok=True)
        tmp = self._tmp / f"{sha}.{os.getpid()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, _HEADER.pack(_MAGIC, codec, len(data)) + payload)
        finally:
            os.close(fd)
        os.replace(tmp, final)
        self._dirty = True
        return sha, True

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
            return payload
        try:
            return pa.decompress(payload, decompressed_size=size, codec="zstd", asbytes=True)
        except (OSError, ValueError, pa.ArrowException) as exc:
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
        """Remove temporary files a crashed writer left behind."""
        if self._tmp.exists():
            for f in self._tmp.iterdir():
                f.unlink(missing_ok=True)

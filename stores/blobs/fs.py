"""The file-system calls the blob store makes in its own way: one ``syncfs`` per
batch instead of an fsync per file, reads by offset, and the test of whether a
temporary file's writer is still alive."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path
from typing import Any

__all__ = ["pread", "size_of", "syncfs", "writer_alive"]

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


def syncfs(path: Path) -> None:
    """Flush every dirty page of the file system holding ``path`` (Linux syncfs)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        call = _syncfs_of_libc()
        if call is None or call(fd) != 0:
            os.sync()
    finally:
        os.close(fd)


def pread(path: str, offset: int, length: int | None) -> bytes:
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


def size_of(path: Path | str) -> int:
    try:
        return os.path.getsize(path)
    except FileNotFoundError:
        return 0


def writer_alive(tmp_name: str) -> bool:
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

"""Files replaced or created whole: a reader sees the old content or the new,
never a part, and (when durable) a crash after the call keeps the new.

The one copy of the pattern every small state file of a store uses (dispatch
checkpoints, the purge journal, the log's cache of checked files, the store's
marker): write a temporary file, fsync it, rename or link it into place, fsync
the directory.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

__all__ = ["create_once", "fsync_dir", "link_new", "replace_file", "replacing", "unique_name"]


def fsync_dir(path: Path) -> None:
    """Make the names in directory ``path`` durable (a rename, a link, an unlink)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def unique_name(path: Path, prefix: str | None = None, suffix: str = ".tmp") -> Path:
    """A temporary name beside ``path`` that no other process or call uses:
    ``{prefix}{pid}.{random}{suffix}`` (prefix: ``.{name}.``). Callers that clean
    up after a crash choose a prefix and suffix they recognise."""
    head = f".{path.name}." if prefix is None else prefix
    return path.with_name(f"{head}{os.getpid()}.{os.urandom(4).hex()}{suffix}")


def _write_new(tmp: Path, data: bytes, mode: int, *, durable: bool) -> None:
    """``data`` in ``tmp`` (truncated if a crashed run left it), fsynced if durable;
    nothing left behind on failure."""
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if durable:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)


def replace_file(
    path: Path,
    data: bytes,
    *,
    mode: int = 0o600,
    durable: bool = True,
    tmp: Path | None = None,
) -> None:
    """``path`` holds ``data``, whole, whatever it held before.

    ``durable=False`` skips both fsyncs (a cache that may be lost, never half
    written). ``tmp``: the temporary file (default a ``unique_name``); a fixed
    name is for a single writer that removes its own leftover after a crash."""
    tmp = tmp or unique_name(path)
    _write_new(tmp, data, mode, durable=durable)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if durable:
        fsync_dir(path.parent)


@contextmanager
def replacing(path: Path, *, mode: int = 0o600) -> Iterator[BinaryIO]:
    """A file to write that becomes ``path``, whole, when the block ends without
    an error: streamed into a temporary beside ``path``, fsynced, renamed over it,
    the directory fsynced. An error inside the block (or while finishing) removes
    the temporary and leaves ``path`` as it was. ``mode``: the new file's
    permissions, whatever the umask. For content too big to hold in
    memory at once (``replace_file`` takes bytes)."""
    tmp = unique_name(path)
    fh = os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode), "wb")
    try:
        with fh:
            os.fchmod(fh.fileno(), mode)  # (exactly: a file replaced keeps the mode it had)
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def create_once(path: Path, data: bytes, *, mode: int = 0o600, tmp: Path | None = None) -> bool:
    """``path`` created holding ``data`` unless it exists; True when this call
    created it. Of concurrent callers exactly one wins (a hard link fails on an
    existing name). On a file system without hard links the content is renamed
    into place, which is right only when every caller writes the same bytes."""
    tmp = tmp or unique_name(path)
    _write_new(tmp, data, mode, durable=True)
    try:
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        except OSError:
            os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(path.parent)
    return True


def link_new(tmp: Path, final: Path) -> bool:
    """Give the finished file ``tmp`` the name ``final`` only if no file has it
    (a hard link fails on an existing name); ``tmp`` is gone either way. False when
    ``final`` exists: nothing replaced. On a file system without hard links, a
    rename after a look (whatever serializes the callers is then the only guard).
    The caller fsyncs the directory."""
    try:
        os.link(tmp, final)
    except FileExistsError:
        tmp.unlink(missing_ok=True)
        return False
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
            tmp.unlink(missing_ok=True)
            raise
        if final.exists():
            tmp.unlink(missing_ok=True)
            return False
        os.replace(tmp, final)
        return True
    tmp.unlink()
    return True

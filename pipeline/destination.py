"""Paths the user names for mailledger to write into (``export``'s DEST, and
whatever a later command writes where it is told): one rule for what such a
path may be and how it is written, so that no command replaces what it was
pointed at.

A file (``open_user_file``):

- ``-`` is standard output, streamed.
- A regular file, or a name not yet taken in a directory that exists: written
  beside it and renamed over it at the end (``stores.atomic.replacing``): a
  reader sees the old content or the new, an error leaves the old and no
  temporary. A file replaced keeps its permissions; a new one is 0600 (mail).
- A symlink is written through to what it points at (resolved whole); the link
  stays a link. A regular file at its end is replaced as above, in the target's
  own directory. A dangling symlink is refused: a file is never created where
  a link points (how a link planted in a shared directory steers a write
  elsewhere); name the target itself to create it.
- A FIFO or a character device (``/dev/null``, ``/dev/stdout``, a terminal) is
  opened and written as a stream: never renamed over, never created.
- A directory, a block device (mail written over a disk is never what was
  meant), a socket: refused.
- A parent that does not exist or is no directory: refused, naming the path
  as it was given.

A directory (``user_directory``, a Maildir's DEST): one that exists, or a
symlink to one (followed: written into the target, the link kept), or a new
name in a directory that exists (created, 0700; its parents never are).
Anything else is refused, ``-`` too.

Refusals are ``UsageError`` (exit 2) and happen before anything is written;
a path that cannot be opened for writing (no permission, a read-only file
system) is one too. A failure once writing has begun (a full disk) is a
``MailledgerError`` naming the path as given, never a temporary name.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Literal

from stores.atomic import replacing
from stores.errors import MailledgerError, UsageError

__all__ = ["STDOUT", "UserPath", "classify", "is_stdout", "open_user_file", "user_directory"]

STDOUT = "-"  # the name that means standard output (as a str only: Path("./-") is a file)

Kind = Literal["stdout", "new", "file", "stream", "directory"]


@dataclass(frozen=True)
class UserPath:
    """What a named path is: ``kind`` (``stdout``; ``new``: nothing there yet, in
    a directory that exists; ``file``: a regular file; ``stream``: a FIFO or a
    character device; ``directory``), and ``target``, what is written (symlinks
    resolved, but for a stream: its name as given; None for stdout)."""

    given: str
    kind: Kind
    target: Path | None


def classify(given: str | os.PathLike[str]) -> UserPath:
    """What ``given`` names, symlinks followed; ``UsageError`` for what no command
    writes (see the module's rule). Only the string ``-`` is stdout."""
    if isinstance(given, str) and given == STDOUT:
        return UserPath(STDOUT, "stdout", None)
    name = os.fspath(given)
    path = Path(name)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        _check_parent(name, path)
        return UserPath(name, "new", path)
    except NotADirectoryError:
        raise UsageError(f"{name}: {path.parent} is not a directory") from None
    target = path
    if stat.S_ISLNK(st.st_mode):
        try:
            st = os.stat(path)
        except FileNotFoundError:
            raise UsageError(
                f"{name}: a symlink to {os.readlink(path)}, which does not exist"
                " (nothing is created through a link: name the file itself)"
            ) from None
        except OSError as exc:  # a loop, a component that is no directory
            raise UsageError(f"{name}: a symlink that cannot be followed: {exc.strerror}") from None
        target = Path(os.path.realpath(path))
    mode = st.st_mode
    if stat.S_ISREG(mode):
        return UserPath(name, "file", target)
    if stat.S_ISDIR(mode):
        return UserPath(name, "directory", target)
    if stat.S_ISFIFO(mode) or stat.S_ISCHR(mode):
        # opened by the name given: /dev/stdout's link ends in /proc/self/fd/1,
        # which the kernel follows to a pipe that no path names
        return UserPath(name, "stream", path)
    what = "a block device" if stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else None
    raise UsageError(f"{name}: {what or 'not a file'}: mailledger does not write into it")


def is_stdout(given: str | os.PathLike[str]) -> bool:
    """Whether writing ``given`` writes where standard output goes (``-``,
    ``/dev/stdout``, the file stdout was redirected to): a command then tells
    what it did on stderr, not in the middle of what it wrote."""
    if isinstance(given, str) and given == STDOUT:
        return True
    try:
        there, out = os.stat(given), os.fstat(sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # (no such file; a stdout with no fd)
        return False
    return (there.st_dev, there.st_ino) == (out.st_dev, out.st_ino)


def _check_parent(name: str, path: Path) -> None:
    parent = path.parent
    if not parent.is_dir():
        raise UsageError(f"{name}: no such directory: {parent}")


@contextmanager
def open_user_file(
    given: str | os.PathLike[str], *, append: bool = False, mode: int = 0o600
) -> Iterator[BinaryIO]:
    """A binary file to write what ``given`` should hold, by the module's rule.

    The write is finished (flushed; fsynced and renamed into place for a file)
    when the block ends; an error inside the block leaves a regular file as it
    was. ``append``: an existing regular file is added to in place instead,
    opened for reading too, positioned at its end (the caller may look at how
    it ends); a stream or stdout is written as ever. ``mode``: a new file's."""
    dest = classify(given)
    if dest.kind == "stdout":
        out = sys.stdout.buffer
        yield out
        out.flush()
        return
    target = dest.target
    assert target is not None
    if dest.kind == "directory":
        raise UsageError(f"{dest.given}: a directory, not a file")
    if dest.kind == "stream" or (dest.kind == "file" and append):
        with _opened(dest, target, stream=dest.kind == "stream") as fh:
            yield fh
            fh.flush()
            if dest.kind == "file":
                os.fsync(fh.fileno())
        return
    if dest.kind == "file":
        mode = stat.S_IMODE(os.stat(target).st_mode)
    stack = ExitStack()
    try:
        fh = stack.enter_context(replacing(target, mode=mode))
    except OSError as exc:  # (nothing written yet: the path cannot be)
        raise _refused(dest, exc) from None
    with stack:
        yield fh  # (an error in the block passes through; the temporary is removed)
        try:
            stack.close()  # fsync, rename over the target, fsync its directory
        except OSError as exc:
            raise MailledgerError(f"{dest.given}: not written: {exc.strerror or exc}") from None


@contextmanager
def _opened(dest: UserPath, target: Path, *, stream: bool) -> Iterator[BinaryIO]:
    """``target`` opened as it is, never created nor truncated (a stream), or
    for reading and writing at its end (an existing file, appended to)."""
    flags = os.O_WRONLY | os.O_NOCTTY if stream else os.O_RDWR
    try:
        fd = os.open(target, flags)
    except OSError as exc:
        raise _refused(dest, exc) from None
    with os.fdopen(fd, "wb" if stream else "r+b") as fh:
        if not stream:
            fh.seek(0, os.SEEK_END)
        yield fh


def _refused(dest: UserPath, exc: OSError) -> UsageError:
    return UsageError(f"{dest.given}: cannot be written: {exc.strerror or exc}")


def user_directory(given: str | os.PathLike[str]) -> Path:
    """The directory to write into for ``given`` (a symlink's target), created
    when it is a new name in a directory that exists; ``UsageError`` otherwise."""
    if isinstance(given, str) and given == STDOUT:
        raise UsageError("-: a directory is needed here, not standard output")
    dest = classify(given)
    assert dest.target is not None
    if dest.kind == "directory":
        return dest.target
    if dest.kind != "new":
        raise UsageError(f"{dest.given}: not a directory")
    try:
        dest.target.mkdir(mode=0o700)
    except FileExistsError:  # (made meanwhile: take it if it is a directory)
        return user_directory(given)
    except OSError as exc:
        raise _refused(dest, exc) from None
    return dest.target

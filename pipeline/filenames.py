"""File names that come from mail: one rule, for every command that names a file
after something a message says (``show --save-attachments``).

A name from a message is hostile input, not a path the user chose
(``pipeline.destination`` is the rule for those): ``../../.ssh/authorized_keys``,
``/etc/cron.d/x``, ``.bashrc``, ``invoice<U+202E>fdp.exe``, a name of 10,000
characters or none at all. :func:`safe_filename` makes it a plain name inside the
directory it is saved in; :func:`create_new` creates it there without following
a link and without replacing anything (``name (1).ext`` when it is taken).

(``export --format=maildir`` names its files from the time, the event seq and
the content hash: nothing from the mail, so it needs none of this.)
"""

from __future__ import annotations

import errno
import os
import unicodedata
from typing import BinaryIO

__all__ = ["MAX_NAME_BYTES", "create_new", "safe_filename"]

MAX_NAME_BYTES = 200
"""The longest name :func:`safe_filename` gives, in UTF-8 bytes: below the 255 of
common file systems, with room for the `` (N)`` of :func:`create_new`."""

_MAX_SUFFIX = 16  # (a longer "extension" is part of the name, not a type)
_UNSAFE = {"Cc", "Cf", "Cs", "Zl", "Zp", "Co", "Cn"}  # controls, format, separators...


def _plain(text: str) -> str:
    """``text`` with each control, format character (bidi overrides, zero-width),
    separator, private-use or unassigned character made ``_``."""
    return "".join("_" if unicodedata.category(c) in _UNSAFE else c for c in text)


def _cut(text: str, limit: int) -> str:
    """The longest start of ``text`` whose UTF-8 holds at most ``limit`` bytes."""
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= limit:
        return text
    return data[:limit].decode("utf-8", "ignore")


def safe_filename(name: str | None, *, fallback: str = "part") -> str:
    """``name`` (a file name a message gives) as a plain file name: never a path,
    never hidden, never a terminal escape, never longer than ``MAX_NAME_BYTES``.

    Only the last component is kept (``/`` and ``\\`` both separate: ``../x``,
    ``/abs``, ``C:\\x`` give ``x``, ``abs``, ``x``); every control, format
    character and separator becomes ``_``; leading dots and blanks go (no
    ``.bashrc``, no ``..``), so do trailing ones; a name cut to length keeps its
    extension. A name that leaves nothing gives ``fallback`` (itself made safe
    the same way: the caller's, such as ``part-3.pdf``; else ``part``)."""
    text = unicodedata.normalize("NFC", name or "")
    text = text.replace("\\", "/").rsplit("/", 1)[-1]
    text = _plain(text).strip(" .\t").lstrip(".-_ ")
    if not text:
        return "part" if name == fallback else safe_filename(fallback, fallback="part")
    stem, dot, suffix = text.rpartition(".")
    if not dot or not stem or len(suffix) > _MAX_SUFFIX:
        stem, suffix = text, ""
    room = MAX_NAME_BYTES - len(suffix.encode("utf-8", "surrogatepass")) - (1 if suffix else 0)
    stem = _cut(stem, room).rstrip(" .")
    return f"{stem}.{suffix}" if suffix else stem


def _numbered(name: str, n: int) -> str:
    stem, dot, suffix = name.rpartition(".")
    if not dot or not stem:
        return f"{name} ({n})"
    return f"{stem} ({n}).{suffix}"


def create_new(dir_fd: int, name: str, *, mode: int = 0o600) -> tuple[str, BinaryIO]:
    """A new file in the directory ``dir_fd`` (an open descriptor: the directory
    cannot be swapped for another between two files), named ``name`` or, when that
    is taken by anything (a file, a directory, a symlink, even a dangling one),
    ``name (1)``, ``name (2)``...: created with ``O_CREAT|O_EXCL|O_NOFOLLOW``,
    so nothing is ever replaced and no link is followed. Returns the name used
    and the file, open for writing."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    for n in range(10_000):
        candidate = name if n == 0 else _numbered(name, n)
        try:
            fd = os.open(candidate, flags, mode, dir_fd=dir_fd)
        except FileExistsError:
            continue
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # (a link where O_NOFOLLOW met one)
                continue
            raise
        return candidate, os.fdopen(fd, "wb")
    raise FileExistsError(errno.EEXIST, "10,000 files of that name already", name)

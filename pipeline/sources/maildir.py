"""Maildir trees, notmuch-style: every file below a root is a message, but
for the files mail programs keep beside them.

Listed here, read by the worker processes (this process hands them paths, not
bytes), committed by the import driver (``pipeline.importing``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import stat
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path

from pipeline.importing import run_import
from pipeline.ingest import Incoming, RunCounts
from pipeline.progress import NO_PROGRESS, Progress
from pipeline.store import MessageStore
from stores.errors import UsageError

__all__ = [
    "MaildirSource",
    "check_maildir",
    "import_maildir",
    "iter_maildir",
    "not_mail_content",
    "not_mail_name",
]

log = logging.getLogger("mailledger.import")

# What is not mail in a Maildir tree, and is skipped (named at INFO, counted as
# ``not_mail``, listed in ``--json``) rather than stored:
# - by name, wherever it is: the files mail programs keep beside the messages
#   (``dovecot*``, ``courier*``, ``maildirfolder``, ``subscriptions``, ``*.lock``,
#   ``*.tmp``), hidden files (``.DS_Store``, ``.mbsyncstate``, ``.keep``) and the
#   thumbnail and folder files of desktops (``Thumbs.db``, ``desktop.ini``);
# - wherever it is: a file that is not a regular file, once symlinks are followed
#   (a FIFO would hold its reader forever, a device such as /dev/zero never end);
# - outside ``cur/`` and ``new/`` only: empty files, and binary files (a NUL byte
#   in the first 4 KiB and no header line at the start: a picture, a database
#   left in the tree).
# A file in ``cur/`` or ``new/`` was delivered as a message: however broken (NUL
# bytes, no header block, empty), it is stored and counted as malformed, never
# dropped.
# So is any loose file that is text. A message saved as UTF-16 has NUL bytes and
# no ASCII header line: only its place in ``cur/`` or ``new/`` tells it is mail.
_CONTROL_PREFIXES = ("dovecot", "courier", "maildirfolder", "subscriptions")
_CONTROL_NAMES = frozenset({"thumbs.db", "desktop.ini"})
_CONTROL_SUFFIXES = (".lock", ".tmp")
_HEAD = 4096
# a header field at the start (after a BOM, or an mbox "From " line some tools keep)
_HEADER_START = re.compile(rb"(?:\xef\xbb\xbf)?(?:From [^\n]*\n)?[\x21-\x39\x3b-\x7e]+[ \t]*:")

NotMail = Callable[[str, str], None]


def not_mail_name(name: str) -> str | None:
    """Why a file called ``name`` is not mail, whatever it holds (None: it may be)."""
    if name.startswith("."):
        return "hidden file"
    low = name.lower()
    if (
        low in _CONTROL_NAMES
        or low.startswith(_CONTROL_PREFIXES)
        or low.endswith(_CONTROL_SUFFIXES)
    ):
        return "control file"
    return None


def not_mail_content(head: bytes) -> str | None:
    """Why a loose file (not in ``cur/`` or ``new/``) whose first bytes are ``head``
    is not mail (None: it is kept as a message, malformed or not)."""
    if b"\0" in head and not _HEADER_START.match(head):
        return "binary, no header lines"
    return None


def check_maildir(root: Path) -> None:
    """Refuse (UsageError) what is not a directory, and a tree with no ``cur/``,
    ``new/`` or ``tmp/`` directory anywhere below it: a Maildir has them (a
    Maildir++ folder too), a home or a documents folder imported by mistake does
    not. Breadth first, stopping at the first one found: a Maildir's own are at
    its top, so the check costs a listing of the top directory."""
    if not root.is_dir():
        raise UsageError(f"{root}: not a directory")
    todo = deque([root])
    while todo:
        here = todo.popleft()
        try:
            entries = list(os.scandir(here))
        except OSError:
            continue
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                if entry.name in ("cur", "new", "tmp"):
                    return
                if not entry.name.startswith(".notmuch"):
                    todo.append(Path(entry.path))
    raise UsageError(
        f"{root}: not a Maildir (no cur/, new/ or tmp/ directory anywhere below it);"
        " nothing imported"
    )


def iter_maildir(root: Path, not_mail: NotMail | None = None) -> Iterator[tuple[str, str, Path]]:
    """(folder, unique name, path) of every message below ``root``, notmuch-style.

    Messages are the files in ``cur/`` and ``new/`` of every folder (Maildir and
    Maildir++ alike) and loose files elsewhere; ``tmp/`` is skipped. The folder
    is the directory's path relative to ``root`` (``INBOX`` for the root, Maildir++
    ``.Sub.Folder`` spelled ``Sub.Folder``). The unique name is the file name
    without its ``:2,FLAGS`` suffix, so a flag change does not make a new location.
    Files that are not mail (see the rule above) are not yielded: ``not_mail`` is
    told each one's path and why.
    """
    for folder, unique, path, _ in _maildir_files(Path(root), not_mail):
        yield folder, unique, Path(path)


def _maildir_files(root: Path, not_mail: NotMail | None) -> Iterator[tuple[str, str, str, int]]:
    """``iter_maildir`` with the path as a string (no Path object per message) and
    the file's size (-1: it could not be read; the reader names the error)."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "tmp" and not d.startswith(".notmuch"))
        here = Path(dirpath)
        delivered = here.name in ("cur", "new")
        folder_dir = here.parent if delivered else here
        rel = folder_dir.relative_to(root).as_posix()
        folder = "INBOX" if rel == "." else "/".join(p.removeprefix(".") for p in rel.split("/"))
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            why = not_mail_name(name)
            size = -1
            if why is None:
                with contextlib.suppress(OSError):
                    st = os.stat(path)
                    size = st.st_size
                    # (a pipe would hold its reader forever, a device such as
                    # /dev/zero never end: neither is a message)
                    why = None if stat.S_ISREG(st.st_mode) else "not a regular file"
            if why is None and not delivered:
                if size == 0:
                    why = "empty file"
                elif size > 0:
                    with contextlib.suppress(OSError), open(path, "rb") as fh:
                        why = not_mail_content(fh.read(_HEAD))
            if why is not None:
                if not_mail is not None:
                    not_mail(path, why)
                continue
            unique = name.split(":2,", 1)[0].split("!2,", 1)[0]
            yield folder, unique, path, size


class MaildirSource:
    """The messages of a Maildir tree (a :class:`~pipeline.sources.MessageSource`).

    A file that cannot be read is counted as an error with its name by the
    ingest. ``progress`` counts the messages offered, out of the files listed
    first (a listing costs no file's content, and only when a progress display
    asks for it). Files that are not mail are named at INFO and counted as
    ``not_mail`` when the import ends.
    """

    lookahead = 3  # (no message bytes are held here: batches can wait for their commit)

    def __init__(self, root: Path) -> None:
        self.root = Path(root).resolve()
        self.label = f"import:maildir:{self.root}"
        self.skipped: list[dict[str, str]] = []

    def _skip(self, path: str, why: str) -> None:
        log.info("not mail, skipped: %s (%s)", path, why)
        self.skipped.append({"path": path, "reason": why})

    def messages(self, progress: Progress) -> Iterator[tuple[Incoming, int]]:
        check_maildir(self.root)
        if progress is not NO_PROGRESS:
            progress.start(None, f"import maildir: listing {self.root}", unit=None)
            progress.start(sum(1 for _ in _maildir_files(self.root, None)), "import maildir")
        for folder, unique, path, size in _maildir_files(self.root, self._skip):
            # (the size bounds the batch: batch_bytes)
            yield Incoming(raw=b"", folder=folder, uidl=unique, path=path, size=max(0, size)), 1

    def finish(self, counts: RunCounts, progress: Progress) -> None:
        counts.not_mail += len(self.skipped)
        counts.not_mail_files.extend(self.skipped)


def import_maildir(
    store: MessageStore,
    root: Path,
    *,
    batch_size: int = 1000,
    progress: Progress = NO_PROGRESS,
    workers: int = 0,
) -> RunCounts:
    """Import every message of a Maildir tree; returns the run counts.

    ``workers`` processes read, parse, compress and store the messages in
    parallel (0: all in this one); this one lists the files and commits.
    """
    return run_import(
        store, MaildirSource(root), batch_size=batch_size, progress=progress, workers=workers
    )

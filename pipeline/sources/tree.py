"""Trees of one-message files, walked as notmuch walks its root: the walk, the
rule of what is not mail, and the source the two tree imports share (``maildir``:
a Maildir tree; ``files``: any tree, MH folders and saved ``.eml`` files too).

Listed here, read by the worker processes (this process hands them paths, not
bytes), committed by the import driver (``pipeline.importing``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import stat
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from pipeline.ingest import Incoming, RunCounts
from pipeline.progress import NO_PROGRESS, Progress
from projections.normalize.flags import maildir_flags

__all__ = [
    "NotMail",
    "TreeSource",
    "Walk",
    "not_mail_content",
    "not_mail_name",
    "walk_tree",
]

log = logging.getLogger("mailledger.import")

# What is not mail in a tree of messages, and is skipped (named at INFO, counted as
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


@dataclass(frozen=True)
class Walk:
    """What differs between the tree imports.

    ``skip_dir``: why a directory of that name is not walked (None: it is);
    ``skip_listing``: why a directory holding those names is not walked (a search
    engine's database); ``folder``: the folder recorded for a directory of mail, from
    its path relative to the root (``.`` for the root); ``not_mail``: the rule by
    name; ``contained``: a symlink whose target is outside the root is named as not
    mail and never read (a tree of saved mail may link anywhere; a Maildir's
    messages are its own); ``flags``: each message's flags are read from its
    file name (``:2,FRS``), and a file in ``new/`` has none set."""

    skip_dir: Callable[[str], str | None]
    folder: Callable[[str], str]
    not_mail: Callable[[str], str | None] = not_mail_name
    skip_listing: Callable[[Sequence[str]], str | None] | None = None
    contained: bool = False
    flags: bool = False


def _inside(path: str, root: str) -> bool:
    return os.path.commonpath([root, os.path.realpath(path)]) == root


def _file_stat(path: str, root: str, contained: bool) -> tuple[str | None, int]:
    """(why the file at ``path`` is not mail or None, its size or -1 when it could
    not be read: the reader names the error). One ``lstat`` for a plain file; a
    symlink is followed (and, ``contained``, only when it stays below ``root``)."""
    try:
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            if contained and not _inside(path, root):
                return "symlink out of the tree", -1
            st = os.stat(path)
    except OSError:
        return None, -1
    # (a pipe would hold its reader forever, a device such as /dev/zero never end:
    # neither is a message)
    return (None if stat.S_ISREG(st.st_mode) else "not a regular file"), st.st_size


def walk_tree(
    root: Path, walk: Walk, not_mail: NotMail | None, unreadable: NotMail | None = None
) -> Iterator[tuple[str, str, str, int]]:
    """(folder, unique name, path, size) of every message below ``root``, notmuch-style:
    directories in name order, each one's files in name order.

    Messages are the files in ``cur/`` and ``new/`` and loose files elsewhere. A
    directory ``cur/`` or ``new/`` is its parent's mail, so the folder is the parent's.
    The unique name is the file name without its Maildir ``:2,FLAGS`` suffix, so a
    flag change does not make a new location. Files that are not mail are not
    yielded: ``not_mail`` is told each one's path and why. The size is -1 when the
    file could not be read (the reader names the error). Symlinked directories are
    not followed (no loop; one inside the tree is walked where it is). A directory
    that cannot be listed is told to ``unreadable`` with the reason (its mail would
    be missing without a word otherwise)."""
    top = str(root)

    def listing_failed(exc: OSError) -> None:
        if unreadable is not None:
            unreadable(str(exc.filename), exc.strerror or str(exc))

    for dirpath, dirnames, filenames in os.walk(root, onerror=listing_failed):
        if walk.skip_listing is not None and (why := walk.skip_listing(filenames)):
            log.info("not walked: %s (%s)", dirpath, why)
            dirnames[:] = []
            continue
        kept = []
        for d in sorted(dirnames):
            why = walk.skip_dir(d)
            sub = os.path.join(dirpath, d)
            if why is None and walk.contained and os.path.islink(sub) and not _inside(sub, top):
                if not_mail is not None:
                    not_mail(sub, "symlink out of the tree")
                continue
            if why is None:
                kept.append(d)
            else:
                log.info("not walked: %s (%s)", sub, why)
        dirnames[:] = kept
        here = Path(dirpath)
        delivered = here.name in ("cur", "new") and here != root
        folder = walk.folder((here.parent if delivered else here).relative_to(root).as_posix())
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            why = walk.not_mail(name)
            size = -1
            if why is None:
                why, size = _file_stat(path, top, walk.contained)
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


class TreeSource:
    """The messages of a tree of files (a :class:`~pipeline.sources.MessageSource`).

    A file that cannot be read is counted as an error with its name by the
    ingest. ``progress`` counts the messages offered, out of the files listed
    first (a listing costs no file's content, and only when a progress display
    asks for it). Files that are not mail are named at INFO and counted as
    ``not_mail`` when the import ends.
    """

    lookahead = 3  # (no message bytes are held here: batches can wait for their commit)

    def __init__(self, root: Path, kind: str, walk: Walk, check: Callable[[Path], None]) -> None:
        """``kind``: the import's name (``maildir``, ``files``), in its source label
        and progress; ``check`` refuses (UsageError) a root that is not such a tree."""
        self.root = Path(root).resolve()
        self.kind = kind
        self.label = f"import:{kind}:{self.root}"
        self.skipped: list[dict[str, str]] = []
        self.unread: list[str] = []  # directories that could not be listed, and why
        self._walk = walk
        self._check = check

    def _skip(self, path: str, why: str) -> None:
        log.info("not mail, skipped: %s (%s)", path, why)
        self.skipped.append({"path": path, "reason": why})

    def _unreadable(self, path: str, why: str) -> None:
        log.info("directory not read: %s (%s)", path, why)
        self.unread.append(f"{path}: directory not read ({why}): its mail is not imported")

    def files(
        self, not_mail: NotMail | None = None, unreadable: NotMail | None = None
    ) -> Iterator[tuple[str, str, str, int]]:
        """``walk_tree`` of this source's root by its rules."""
        return walk_tree(self.root, self._walk, not_mail, unreadable)

    def messages(self, progress: Progress) -> Iterator[tuple[Incoming, int]]:
        self._check(self.root)
        if progress is not NO_PROGRESS:
            progress.start(None, f"import {self.kind}: listing {self.root}", unit=None)
            progress.start(sum(1 for _ in self.files()), f"import {self.kind}")
        for folder, unique, path, size in self.files(self._skip, self._unreadable):
            flags = None
            if self._walk.flags:
                where, name = os.path.split(path)
                flags = maildir_flags(name, in_new=os.path.basename(where) == "new")
            # (the size bounds the batch: batch_bytes)
            yield (
                Incoming(
                    raw=b"", folder=folder, uidl=unique, path=path, size=max(0, size), flags=flags
                ),
                1,
            )

    def finish(self, counts: RunCounts, progress: Progress) -> None:
        # a directory not read is an error of the run (exit 1), counted as one
        # message that could not be read: the sums still balance
        counts.uids_seen += len(self.unread)
        counts.errors += len(self.unread)
        counts.error_details.extend(self.unread)
        counts.not_mail += len(self.skipped)
        counts.not_mail_files.extend(self.skipped)

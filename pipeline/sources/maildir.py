"""Maildir trees, notmuch-style: every file below a root is a message, but
for the files mail programs keep beside them.

The walk and the source are ``pipeline.sources.tree``'s, shared with ``import
files``; what is Maildir's is here: the check that a tree is one, its folder names
(``INBOX``, Maildir++ ``.Sub.Folder``) and the directories left out.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterator
from pathlib import Path

from pipeline.importing import run_import
from pipeline.ingest import RunCounts
from pipeline.progress import NO_PROGRESS, Progress
from pipeline.sources.tree import NotMail, TreeSource, Walk, walk_tree
from pipeline.store import MessageStore
from stores.errors import UsageError

__all__ = ["MaildirSource", "check_maildir", "import_maildir", "iter_maildir"]

# What is not mail in a Maildir tree is the rule of ``pipeline.sources.tree``:
# control files, hidden files and what is not a regular file anywhere; empty and
# binary files outside ``cur/`` and ``new/``.


def _maildir_folder(rel: str) -> str:
    """``INBOX`` for the root, Maildir++ ``.Sub.Folder`` spelled ``Sub.Folder``."""
    return "INBOX" if rel == "." else "/".join(p.removeprefix(".") for p in rel.split("/"))


def _maildir_skip_dir(name: str) -> str | None:
    if name == "tmp":
        return "Maildir tmp/: deliveries in progress"
    if name.startswith(".notmuch"):
        return "notmuch database"
    return None


_MAILDIR = Walk(skip_dir=_maildir_skip_dir, folder=_maildir_folder, flags=True)


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
        " nothing imported (`mailledger import files` reads any tree of one-message files)"
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
    for folder, unique, path, _ in walk_tree(Path(root), _MAILDIR, not_mail):
        yield folder, unique, Path(path)


class MaildirSource(TreeSource):
    """The messages of a Maildir tree (a :class:`~pipeline.sources.MessageSource`),
    by the rules of :class:`~pipeline.sources.tree.TreeSource`."""

    def __init__(self, root: Path) -> None:
        super().__init__(root, "maildir", _MAILDIR, check_maildir)


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

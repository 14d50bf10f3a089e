"""Importers for mail people already have: Maildir trees and mbox files.

Both stream: messages are read one at a time and committed in batches, so
memory stays flat however large the input. Re-running an import adds nothing
for messages already on record at the same location. A Maildir's files are
read by the worker processes (this one only lists them); an mbox is split here.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import re
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from pipeline.ingest import Incoming, Ingest, RunCounts, worker_pool
from pipeline.progress import NO_PROGRESS, Progress
from pipeline.store import MessageStore
from stores.errors import UsageError

__all__ = [
    "check_maildir",
    "import_maildir",
    "import_mbox",
    "iter_maildir",
    "iter_mbox",
    "not_mail_content",
    "not_mail_name",
    "run_import",
    "worker_pool",
]  # fmt: skip

log = logging.getLogger("mailledger.import")

# What is not mail in a Maildir tree, and is skipped (named at INFO, counted as
# ``not_mail``, listed in ``--json``) rather than stored:
# - by name, wherever it is: the files mail programs keep beside the messages
#   (``dovecot*``, ``courier*``, ``maildirfolder``, ``subscriptions``, ``*.lock``,
#   ``*.tmp``), hidden files (``.DS_Store``, ``.mbsyncstate``, ``.keep``) and the
#   thumbnail and folder files of desktops (``Thumbs.db``, ``desktop.ini``);
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


@contextlib.contextmanager
def _bulk(store: MessageStore) -> Iterator[None]:
    """An import folds its batches into the projections in large steps: a fold
    costs mostly per call (and each ends with a checkpoint of the database), so
    fewer, larger folds are faster. Memory stays bounded: pending events are kept
    without their headers and a fold also runs once they hold 128 MB
    (``pipeline.store``), and DuckDB spills a large fold to disk."""
    saved = store.fold_every, store.fold_share
    # 50,000 events, or a quarter of what the store held at the last fold: a fold
    # costs in part a scan of what it touches, so folds spaced in proportion to
    # the store keep an import's cost per message the same into a large store
    store.fold_every, store.fold_share = 50_000, 0.25
    try:
        with store.session():
            yield
    finally:
        store.fold_every, store.fold_share = saved


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
                    size = os.stat(path).st_size
                if size == 0 and not delivered:
                    why = "empty file"
                elif size > 0 and not delivered:
                    with contextlib.suppress(OSError), open(path, "rb") as fh:
                        why = not_mail_content(fh.read(_HEAD))
            if why is not None:
                if not_mail is not None:
                    not_mail(path, why)
                continue
            unique = name.split(":2,", 1)[0].split("!2,", 1)[0]
            yield folder, unique, path, size


def run_import(
    store: MessageStore,
    source: str,
    items: Iterable[tuple[Incoming, int]],
    *,
    batch_size: int = 1000,
    progress: Progress = NO_PROGRESS,
    workers: int = 0,
    lookahead: int = 1,
) -> RunCounts:
    """The one import driver: every ``(message, progress units)`` of ``items`` is
    offered to an ``Ingest`` of ``source`` and committed in batches, with the
    import's folding policy (``_bulk``); returns the run counts.

    ``workers`` processes read, parse, compress and store the messages (0: all
    in this one); none start when ``items`` is empty, so a source that cannot be
    read fails before any pool. ``lookahead``: batches left to the workers
    before the oldest is committed (sources that hand paths, not bytes, hold no
    message here and can let more wait).
    """
    it = iter(items)
    first = next(it, None)
    with worker_pool(workers if first is not None else 0) as pool, _bulk(store):
        ingest = Ingest(store, source, batch_size=batch_size, pool=pool, lookahead=lookahead)
        if first is not None:
            for item, units in itertools.chain([first], it):
                ingest.offer(item)
                progress.advance(units)
        ingest.flush()
    return ingest.counts


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
    parallel (0: all in this one); this one lists the files and commits. A file
    that cannot be read is counted as an error with its name. ``progress``
    counts the messages offered, out of the files listed first (a listing
    costs no file's content, and only when a progress display asks for it).
    """
    root = Path(root).resolve()
    check_maildir(root)
    if progress is not NO_PROGRESS:
        progress.start(None, f"import maildir: listing {root}", unit=None)
        progress.start(sum(1 for _ in _maildir_files(root, None)), "import maildir")
    skipped: list[dict[str, str]] = []

    def skip(path: str, why: str) -> None:
        log.info("not mail, skipped: %s (%s)", path, why)
        skipped.append({"path": path, "reason": why})

    # (the size bounds the batch: batch_bytes) no message bytes are held here:
    # batches can wait for their commit while the workers prepare the next ones
    counts = run_import(
        store,
        f"import:maildir:{root}",
        (
            (Incoming(raw=b"", folder=folder, uidl=unique, path=path, size=max(0, size)), 1)
            for folder, unique, path, size in _maildir_files(root, skip)
        ),
        batch_size=batch_size,
        progress=progress,
        workers=workers,
        lookahead=3,
    )
    counts.not_mail += len(skipped)
    counts.not_mail_files.extend(skipped)
    return counts


def iter_mbox(path: Path) -> Iterator[tuple[int, bytes]]:
    """(ordinal, raw bytes) of each message of an mbox file, streamed line by line.

    A message starts at a ``From `` line at the start of the file or after a
    blank line. The ``From `` separator line is not part of the message; body
    lines are kept exactly as they are in the file (no ``>From`` unquoting, so
    the bytes stored are the bytes that were there).
    """
    n = 0
    buf: list[bytes] = []
    prev_blank = True
    started = False
    with open(path, "rb") as fh:
        for line in fh:
            if prev_blank and line.startswith(b"From "):
                if started:
                    n += 1
                    yield n, _strip_separator_blank(buf)
                buf = []
                started = True
                prev_blank = False
                continue
            if not started:
                if line.strip():
                    raise UsageError(f"{path}: not an mbox file (no 'From ' line first)")
                continue
            buf.append(line)
            prev_blank = line in (b"\n", b"\r\n")
    if started:
        n += 1
        yield n, _strip_separator_blank(buf)


def _strip_separator_blank(lines: list[bytes]) -> bytes:
    # The blank line before the next "From " belongs to the mbox format, not the message.
    if lines and lines[-1] in (b"\n", b"\r\n"):
        lines = lines[:-1]
    return b"".join(lines)


def import_mbox(
    store: MessageStore,
    path: Path,
    *,
    batch_size: int = 1000,
    progress: Progress = NO_PROGRESS,
    workers: int = 0,
) -> RunCounts:
    """Import every message of an mbox file; returns the run counts.

    ``progress`` counts the bytes read, out of the file's size (the number of
    messages is known only at its end): each message's bytes as it is read, the
    separator lines between them at the end.
    """
    path = Path(path).resolve()
    if not path.is_file():
        raise UsageError(f"{path}: not a file")
    size = path.stat().st_size
    progress.start(size, "import mbox", unit="B")
    done = 0

    def messages() -> Iterator[tuple[Incoming, int]]:
        nonlocal done
        for n, raw in iter_mbox(path):
            done += len(raw)
            yield Incoming(raw=raw, folder=path.name, uid=n), len(raw)

    counts = run_import(
        store,
        f"import:mbox:{path}",
        messages(),
        batch_size=batch_size,
        progress=progress,
        workers=workers,
    )
    progress.advance(max(0, size - done))  # the "From " lines between the messages
    return counts

"""Export: the messages a search matches, written out byte for byte from the
blobs, as an mbox file (mboxrd) or a Maildir.

Every body the store holds for a matched Message-ID is written (the first seen,
then the other contents seen under that id, in the order they came), unless
``one_per_id``. Streamed: the matches are read a page at a time (the store is
not held while bodies are written) and one body is in memory at a time,
whatever the number of matches. What comes back in with ``mailledger import``
is the same set of sha256: each ``From `` line of an mbox ends in ``mboxrd``
(``MBOXRD_MARK``), which tells ``import mbox`` to un-quote that message's
``>From `` lines. DEST is written by ``pipeline.destination``'s rule (``-`` is
stdout; a symlink is written through; a FIFO or a device is streamed into).
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

from pipeline.destination import classify, open_user_file, user_directory
from pipeline.progress import NO_PROGRESS, Progress
from pipeline.sources.mbox import MBOXRD_MARK, NO_EOL_MARK
from pipeline.store import MessageStore
from projections.normalize.flags import maildir_letters
from projections.queries import SearchPlan
from stores.atomic import fsync_dir
from stores.errors import MailledgerError, UsageError

__all__ = ["ExportFormat", "ExportReport", "check_dest", "export", "mbox_quote", "mbox_stream"]

ExportFormat = Literal["mbox", "maildir"]

_PAGE = 10_000  # matches read from the store at a time (each page is one query)
# mboxrd: a line that is "From " after any number of ">" gets one ">" more
_FROM_LINE = re.compile(rb"^(>*From )", re.MULTILINE)


@dataclass
class ExportReport:
    """What an export wrote: ``messages`` and their ``bytes`` (as stored);
    ``newline_added``: mbox messages that did not end in a newline and were given
    one (mbox cannot keep such an ending: their From line says so, and ``import
    mbox`` takes it off again); ``variants``: how many of ``messages``
    are another content of a Message-ID already written (all of them are
    written unless ``one_per_id``); ``errors``: messages not written, why."""

    format: str
    dest: str
    messages: int = 0
    bytes: int = 0
    newline_added: int = 0
    variants: int = 0
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def mbox_quote(raw: bytes) -> bytes:
    """``raw`` with every line that is ``>*From `` given one more ``>`` (mboxrd:
    reversible, unlike mboxo, which quotes ``From `` only)."""
    return _FROM_LINE.sub(rb">\1", raw)


def _from_line(sender: str | None, epoch: int | None, *, no_eol: bool = False) -> bytes:
    """The ``From `` separator: the sender (the From address: no envelope is kept),
    the message's date in asctime form, UTC, and the mark of mboxrd quoting
    (after the date, where mbox readers allow more words, as UUCP's
    ``remote from HOST``); ``no_eol``: the mark that also says the message's last
    newline is the writer's."""
    who = "".join((sender or "").split()) or "MAILER-DAEMON"
    try:
        when = time.asctime(time.gmtime(epoch or 0))
    except (OverflowError, OSError, ValueError):
        when = time.asctime(time.gmtime(0))
    mark = NO_EOL_MARK if no_eol else MBOXRD_MARK
    return f"From {who} {when} ".encode("utf-8", "replace") + mark + b"\n"


_Match = tuple[int, str, str, int, str | None, int | None, list[str], list[str] | None]


def _matches(
    store: MessageStore, plan: SearchPlan, size: int, *, variants: bool
) -> Iterator[_Match]:
    after = 0
    while True:
        page = store.export_page(plan, after, size, variants=variants)
        yield from page
        if len(page) < size:
            return
        after = page[-1][0]


def _maildir_messages(dest: Path) -> int:
    return sum(1 for sub in ("cur", "new") if (dest / sub).is_dir() for _ in os.scandir(dest / sub))


def check_dest(fmt: ExportFormat, dest: str | Path, *, append: bool) -> None:
    """Refuse (UsageError) a ``dest`` that would be mixed up: an mbox that exists
    and is not empty, a Maildir holding messages (unless ``append``), anything
    that is not what ``fmt`` writes, and what ``pipeline.destination`` refuses.
    A stream (stdout, a FIFO, a device) is never read: it takes what comes."""
    where = classify(dest)
    name, path = where.given, where.target
    if fmt == "mbox":
        if where.kind == "directory":
            raise UsageError(f"{name}: a directory, not an mbox file")
        if where.kind == "file" and path is not None and path.stat().st_size:
            if not append:
                raise UsageError(f"{name}: not empty (--append adds to it)")
            with open(path, "rb") as fh:
                if not fh.read(5) == b"From ":
                    raise UsageError(f"{name}: not an mbox file (no 'From ' line first)")
        return
    if where.kind == "stdout":
        raise UsageError("-: a Maildir is a directory: it cannot be written to stdout")
    if where.kind == "new":
        return
    if where.kind != "directory" or path is None:
        raise UsageError(f"{name}: not a directory")
    if not any((path / sub).is_dir() for sub in ("cur", "new", "tmp")):
        if any(os.scandir(path)):
            raise UsageError(f"{name}: not empty and not a Maildir (no cur/, new/ or tmp/)")
        return
    held = _maildir_messages(path)
    if held and not append:
        raise UsageError(f"{name}: a Maildir holding {held} messages (--append adds to it)")


def export(
    store: MessageStore,
    plan: SearchPlan,
    fmt: ExportFormat,
    dest: str | Path,
    *,
    append: bool = False,
    one_per_id: bool = False,
    page: int = _PAGE,
    progress: Progress = NO_PROGRESS,
) -> ExportReport:
    """Write every match of ``plan`` to ``dest`` in the order the store received
    them, each with the other contents stored under its Message-ID right after
    it (``one_per_id``: the first seen only); returns what was written. ``dest``
    follows ``pipeline.destination``'s rule (the string ``-``: stdout): an mbox
    file is written beside it and renamed over it at the end (``append``: added
    to its end in place); a Maildir message is written in ``tmp/`` and renamed
    into ``cur/``. ``page``: matches read from the store at a time; ``progress``
    counts the matches (counted first when a display asks)."""
    check_dest(fmt, dest, append=append)
    report = ExportReport(format=fmt, dest=str(dest))
    if progress is not NO_PROGRESS:
        matches = store.search(plan, "count").column(0)[0].as_py()
        progress.start(matches, f"export {fmt} {dest}")
    bodies = _bodies(store, plan, page, report, progress, variants=not one_per_id)
    if fmt == "mbox":
        _export_mbox(bodies, dest, append, report)
    else:
        _export_maildir(bodies, user_directory(dest), report)
    return report


# (seq, message_id, sha256, from, date, raw, the message's flags or None)
_Body = tuple[int, str, str, str | None, int | None, bytes, list[str] | None]


def _bodies(
    store: MessageStore,
    plan: SearchPlan,
    page: int,
    report: ExportReport,
    progress: Progress,
    *,
    variants: bool,
) -> Iterator[_Body]:
    """(seq, message_id, sha256, from, date, raw, flags) of each match and each of its
    variants whose blob reads back (one in memory at a time); the others are
    named in ``report.errors``. ``progress`` advances by a match."""
    for seq, message_id, sha, _size, sender, epoch, others, flags in _matches(
        store, plan, page, variants=variants
    ):
        for n, content in enumerate([sha, *others]):
            try:
                raw = store.blobs.get(content)
            except MailledgerError as exc:
                report.errors.append(f"<{message_id}>: {exc}")
                continue
            report.variants += n > 0
            yield seq, message_id, content, sender, epoch, raw, flags
        progress.advance()


def _export_mbox(
    bodies: Iterator[_Body], dest: str | Path, append: bool, report: ExportReport
) -> None:
    with open_user_file(dest, append=append) as fh:
        if fh.readable():  # (an mbox appended to in place)
            _end_last_message(fh)
        _write_mbox(bodies, fh, report)


def _end_last_message(fh: IO[bytes]) -> None:
    """An mbox appended to ends in a blank line first: a ``From `` line counts only
    after one."""
    size = fh.tell()
    if not size:
        return
    fh.seek(max(0, size - 2))
    tail = fh.read()
    fh.seek(0, os.SEEK_END)
    if tail.endswith(b"\n\n") or tail == b"\n":
        return
    fh.write(b"\n" if tail.endswith(b"\n") else b"\n\n")


def _mbox_entry(sender: str | None, epoch: int | None, raw: bytes) -> tuple[bytes, bool]:
    """One message as an mbox holds it (From line, quoted body, the blank line that
    ends it), and whether a newline had to be added to its end."""
    no_eol = bool(raw) and not raw.endswith(b"\n")
    entry = _from_line(sender, epoch, no_eol=no_eol) + mbox_quote(raw)
    return entry + (b"\n\n" if no_eol else b"\n"), no_eol


def _write_mbox(bodies: Iterator[_Body], fh: IO[bytes], report: ExportReport) -> None:
    for _seq, _mid, _sha, sender, epoch, raw, _flags in bodies:
        entry, no_eol = _mbox_entry(sender, epoch, raw)
        fh.write(entry)
        report.newline_added += no_eol
        report.messages += 1
        report.bytes += len(raw)


def mbox_stream(
    store: MessageStore, plan: SearchPlan, *, one_per_id: bool = False
) -> Iterator[bytes]:
    """The mbox ``export`` writes for ``plan``, byte for byte, a message at a time
    (a download: the matches read a page at a time, one body in memory). A body
    that does not read back is left out, as ``export`` leaves it (and names it)."""
    report = ExportReport(format="mbox", dest="-")
    for _seq, _mid, _sha, sender, epoch, raw, _flags in _bodies(
        store, plan, _PAGE, report, NO_PROGRESS, variants=not one_per_id
    ):
        yield _mbox_entry(sender, epoch, raw)[0]


def _export_maildir(bodies: Iterator[_Body], dest: Path, report: ExportReport) -> None:
    for sub in ("tmp", "new", "cur"):
        (dest / sub).mkdir(parents=True, exist_ok=True, mode=0o700)
    # what cur/ holds already (--append), by unique name: a message exported again
    # with other flags replaces its file rather than sitting beside it
    held = {n.split(":2,", 1)[0]: n for n in os.listdir(dest / "cur") if ":2," in n}
    for seq, _mid, sha, _sender, epoch, raw, flags in bodies:
        # unique in this store (seq) and telling what it holds (sha256); the same
        # message exported again with --append lands on the same name, same bytes
        name = f"{max(epoch or 0, 0)}.M{seq}S{sha[:16]}.mailledger"
        final = f"{name}:2,{maildir_letters(flags)}"
        tmp = dest / "tmp" / name
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            view = memoryview(raw)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            tmp.unlink(missing_ok=True)
            raise
        os.close(fd)
        if epoch is not None:
            with contextlib.suppress(OSError, OverflowError, ValueError):
                os.utime(tmp, (epoch, epoch))  # (mail programs read a date from it)
        os.replace(tmp, dest / "cur" / final)
        before = held.pop(name, final)
        if before != final:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(dest / "cur" / before)
        report.messages += 1
        report.bytes += len(raw)
    fsync_dir(dest / "cur")

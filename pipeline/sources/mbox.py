"""mbox files: one file, messages separated by ``From `` lines, split here
line by line as the file is read.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from pipeline.importing import run_import
from pipeline.ingest import Incoming, RunCounts
from pipeline.progress import NO_PROGRESS, Progress
from pipeline.store import MessageStore
from stores.errors import UsageError

__all__ = ["MBOXRD_MARK", "NO_EOL_MARK", "MboxSource", "check_mbox", "import_mbox", "iter_mbox"]

_QUOTED_FROM = re.compile(rb">+From ")

# The last word of the ``From `` line of a message whose ``>From `` lines are
# mboxrd-quoted (``mailledger export`` writes it on every one). mboxrd and mboxo
# files look alike, and a reader that guesses wrong changes the bytes: the mark
# says it of each message, so that files appended to, or put together, by
# several writers read back right. ``NO_EOL_MARK`` in its place says the same,
# and that the message's last line had no newline: the one written before the
# blank line that ends it in the file is not the message's (the ending other
# mbox readers cannot keep comes back whole).
MBOXRD_MARK = b"mboxrd"
NO_EOL_MARK = b"mboxrd-noeol"


def iter_mbox(path: Path, *, mboxrd: bool | None = None) -> Iterator[tuple[int, bytes]]:
    """(ordinal, raw bytes) of each message of an mbox file, streamed line by line.

    A message starts at a ``From `` line at the start of the file or after a
    blank line. The ``From `` separator line is not part of the message. Body
    lines are kept exactly as they are in the file (no ``>From`` unquoting, so
    the bytes stored are the bytes that were there), except in a message whose
    ``From `` line ends in ``MBOXRD_MARK`` or ``NO_EOL_MARK`` (``mailledger
    export``'s): there a ``>From ``, ``>>From ``... line loses one ``>`` (the
    mboxrd quoting undone: the message as it was), and after ``NO_EOL_MARK``
    the last line its newline. ``mboxrd`` True un-quotes every message so (a
    file another mboxrd writer made), False none (the marks still say which
    newline was added).
    """
    n = 0
    buf: list[bytes] = []
    prev_blank = True
    started = False
    unquote = bool(mboxrd)
    no_eol = False
    with open(path, "rb") as fh:
        for line in fh:
            if prev_blank and line.startswith(b"From "):
                if started:
                    n += 1
                    yield n, _strip_separator_blank(buf, no_eol=no_eol)
                buf = []
                started = True
                prev_blank = False
                mark = line.rstrip(b"\r\n").rpartition(b" ")[2]
                no_eol = mark == NO_EOL_MARK
                if mboxrd is None:
                    unquote = mark in (MBOXRD_MARK, NO_EOL_MARK)
                continue
            if not started:
                if line.strip():
                    raise UsageError(f"{path}: not an mbox file (no 'From ' line first)")
                continue
            buf.append(line[1:] if unquote and _QUOTED_FROM.match(line) else line)
            prev_blank = line in (b"\n", b"\r\n")
    if started:
        n += 1
        yield n, _strip_separator_blank(buf, no_eol=no_eol)


def check_mbox(path: Path) -> None:
    """Refuse (UsageError) what is not a file, and a file whose first line that is
    not blank is no ``From `` line (``iter_mbox``'s rule, read before a store is
    made for it). An empty file is an mbox of no messages."""
    if not path.is_file():
        raise UsageError(f"{path}: not a file")
    with path.open("rb") as fh:
        for line in fh:
            if line.strip():
                if not line.startswith(b"From "):
                    raise UsageError(f"{path}: not an mbox file (no 'From ' line first)")
                return


def _strip_separator_blank(lines: list[bytes], *, no_eol: bool = False) -> bytes:
    # The blank line before the next "From " belongs to the mbox format, not the
    # message; so does the newline before it that a writer added (``no_eol``).
    if lines and lines[-1] in (b"\n", b"\r\n"):
        lines = lines[:-1]
    raw = b"".join(lines)
    return raw[:-1] if no_eol and raw.endswith(b"\n") else raw


class MboxSource:
    """The messages of an mbox file (a :class:`~pipeline.sources.MessageSource`).

    ``progress`` counts the bytes read, out of the file's size (the number of
    messages is known only at its end): each message's bytes as it is read, the
    separator lines between them at the end.
    """

    lookahead = 1

    def __init__(self, path: Path, *, mboxrd: bool | None = None) -> None:
        self.path = Path(path).resolve()
        self.mboxrd = mboxrd
        self.label = f"import:mbox:{self.path}"
        self.size = 0
        self.done = 0

    def messages(self, progress: Progress) -> Iterator[tuple[Incoming, int]]:
        if not self.path.is_file():
            raise UsageError(f"{self.path}: not a file")
        self.size = self.path.stat().st_size
        progress.start(self.size, "import mbox", unit="B")
        for n, raw in iter_mbox(self.path, mboxrd=self.mboxrd):
            self.done += len(raw)
            yield Incoming(raw=raw, folder=self.path.name, uid=n), len(raw)

    def finish(self, counts: RunCounts, progress: Progress) -> None:
        progress.advance(max(0, self.size - self.done))  # the "From " lines between them


def import_mbox(
    store: MessageStore,
    path: Path,
    *,
    batch_size: int = 1000,
    progress: Progress = NO_PROGRESS,
    workers: int = 0,
    mboxrd: bool | None = None,
) -> RunCounts:
    """Import every message of an mbox file; returns the run counts (``mboxrd``:
    which messages' ``>From `` lines to un-quote, see ``iter_mbox``)."""
    source = MboxSource(path, mboxrd=mboxrd)
    return run_import(store, source, batch_size=batch_size, progress=progress, workers=workers)

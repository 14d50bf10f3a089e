"""The legacy GDBM UIDL store (``~/.email3.mail.gdbm``) into the log (the legacy
program's ``migrate_from_uidl_store``).

The old program kept one GDBM file keyed by POP3 UIDL; each value is a raw
message that it had decoded as latin-1 into a Python ``str``, which ``dbm``
writes as UTF-8. So the original bytes come back by decoding the stored bytes
as UTF-8 and encoding the text as latin-1. When that is impossible (the value
is not UTF-8, or holds a character beyond U+00FF, which the latin-1 decoding
cannot have produced) the stored bytes are taken as they are. A leading byte
order mark (U+FEFF, or its UTF-8 bytes) is stripped, as the old ``_norm()`` did.

Each message becomes a ``message-seen`` event with source
``import:gdbm:/abs/path``, folder = the file's name and the UIDL as location. A
message without a usable Message-ID gets ``<synthetic-uidl-UIDL@local>``
(stored as ``synthetic-uidl-UIDL@local``; a UIDL holding whitespace, which no
POP3 server sends, gives ``synthetic-uidlx-ENCODED@local``, percent-encoded, as
no stored id holds whitespace). A Message-ID already in the store
keeps its first record (counted as a duplicate, or ``other_source`` when it
came from another source); its UIDL is recorded all the same, so
:meth:`MessageStore.known_uidls` finds it and the POP3 sync does not download
it again. Importing the same file again adds nothing.

Reading the file: ``dbm.gnu`` when this Python has it (``_gdbm``), otherwise
the ``gdbm_dump`` program (Debian package ``gdbmtool``), whose ASCII dump is
read as a stream. With neither, the import stops with exit 2 and says so.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import shutil
import subprocess
import urllib.parse
from collections.abc import Generator, Iterator
from pathlib import Path

from pipeline.importing import run_import
from pipeline.ingest import Incoming, RunCounts
from pipeline.parse import parse_message
from pipeline.progress import NO_PROGRESS, Progress
from pipeline.store import MessageStore
from stores.errors import SourceError, UsageError

__all__ = [
    "GdbmSource",
    "check_gdbm",
    "import_gdbm",
    "iter_gdbm",
    "legacy_bytes",
    "synthetic_uidl_id",
]

_BOM = b"\xef\xbb\xbf"
REMEDY = (
    "this Python has no dbm.gnu (_gdbm) and the gdbm_dump program is not installed:"
    " apt-get install gdbmtool (Debian/Ubuntu; or use a Python built with _gdbm,"
    " e.g. apt-get install python3-gdbm for the system python3)"
)


def legacy_bytes(stored: bytes) -> bytes:
    """The original message bytes of one legacy value (see the module docstring)."""
    try:
        text = stored.decode("utf-8")
    except UnicodeDecodeError:
        raw = stored  # not what a Python str becomes: keep the bytes as they are
    else:
        text = text.removeprefix("\ufeff")
        try:
            raw = text.encode("latin-1")
        except UnicodeEncodeError:
            raw = text.encode("utf-8")  # = the stored bytes (without a BOM)
    while raw.startswith(_BOM):
        raw = raw[len(_BOM) :]
    return raw


def synthetic_uidl_id(uidl: str) -> str:
    """The Message-ID the legacy program gave a message without one (no angle brackets).

    A stored id never holds whitespace (the header index separates ids by a
    space): a UIDL with any gets another prefix and is percent-encoded, so no
    two UIDLs share an id.
    """
    if any(ch.isspace() for ch in uidl):
        return f"synthetic-uidlx-{urllib.parse.quote(uidl, safe='')}@local"
    return f"synthetic-uidl-{uidl}@local"


def _key_text(key: bytes) -> str:
    try:
        return key.decode("utf-8")
    except UnicodeDecodeError:
        return key.decode("latin-1")


def iter_gdbm(path: Path) -> Generator[tuple[bytes, bytes]]:
    """(key, value) of every record of a GDBM file, streamed, in the file's order."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"{path}: not a file")
    try:
        import dbm.gnu as gnu
    except ImportError:
        yield from _iter_dump(path)
        return
    try:
        db = gnu.open(str(path), "r")  # noqa: SIM115 (closed in the finally below)
    except gnu.error as exc:
        raise UsageError(f"{path}: not a readable GDBM file: {exc}") from None
    try:
        key = db.firstkey()
        while key is not None:
            yield key, db[key]
            key = db.nextkey(key)
    finally:
        db.close()


def check_gdbm(path: Path) -> None:
    """Refuse (UsageError) what is not a file, and a file GDBM cannot read: its
    first record is read, before a store is made for it."""
    records = iter_gdbm(path)
    try:
        next(records, None)
    finally:
        records.close()


def _record_count(path: Path) -> int | None:
    """The number of records of a GDBM file, or None where this Python has no
    ``dbm.gnu`` (GDBM counts them from its bucket directory, not the values)."""
    try:
        import dbm.gnu as gnu
    except ImportError:
        return None
    try:
        db = gnu.open(str(path), "r")  # noqa: SIM115 (closed in the finally below)
    except gnu.error:
        return None
    try:
        return len(db)
    finally:
        db.close()


def _iter_dump(path: Path) -> Iterator[tuple[bytes, bytes]]:
    """Records through ``gdbm_dump``'s ASCII format: ``#:len=N`` then base64 lines."""
    tool = shutil.which("gdbm_dump")
    if tool is None:
        raise UsageError(f"cannot read {path}: {REMEDY}")
    proc = subprocess.Popen(
        [tool, "--format=ascii", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    data: list[bytes] = []  # key, then value
    want: int | None = None
    chunks: list[bytes] = []
    finished = False

    def datum() -> bytes:
        try:
            value = base64.b64decode(b"".join(chunks), validate=True)
        except binascii.Error as exc:
            raise SourceError(f"{path}: gdbm_dump output unreadable: {exc}") from None
        if len(value) != want:
            raise SourceError(f"{path}: gdbm_dump said {want} bytes, the data holds {len(value)}")
        return value

    try:
        for line in proc.stdout:
            line = line.rstrip(b"\r\n")
            if line.startswith(b"#"):
                if want is not None:
                    data.append(datum())
                    want, chunks = None, []
                    if len(data) == 2:
                        yield data[0], data[1]
                        data = []
                if line.startswith(b"#:len="):
                    want = int(line[6:])
                elif line == b"# End of data":
                    finished = True
                continue
            if want is not None:
                chunks.append(line.strip())
    finally:
        proc.stdout.close()
        err = proc.stderr.read().decode("utf-8", "replace").strip()
        proc.stderr.close()
        code = proc.wait()
    if code != 0:
        why = err.removeprefix("gdbm_dump: ") or f"exit status {code}"
        raise UsageError(f"{path}: not a readable GDBM file: {why}")
    if not finished or data:
        raise SourceError(f"{path}: gdbm_dump output ended early")


class GdbmSource:
    """The messages of a legacy GDBM UIDL store (a :class:`~pipeline.sources.MessageSource`).

    ``progress`` counts the records, out of the file's count where ``dbm.gnu``
    tells it (``gdbm_dump`` streams: the rate alone is shown).
    """

    lookahead = 1

    def __init__(self, path: Path) -> None:
        self.path = Path(path).resolve()
        self.label = f"import:gdbm:{self.path}"

    def messages(self, progress: Progress) -> Iterator[tuple[Incoming, int]]:
        records = iter_gdbm(self.path)
        first = next(records, None)  # a file that cannot be read fails here
        total = _record_count(self.path) if progress is not NO_PROGRESS else None
        progress.start(total, "import gdbm")
        if first is None:
            return
        for key, value in itertools.chain([first], records):
            uidl = _key_text(key)
            raw = legacy_bytes(value)
            message_id = synthetic_uidl_id(uidl) if parse_message(raw).synthetic_id else None
            yield Incoming(raw=raw, folder=self.path.name, uidl=uidl, message_id=message_id), 1

    def finish(self, counts: RunCounts, progress: Progress) -> None:
        """Nothing to add: every record was offered."""


def import_gdbm(
    store: MessageStore,
    path: Path,
    *,
    batch_size: int = 1000,
    progress: Progress = NO_PROGRESS,
    workers: int = 0,
) -> RunCounts:
    """Import every message of a legacy GDBM UIDL store; returns the run counts.

    ``workers`` processes parse and compress in parallel (0: all in this one).
    """
    return run_import(
        store, GdbmSource(path), batch_size=batch_size, progress=progress, workers=workers
    )

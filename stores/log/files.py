"""The log's files: their names and metadata keys, and the listing of the log's
directory, kept while the directory is unchanged."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import NamedTuple

from stores.errors import LogIntegrityError

__all__ = [
    "DIGEST_KEY",
    "EPOCH_KEY",
    "FIRST_KEY",
    "LAST_KEY",
    "PRODUCER_KEY",
    "ROW_GROUP_ROWS",
    "VERSION_KEY",
    "Listing",
    "LogDirectory",
    "LogFile",
    "file_name",
    "stat_key",
]

_NAME = re.compile(r"^(\d{20})-(\d{20})\.parquet$")
# the keys of a file's Parquet key-value metadata
DIGEST_KEY = b"mailledger.digest"
FIRST_KEY = b"mailledger.first_seq"
LAST_KEY = b"mailledger.last_seq"
VERSION_KEY = b"mailledger.schema_version"
EPOCH_KEY = b"mailledger.epoch"  # the writer epoch of the committer (stores.fence)
PRODUCER_KEY = b"mailledger.producer"  # whose epoch it is, when not the store's
ROW_GROUP_ROWS = 1_000
"""Events per Parquet row group of a log file. Reading one event's columns (a
message's headers for ``show`` or its web page: ``read_at``, a filter on seq)
decodes the row groups that hold it, not the file: one row's headers cost 53 ms
from a 10,000-event file written as one row group, 3.4 ms from row groups of
1,000 (the file 2% larger, a whole read as fast); from a compacted file of
100,000 events as one row group it would cost ten times 53 ms."""
# how long after its last change a directory's listing may be kept (see ``listed``)
_SETTLED_NS = 2_000_000_000


class LogFile(NamedTuple):
    """One file of the log: the seq range its name gives, and where it is.

    (A tuple, not a dataclass: a listing of 1,000 files builds 1,000 of them, and
    a frozen dataclass cost twice as much to make.)"""

    first: int
    last: int
    root: Path
    name: str

    @property
    def path(self) -> Path:
        """(made when asked: a listing of 1,000 files that built every path cost a
        one-message sync 0.28 s, 14 listings of 1,000 ``Path`` joins)"""
        return self.root / self.name

    @property
    def rows(self) -> int:
        return self.last - self.first + 1


def file_name(first: int, last: int) -> str:
    """The name of the log file holding seqs ``first``..``last``."""
    return f"{first:020d}-{last:020d}.parquet"


def stat_key(path: Path | str) -> list[int]:
    """What tells a file apart from an altered one without reading it: size,
    mtime, inode."""
    st = os.stat(path)
    return [st.st_size, st.st_mtime_ns, st.st_ino]


class Listing(NamedTuple):
    """One listing of the log's directory."""

    key: tuple[int, ...]  # the directory's stat when listed
    names: list[str]  # every name in it
    every: list[LogFile]  # its log files, by first seq (the wider first where two start alike)
    chosen: list[LogFile] | None  # ``LogDirectory.files`` of it, once computed


class LogDirectory:
    """The log files of directory ``root``, listed again only when it changed."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._kept: Listing | None = None

    def listed(self) -> Listing:
        """The directory's listing.

        A command asks for it a dozen times (every read, every open of the
        projections, every append), and at 1,000 files a listing costs
        milliseconds: the last one is kept while the directory's stat (inode,
        mtime, ctime) is unchanged, since a file added, removed or renamed in it
        changes its mtime and ctime. A listing is kept only when the directory's
        mtime or ctime is at least ``_SETTLED_NS`` older than the listing: a
        filesystem stamps times at a granularity (a clock tick, up to 2 s on
        some), so a second change within the tick of the one seen could leave
        both as they were; a change after ``_SETTLED_NS`` stamps both anew.
        """
        now = time.time_ns()
        st = os.stat(self.root)
        key = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
        kept = self._kept
        if kept is not None and kept.key == key:
            return kept
        names = os.listdir(self.root)
        files = []
        root = self.root
        for name in names:
            if name.endswith(".parquet"):
                m = _NAME.match(name)
                if m:
                    files.append(LogFile(int(m.group(1)), int(m.group(2)), root, name))
        files.sort(key=lambda f: (f.first, -f.last))
        listing = Listing(key, names, files, None)
        if now - min(st.st_mtime_ns, st.st_ctime_ns) >= _SETTLED_NS:
            self._kept = listing
        return listing

    def every_file(self) -> list[LogFile]:
        """Every log file, those a wider one covers included (none: no directory)."""
        try:
            return list(self.listed().every)
        except FileNotFoundError:
            return []

    def files(self, *, fresh: bool = False) -> list[LogFile]:
        """The files that hold the log, in seq order, each seq exactly once (see
        ``EventLog.files``); ``fresh``: list the directory whatever its stat says."""
        try:
            if fresh:
                self._kept = None
            listing = self.listed()
        except FileNotFoundError:
            return []
        return list(self.chosen(listing))

    def chosen(self, listing: Listing) -> list[LogFile]:
        """The files of ``listing`` that hold the log (kept with it while it is the
        kept listing): a file wholly covered by a wider one is passed over; a gap
        or a partial overlap is damage."""
        if listing.chosen is not None:
            return listing.chosen
        chosen: list[LogFile] = []
        expected = 1
        for f in listing.every:
            if f.last < f.first:
                raise LogIntegrityError(f"{f.path}: seq range is reversed")
            if f.last < expected:
                continue  # covered by a wider file
            if f.first != expected:
                what = "gap" if f.first > expected else "overlap"
                raise LogIntegrityError(
                    f"{f.path}: seq {what} (expected a file starting at seq {expected})"
                )
            chosen.append(f)
            expected = f.last + 1
        if self._kept is listing:
            self._kept = listing._replace(chosen=chosen)
        return chosen

"""Whether a log file is whole: its rows against its name and its digest; and
``log/.checked.json``, the files already found whole.

The cache maps a file's name to the ``stat_key`` it had when checked (or when
this code wrote it): a file is read in full again only when that changed.
Deleting the cache only makes the next open check everything again.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import TYPE_CHECKING

from stores import arrow
from stores.atomic import replace_file, unique_name
from stores.errors import LogIntegrityError
from stores.log.files import DIGEST_KEY, LogDirectory, LogFile, stat_key

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["CheckedCache", "check_file", "checked_last_seq", "checked_rows"]

_CHECKED = ".checked.json"

_THREADED_ROWS = 10_000
"""A file of at least this many events is read by Arrow's reader threads."""


def check_file(f: LogFile) -> str | None:
    """What is wrong with file ``f`` (None when whole and untampered)."""
    return checked_rows(f)[1]


def checked_rows(f: LogFile) -> tuple[pa.Table | None, str | None]:
    """File ``f``'s rows as read for its check, and what is wrong with it (None
    when whole and untampered; then the rows are those its digest vouches for)."""
    from stores.digest import digest_matches  # (pyarrow: only where a file is read)

    try:
        pf = arrow.parquet().ParquetFile(f.path)
        meta = pf.schema_arrow.metadata or {}
        # a small file read on this thread: Arrow's pool of reader threads would
        # cost a one-message sync's merge 10 MiB more memory, for no speed
        table = pf.read(use_threads=f.rows >= _THREADED_ROWS)
        table.validate(full=True)  # damaged pages may decode into invalid UTF-8
        if table.num_rows != f.rows:
            return None, f"{f.path}: holds {table.num_rows} rows, its name says {f.rows}"
        if "seq" not in table.column_names or table.column("seq").to_pylist() != list(
            range(f.first, f.last + 1)
        ):
            return None, f"{f.path}: seq column does not match its name"
        digest = meta.get(DIGEST_KEY)
        if digest is None:
            return None, f"{f.path}: no mailledger digest in its metadata"
        if not digest_matches(table, digest):
            return None, f"{f.path}: rows do not match their digest (tampered with?)"
    except FileNotFoundError:
        raise
    except Exception as exc:
        # a damaged page that still decompressed can fail anywhere in decoding
        # (invalid UTF-8, a timestamp out of range...): never a traceback,
        # always the file's name
        return None, f"{f.path}: unreadable: {type(exc).__name__}: {exc}"
    return table, None


class CheckedCache:
    """The files of log directory ``root`` found whole: name -> ``stat_key``."""

    def __init__(self, root: Path) -> None:
        self.path = root / _CHECKED

    def load(self) -> dict[str, list[int]]:
        """The cache (empty when missing or unreadable)."""
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def save(self, entries: dict[str, list[int]]) -> None:
        """Replace the cache (best effort: a reader may lack the right to write)."""
        path = self.path
        with contextlib.suppress(OSError):  # (a leftover ".tmp-" is removed by an append)
            replace_file(path, json.dumps(entries).encode(), durable=False,
                         tmp=unique_name(path, prefix=".tmp-checked-", suffix=""))  # fmt: skip


def checked_last_seq(root: Path) -> int | None:
    """The last seq of the log in directory ``root`` when opening it would read no
    file: every file that holds the log is in the cache of files found whole and
    unchanged since (``EventLog.check`` would pass at once). None otherwise: a
    file to check, a damaged listing, no log. Reads no Parquet (no pyarrow)."""
    try:
        files = LogDirectory(root).files()
        cache = CheckedCache(root).load()
        if not files or any(cache.get(f.name) != stat_key(root / f.name) for f in files):
            return None
    except (OSError, LogIntegrityError):
        return None
    return files[-1].last

"""The Parquet event log: the only truth of a store.

Each commit writes one Parquet file named after the seq range it holds,
``00000000000000000001-00000000000000000250.parquet``. A commit is atomic: the
batch goes to a temporary name, is fsynced, renamed into place, and the
directory is fsynced; a reader lists only finished names, so it never sees half
a batch. A writer lock (``flock`` on ``log/.lock``) serializes commits and
assigns seq contiguously.

Every file carries, in its Parquet key-value metadata, a sha256 digest of its
rows; ``verify`` recomputes it, so a file edited behind mailledger's back is
named. The digest is ``v2:`` and hex, over a canonical form of the Arrow buffers
(``table_digest``); files written before it carry bare hex over the rows as JSON
(``legacy_table_digest``) and are still checked with that, until a compaction or
purge rewrites them.

Compaction writes a merged file first and removes the small ones after; while
both exist, readers take the file that covers the wider range, so no reader
ever sees an event twice or misses one.

``check()`` runs when a store is opened: every file must be whole (a truncated
or damaged file is refused with its name). A file is digest-checked in full the
first time it is met and whenever its size, mtime or inode change; files this
code wrote itself, and files already checked, are remembered in
``log/.checked.json`` (a cache: deleting it only makes the next open check
everything again). ``verify()`` always checks every file in full.
"""

from __future__ import annotations

import array
import bisect
import contextlib
import fcntl
import hashlib
import json
import os
import re
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow as pa

from stores.atomic import fsync_dir, replace_file, unique_name
from stores.errors import LockTimeout, LogIntegrityError
from stores.events import (
    SCHEMA,
    SCHEMA_VERSION,
    Event,
    batch_of,
    events_from_table,
    events_to_table,
)

__all__ = ["EventLog", "LogFile", "legacy_table_digest", "read_columns", "table_digest"]


def _pc() -> Any:
    """pyarrow.compute, imported when first needed: it costs every command 0.1 s
    to import, and most commands (find, show, stats) never use it."""
    import pyarrow.compute

    return pyarrow.compute


def _pq() -> Any:
    import pyarrow.parquet

    return pyarrow.parquet


_NAME = re.compile(r"^(\d{20})-(\d{20})\.parquet$")
_DIGEST_KEY = b"mailledger.digest"
_FIRST_KEY = b"mailledger.first_seq"
_LAST_KEY = b"mailledger.last_seq"
_VERSION_KEY = b"mailledger.schema_version"
_CHECKED = ".checked.json"
# how long after its last change a directory's listing may be kept (see _listed)
_SETTLED_NS = 2_000_000_000


_V2 = "v2:"  # marks a digest of the canonical form; the first (JSON) format is bare hex
_LITTLE = sys.byteorder == "little"
# variable-length types: how their offsets are stored (native byte order, width)
_VARLEN: dict[pa.DataType, tuple[str, int]] = {
    pa.string(): ("=i", 4),
    pa.binary(): ("=i", 4),
    pa.large_string(): ("=q", 8),
    pa.large_binary(): ("=q", 8),
}


def read_columns(path: Path, schema: pa.Schema) -> pa.Table:
    """The columns of ``schema`` from one log file, in ``schema``'s types (a column
    the file lacks is null, as ``pq.read_table(schema=...)`` gives it).

    One ``ParquetFile`` read: ``pq.read_table`` sets up a dataset per call, which
    made reading a log of 1,000-row files 2.5x slower. The rows are validated in
    full (a damaged page may decode into invalid UTF-8); a file that does not
    read is a LogIntegrityError naming it, never skipped. A missing file raises
    FileNotFoundError (a compaction may just have replaced it).
    """
    try:
        pf = _pq().ParquetFile(path)
        have = set(pf.schema_arrow.names)
        table = pf.read(columns=[n for n in schema.names if n in have])
        for i, field in enumerate(schema):
            if field.name not in have:
                table = table.add_column(i, field, pa.nulls(table.num_rows, field.type))
        if not table.schema.equals(schema):
            table = table.cast(schema)
        table.validate(full=True)
    except FileNotFoundError:
        raise
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise LogIntegrityError(f"{path}: unreadable: {exc}") from exc
    return table


def legacy_table_digest(table: pa.Table) -> str:
    """The first digest format (JSON of every value), bare hex: still checks the files
    written before ``table_digest`` replaced it; never written any more."""
    h = hashlib.sha256()
    for name in SCHEMA.names:
        if name not in table.column_names:
            continue  # a column added after the file was written: not part of its digest
        values = table.column(name).to_pylist()
        h.update(name.encode())
        h.update(json.dumps(values, default=str, ensure_ascii=False).encode())
    return h.hexdigest()


def table_digest(table: pa.Table) -> str:
    """A sha256 over the rows of ``table`` in a canonical, engine-independent form,
    as stored in a file's metadata (``v2:`` and hex).

    Computed from Arrow buffers, never value by value: an append pays for it on
    every batch. Each column of the schema that the table has (in schema order) is
    cast to its schema type and fed as its name and its canonical bytes (see
    ``_feed_array``), every part prefixed with its length: the digest depends on the
    logical values only, not on chunking, slicing, validity bitmaps or the engine
    that wrote the file.
    """
    h = hashlib.sha256(b"mailledger.digest.v2\0")
    _feed(h, table.num_rows.to_bytes(8, "little"))
    present = set(table.column_names)
    for field in SCHEMA:
        if field.name not in present:
            continue  # a column added after the file was written: not part of its digest
        column = table.column(field.name)
        if column.type != field.type:
            column = column.cast(field.type)  # e.g. large_string from another writer
        _feed(h, field.name.encode())
        _feed_array(h, column.combine_chunks())
    return _V2 + h.hexdigest()


def _digest_matches(table: pa.Table, stored: bytes) -> bool:
    """Whether ``table`` has the digest a file's metadata holds, in whichever format."""
    text = stored.decode(errors="replace")
    if text.startswith(_V2):
        return table_digest(table) == text
    return legacy_table_digest(table) == text


def _feed(h: hashlib._Hash, data: bytes | pa.Buffer) -> None:
    """One part of the canonical form, prefixed with its length (so parts never run
    into each other)."""
    view = memoryview(data)
    h.update(view.nbytes.to_bytes(8, "little"))
    h.update(view)


def _int64_bytes(arr: pa.Array) -> bytes | pa.Buffer:
    """The values of an int64 array without nulls, little-endian, slice offset applied."""
    buf = arr.buffers()[1]
    if buf is None:
        return b""
    data = buf.slice(arr.offset * 8, len(arr) * 8)
    if _LITTLE:
        return data
    swapped = array.array("q", bytes(data))
    swapped.byteswap()
    return swapped.tobytes()


def _lengths(lengths: pa.Array) -> bytes | pa.Buffer:
    """Per-row lengths as int64, -1 for NULL."""
    if lengths.null_count:
        lengths = lengths.fill_null(-1)
    return _int64_bytes(lengths.cast(pa.int64()))


def _null_mask(arr: pa.Array) -> bytes | pa.Buffer:
    """One byte per row, 1 for NULL (whether or not the array has a validity bitmap)."""
    n, nulls = len(arr), arr.null_count
    if nulls == 0:
        return bytes(n)
    if nulls == n:
        return b"\x01" * n
    mask = _pc().is_null(arr).cast(pa.uint8())
    return mask.buffers()[1].slice(mask.offset, n)


def _feed_array(h: hashlib._Hash, arr: pa.Array) -> None:
    """The canonical bytes of ``arr``: for strings and binaries the lengths (-1 NULL)
    then the bytes of the non-NULL values; for lists the lengths then the values of
    the non-NULL lists; for structs the NULL mask then each field (NULL where the
    struct is); for integers, timestamps and booleans the NULL mask then the values
    as int64 with NULL as 0. Every integer is little-endian."""
    t, n = arr.type, len(arr)
    if t in _VARLEN:
        if arr.null_count == n:
            _feed(h, b"\xff" * (8 * n))
            _feed(h, b"")
            return
        _feed(h, _lengths(_pc().binary_length(arr)))
        values = arr.drop_null() if arr.null_count else arr  # a NULL's slot may hold bytes
        _feed(h, _value_bytes(values))
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        _feed(h, _lengths(_pc().list_value_length(arr)))
        _feed_array(h, arr.flatten())  # the values of non-NULL lists, slice applied
    elif pa.types.is_struct(t):
        _feed(h, _null_mask(arr))
        for child in arr.flatten():  # struct NULLs become the children's NULLs
            _feed_array(h, child)
    elif pa.types.is_integer(t) or pa.types.is_timestamp(t) or pa.types.is_boolean(t):
        _feed(h, _null_mask(arr))
        values = arr.cast(pa.int64())
        if values.null_count:
            values = values.fill_null(0)
        _feed(h, _int64_bytes(values))
    else:
        raise TypeError(f"no canonical digest form for {t}")


def _value_bytes(arr: pa.Array) -> bytes | pa.Buffer:
    """The concatenated bytes of a string or binary array's values, slice applied."""
    offsets, data = arr.buffers()[1], arr.buffers()[2]
    if data is None or len(arr) == 0:
        return b""
    fmt, width = _VARLEN[arr.type]
    (start,) = struct.unpack_from(fmt, offsets, arr.offset * width)
    (end,) = struct.unpack_from(fmt, offsets, (arr.offset + len(arr)) * width)
    return data.slice(start, end - start)


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


def _stat_key(path: Path | str) -> list[int]:
    st = os.stat(path)
    return [st.st_size, st.st_mtime_ns, st.st_ino]


def _file_name(first: int, last: int) -> str:
    return f"{first:020d}-{last:020d}.parquet"


class EventLog:
    """Append-only, crash-safe Parquet log with a global contiguous ``seq``."""

    def __init__(self, root: Path, *, durable: bool = True) -> None:
        self.root = Path(root)
        self.durable = durable
        # the writer lock is reentrant for the thread holding it (a purge appends
        # and rewrites under one lock); other threads wait as other processes do
        self._lock_owner: int | None = None
        self._lock_depth = 0
        # the last listing of the directory, kept while the directory is unchanged:
        # (its stat key, every name, the log files in order, files() or None)
        self._listing: tuple[tuple[int, ...], list[str], list[LogFile], list[LogFile] | None] | None
        self._listing = None

    # -- layout -------------------------------------------------------------
    def create(self) -> None:
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)

    def _listed(
        self,
    ) -> tuple[tuple[int, ...], list[str], list[LogFile], list[LogFile] | None]:
        """The directory's listing: its names, and its log files sorted by first seq
        (the wider file first where two start alike).

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
        cached = self._listing
        if cached is not None and cached[0] == key:
            return cached
        names = os.listdir(self.root)
        files = []
        root = self.root
        for name in names:
            if name.endswith(".parquet"):
                m = _NAME.match(name)
                if m:
                    files.append(LogFile(int(m.group(1)), int(m.group(2)), root, name))
        files.sort(key=lambda f: (f.first, -f.last))
        listing = (key, names, files, None)
        if now - min(st.st_mtime_ns, st.st_ctime_ns) >= _SETTLED_NS:
            self._listing = listing
        return listing

    def _all_files(self) -> list[LogFile]:
        try:
            return list(self._listed()[2])
        except FileNotFoundError:
            return []

    def files(self, *, fresh: bool = False) -> list[LogFile]:
        """The files that hold the log, in seq order, each seq exactly once.

        Files wholly covered by a wider one (left by a compaction that has not
        removed them yet) are passed over. A gap or a partial overlap is damage.

        The listing is the kept one while the directory is unchanged (``_listed``:
        every reader call asks whether the log is ahead of the projections, and
        1,000 files at 1,000,000 messages were 5-6 ms a listing). ``fresh``: list
        it whatever its stat says (a file system whose attributes may be stale,
        such as NFS, cannot then mislead a check).
        """
        try:
            if fresh:
                self._listing = None
            listing = self._listed()
        except FileNotFoundError:
            return []
        return list(self._chosen(listing))

    def _chosen(
        self, listing: tuple[tuple[int, ...], list[str], list[LogFile], list[LogFile] | None]
    ) -> list[LogFile]:
        """``files`` of ``listing`` (kept with it while it is the kept listing)."""
        if listing[3] is not None:
            return listing[3]
        chosen: list[LogFile] = []
        expected = 1
        for f in listing[2]:
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
        if self._listing is listing:
            self._listing = (*listing[:3], chosen)
        return chosen

    def last_seq(self, *, fresh: bool = False) -> int:
        files = self.files(fresh=fresh)
        return files[-1].last if files else 0

    # -- locking ------------------------------------------------------------
    @contextlib.contextmanager
    def lock(self, timeout: float = 60.0) -> Iterator[None]:
        """Hold the writer lock; raises LockTimeout after ``timeout`` seconds.

        Reentrant within one thread of one ``EventLog``."""
        if self._lock_owner == threading.get_ident():
            self._lock_depth += 1
            try:
                yield
            finally:
                self._lock_depth -= 1
            return
        self.create()
        fd = os.open(self.root / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + timeout
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise LockTimeout(f"{self.root}: writer lock held elsewhere") from None
                    time.sleep(0.02)
            self._lock_owner, self._lock_depth = threading.get_ident(), 1
            try:
                yield
            finally:
                self._lock_owner, self._lock_depth = None, 0
        finally:
            os.close(fd)  # closing releases the flock

    # -- writing ------------------------------------------------------------
    def append(self, events: Sequence[Event], *, before_commit: Any = None) -> pa.Table:
        """Commit ``events`` as one atomic batch; returns the committed rows (with seq).

        ``before_commit`` (a callable) runs under the lock just before the file
        becomes visible; the store uses it to make the batch's blobs durable.
        """
        events = batch_of(events)  # an event read back from the log is never appended again
        if not events:
            return SCHEMA.empty_table()
        with self.lock():
            # One listing for the whole append: under the lock no other writer adds,
            # merges or removes a file, so what it shows holds until this write (at
            # 1,000 files a listing costs 4 ms, and an append made six of them).
            try:
                listing = self._listed()
            except FileNotFoundError:
                listing = ((), [], [], [])
            self._remove_leftovers(listing[1])
            files = self._chosen(listing)
            # a crashed compaction's leftovers double-count in a glob
            self._remove_covered(listing[2], files)
            first = (files[-1].last if files else 0) + 1
            table = events_to_table(events, first_seq=first)
            if before_commit is not None:
                before_commit()
            self._write(table, first, first + len(events) - 1, [f.name for f in files])
        return table

    def _write(
        self, table: pa.Table, first: int, last: int, present: Sequence[str] | None = None
    ) -> Path:
        """Write ``table`` as the file of seqs ``first``..``last``. ``present``: the
        other log files as the caller listed them under the lock (None: list them)."""
        meta = {
            _DIGEST_KEY: table_digest(table).encode(),
            _FIRST_KEY: str(first).encode(),
            _LAST_KEY: str(last).encode(),
            _VERSION_KEY: str(SCHEMA_VERSION).encode(),
        }
        table = table.replace_schema_metadata({**(SCHEMA.metadata or {}), **meta})
        final = self.root / _file_name(first, last)
        # No ".parquet" suffix: a crashed writer's file must not match the
        # documented glob `read_parquet('log/*.parquet')` (DuckDB matches dotfiles).
        tmp = self.root / f".tmp-{first}-{last}-{os.getpid()}"
        try:
            with open(tmp, "wb", opener=lambda p, fl: os.open(p, fl, 0o600)) as fh:
                _pq().write_table(
                    table, fh, compression="zstd", row_group_size=max(1, table.num_rows)
                )
                fh.flush()
                if self.durable:
                    os.fsync(fh.fileno())
        except BaseException as exc:
            tmp.unlink(missing_ok=True)  # a full disk: give the space back at once
            if isinstance(exc, OSError):
                raise OSError(exc.errno, f"cannot write the log: {exc.strerror}", str(tmp)) from exc
            raise
        os.replace(tmp, final)
        if self.durable:
            fsync_dir(self.root)
        self._note_checked([final], present)
        return final

    # -- integrity at open ----------------------------------------------------
    def check(self) -> None:
        """Refuse a damaged log, naming the file (run when a store is opened).

        Every listed file must exist whole; one never checked before, or whose
        size, mtime or inode changed since, is read in full and its digest,
        row count and seq column compared with its name. Raises LogIntegrityError.
        """
        for attempt in range(20):
            try:
                self._check_once()
                return
            except FileNotFoundError:
                if attempt == 19:  # a file vanished under us again and again: damage
                    raise LogIntegrityError(f"{self.root}: log files keep disappearing") from None
                time.sleep(0.005)  # a compaction removed a file we listed: list again

    def _check_once(self) -> None:
        files = self.files()
        cache = self._load_checked()
        fresh: dict[str, list[int]] = {}
        root = str(self.root)
        for f in files:
            key = _stat_key(os.path.join(root, f.name))  # (no Path per file: 1,000 at 1M)
            if cache.get(f.name) != key:
                problem = self.check_file(f)
                if problem is not None:
                    raise LogIntegrityError(problem)
            fresh[f.name] = key
        if fresh != cache:
            self._save_checked(fresh)

    def check_file(self, f: LogFile) -> str | None:
        """What is wrong with file ``f`` (None when whole and untampered)."""
        try:
            pf = _pq().ParquetFile(f.path)
            meta = pf.schema_arrow.metadata or {}
            table = pf.read()
            table.validate(full=True)  # damaged pages may decode into invalid UTF-8
            if table.num_rows != f.rows:
                return f"{f.path}: holds {table.num_rows} rows, its name says {f.rows}"
            if "seq" not in table.column_names or table.column("seq").to_pylist() != list(
                range(f.first, f.last + 1)
            ):
                return f"{f.path}: seq column does not match its name"
            digest = meta.get(_DIGEST_KEY)
            if digest is None:
                return f"{f.path}: no mailledger digest in its metadata"
            if not _digest_matches(table, digest):
                return f"{f.path}: rows do not match their digest (tampered with?)"
        except FileNotFoundError:
            raise
        except Exception as exc:
            # a damaged page that still decompressed can fail anywhere in decoding
            # (invalid UTF-8, a timestamp out of range...): never a traceback,
            # always the file's name
            return f"{f.path}: unreadable: {type(exc).__name__}: {exc}"
        return None

    def _load_checked(self) -> dict[str, list[int]]:
        try:
            data = json.loads((self.root / _CHECKED).read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _save_checked(self, entries: dict[str, list[int]]) -> None:
        """Replace the cache (best effort: a reader may lack the right to write)."""
        path = self.root / _CHECKED
        with contextlib.suppress(OSError):  # (a leftover ".tmp-" is removed by an append)
            replace_file(path, json.dumps(entries).encode(), durable=False,
                         tmp=unique_name(path, prefix=".tmp-checked-", suffix=""))  # fmt: skip

    def _note_checked(self, paths: Sequence[Path], others: Sequence[str] | None = None) -> None:
        """Remember files this process wrote (and so knows whole) as checked.
        ``others``: the other files of the log (None: list them)."""
        try:
            entries = self._load_checked()
            for path in paths:
                entries[path.name] = _stat_key(path)
        except OSError:
            return
        if others is None:
            present = {f.name for f in self._all_files()}
        else:
            present = {*others, *(path.name for path in paths)}
        self._save_checked({k: v for k, v in entries.items() if k in present})

    def _remove_leftovers(self, names: Sequence[str] | None = None) -> None:
        """Drop temporary files of crashed writers (only ever called under the lock).
        ``names``: the directory's names as the caller listed them under the lock."""
        for name in self._listed()[1] if names is None else names:
            if name.startswith(".tmp-"):
                (self.root / name).unlink(missing_ok=True)

    # -- reading ------------------------------------------------------------
    def read(self, after: int = 0, columns: Sequence[str] | None = None) -> pa.Table:
        """Events with seq > ``after``, in seq order, as a table of the log schema."""
        # A compaction may remove a file we listed (group after group), and a
        # listing taken while it renames may show a gap: list again for as long
        # as the listing keeps changing. A failure on an unchanged listing is damage.
        return self._retried(lambda: self._read(after, columns), LogIntegrityError)

    def read_at(self, seqs: Sequence[int], columns: Sequence[str]) -> pa.Table:
        """``columns`` (and ``seq``) of the events at ``seqs``, reading only the files
        that hold them; retried like ``read`` while a compaction renames files."""
        return self._retried(lambda: self._read_at(sorted(set(seqs)), ["seq", *columns]))

    def _retried(self, read: Callable[[], pa.Table], *also: type[Exception]) -> pa.Table:
        """``read()``, again while the listing of files keeps changing under it (a
        compaction renaming files); a failure on an unchanged listing is raised."""
        failed_on: list[LogFile] | None = None
        while True:
            try:
                return read()
            except (FileNotFoundError, *also):
                listing = self._all_files()
                if listing == failed_on:
                    raise
                failed_on = listing
                time.sleep(0.005)

    def _read_at(self, wanted: list[int], cols: list[str]) -> pa.Table:
        schema = pa.schema([SCHEMA.field(c) for c in cols])
        files = self.files()
        firsts = [f.first for f in files]
        groups: dict[Path, list[int]] = {}
        for seq in wanted:
            i = bisect.bisect_right(firsts, seq) - 1
            if i >= 0 and seq <= files[i].last:
                groups.setdefault(files[i].path, []).append(seq)
        parts = [schema.empty_table()]
        for path, group in groups.items():
            try:
                t = _pq().read_table(
                    path, columns=cols, schema=schema, filters=[("seq", "in", group)]
                )
            except FileNotFoundError:
                raise  # merged by a compaction since the listing: read_at lists again
            except (OSError, ValueError, pa.ArrowException) as exc:
                raise LogIntegrityError(f"{path}: unreadable: {exc}") from exc
            parts.append(t.replace_schema_metadata(None))
        return pa.concat_tables(parts)

    def _read(self, after: int, columns: Sequence[str] | None) -> pa.Table:
        files = [f for f in self.files() if f.last > after]
        schema = SCHEMA if columns is None else pa.schema([SCHEMA.field(c) for c in columns])
        if not files:
            return schema.empty_table()
        cols = list(columns) if columns is not None else None
        drop_seq = cols is not None and "seq" not in cols and files[0].first <= after
        if drop_seq:
            assert cols is not None
            cols = ["seq", *cols]  # needed to filter the first file; dropped below
            schema = pa.schema([SCHEMA.field(c) for c in cols])
        parts = [read_columns(f.path, schema) for f in files]
        table = pa.concat_tables(parts).replace_schema_metadata(None)
        if files[0].first <= after:
            table = table.filter(_pc().greater(table.column("seq"), after))
        if drop_seq:
            table = table.drop_columns(["seq"])
        return table

    def read_events(self, after: int = 0) -> list[Event]:
        return events_from_table(self.read(after))

    # -- maintenance --------------------------------------------------------
    def verify(self) -> list[str]:
        """Problems found in the log (empty when it is whole and untampered).

        Every file is read in full, whatever the open-time cache says."""
        problems: list[str] = []
        try:
            files = self.files()
        except LogIntegrityError as exc:
            return [str(exc)]
        for f in files:
            try:
                problem = self.check_file(f)
            except FileNotFoundError:
                problem = f"{f.path}: disappeared while being verified"
            if problem is not None:
                problems.append(problem)
        return problems

    def compact(self, target_rows: int = 100_000) -> tuple[int, int]:
        """Merge runs of small files; returns (files before, files after).

        No event or seq changes. The merged file is durable before the small
        ones are removed, and readers prefer the wider file meanwhile.
        """
        with self.lock():
            self._remove_leftovers()
            files = self.files()
            before = len(files)
            groups: list[list[LogFile]] = []
            current: list[LogFile] = []
            rows = 0
            for f in files:
                if f.rows >= target_rows:
                    if current:
                        groups.append(current)
                    current, rows = [], 0
                    continue
                if current and rows + f.rows > target_rows:
                    groups.append(current)
                    current, rows = [], 0
                current.append(f)
                rows += f.rows
            if current:
                groups.append(current)
            for group in groups:
                if len(group) < 2:
                    continue
                table = pa.concat_tables(
                    [self.read_checked(f) for f in group]
                ).replace_schema_metadata(None)
                self._write(table, group[0].first, group[-1].last)
                for f in group:
                    f.path.unlink()
                if self.durable:
                    fsync_dir(self.root)
            self._remove_covered()
            return before, len(self.files())

    def tidy(self) -> None:
        """Remove what a crashed writer or compaction left: temporary files, and
        small files a merged one covers. The caller holds ``lock()``."""
        self._remove_leftovers()
        self._remove_covered()

    def read_checked(self, f: LogFile, doing: str = "compacting") -> pa.Table:
        """File ``f``'s rows, refused when they no longer match its digest or name.

        Compaction and purge write a fresh digest; rewriting an altered file
        would hide the alteration from ``verify`` for good.
        """
        problem = self.check_file(f)  # rows against their digest and the file's name
        if problem is not None:
            raise LogIntegrityError(f"{problem}; not {doing} (run verify)")
        return _pq().read_table(f.path, schema=SCHEMA)

    def _remove_covered(
        self, every: Sequence[LogFile] | None = None, chosen: Sequence[LogFile] | None = None
    ) -> None:
        """Remove files wholly covered by a wider one (a compaction that crashed midway).
        ``every`` and ``chosen``: the log files and ``files()`` of one listing the
        caller took under the lock (None: list them)."""
        if every is None or chosen is None:
            every, chosen = self._all_files(), self.files()
        if len(every) == len(chosen):
            return  # nothing is covered
        keep = set(chosen)  # (compared as tuples: a Path per file was 2,000 a commit)
        for f in every:
            if f not in keep:
                f.path.unlink(missing_ok=True)

    def rewrite(self, f: LogFile, table: pa.Table) -> None:
        """Replace file ``f`` with ``table`` (same seq range, every event kept) in one
        atomic rename, with a fresh digest of the new rows; used by a purge.
        Call it under ``lock()``."""
        if table.num_rows != f.rows or table.column("seq").to_pylist() != list(
            range(f.first, f.last + 1)
        ):
            raise LogIntegrityError(f"{f.path}: a rewrite must keep every event and its seq")
        self._write(table.cast(SCHEMA).replace_schema_metadata(None), f.first, f.last)

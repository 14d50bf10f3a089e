"""Reading events from the log's files: every event after a seq, or the events
at given seqs, in the columns asked for."""

from __future__ import annotations

import bisect
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from stores import arrow
from stores.errors import LogIntegrityError
from stores.events import SCHEMA
from stores.log.files import LogFile

__all__ = ["drop_groups", "keep_groups", "read_after", "read_at", "read_columns"]


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
        pf = arrow.parquet().ParquetFile(path)
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


def read_after(files: Sequence[LogFile], after: int, columns: Sequence[str] | None) -> pa.Table:
    """Events with seq > ``after`` from the log's ``files`` (in order, each seq
    once), as a table of the log schema or of ``columns``."""
    files = [f for f in files if f.last > after]
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
        table = table.filter(arrow.compute().greater(table.column("seq"), after))
    if drop_seq:
        table = table.drop_columns(["seq"])
    return table


def read_at(files: Sequence[LogFile], wanted: Sequence[int], cols: list[str]) -> pa.Table:
    """Columns ``cols`` (``seq`` among them) of the events at seqs ``wanted`` (sorted,
    each once), reading only the ``files`` that hold them, and of each file only the
    row groups whose seq range holds one (``_groups_at``)."""
    schema = pa.schema([SCHEMA.field(c) for c in cols])
    firsts = [f.first for f in files]
    groups: dict[Path, list[int]] = {}
    for seq in wanted:
        i = bisect.bisect_right(firsts, seq) - 1
        if i >= 0 and seq <= files[i].last:
            groups.setdefault(files[i].path, []).append(seq)
    parts = [schema.empty_table()]
    for path, group in groups.items():
        try:
            parts.append(_rows_at(path, group, schema))
        except FileNotFoundError:
            raise  # merged by a compaction since the listing: read_at lists again
        except (OSError, ValueError, pa.ArrowException) as exc:
            raise LogIntegrityError(f"{path}: unreadable: {exc}") from exc
    return pa.concat_tables(parts)


def _rows_at(path: Path, seqs: list[int], schema: pa.Schema) -> pa.Table:
    """The rows of ``path`` at ``seqs`` (sorted), in ``schema``: one ``ParquetFile``
    read of the row groups that hold them (or the groups ``keep_groups`` kept).
    ``pq.read_table(filters=...)`` set up a dataset per call: 2 ms of a message
    page's 4-5 ms read at 1,000-event groups."""
    key = _kept.key(path)
    meta = _kept.get((*key, "footer")) if key is not None else None
    pf = None
    if meta is None:
        pf = arrow.parquet().ParquetFile(path)
        meta = pf.metadata
        if key is not None:
            _kept.put((*key, "footer"), meta, meta.serialized_size)
    have = set(meta.schema.to_arrow_schema().names)
    names = [n for n in schema.names if n in have]
    read = names if "seq" in names else ["seq", *names]  # (the seq to filter on)
    parts = []
    for group in _groups_at(meta, seqs):
        part = _kept.get((*key, group, *read)) if key is not None else None
        if part is None:
            pf = pf or arrow.parquet().ParquetFile(path, metadata=meta)
            part = pf.read_row_group(group, columns=read)
            if key is not None:
                _kept.put((*key, group, *read), part, part.nbytes)
        parts.append(part)
    if not parts:
        return schema.empty_table()
    table = pa.concat_tables(parts)
    table = table.filter(arrow.compute().is_in(table.column("seq"), pa.array(seqs, pa.int64())))
    table = table.select(names)
    for i, field in enumerate(schema):
        if field.name not in have:
            table = table.add_column(i, field, pa.nulls(table.num_rows, field.type))
    table = table.replace_schema_metadata(None)
    return table if table.schema.equals(schema) else table.cast(schema)


class _Kept:
    """What ``keep_groups`` keeps: decoded row groups and footers of log files, the
    least recently used let go first past ``limit`` bytes (0: nothing kept)."""

    def __init__(self) -> None:
        self.limit = 0
        self.lock = threading.Lock()  # (a process's readers may read side by side)
        self.held: OrderedDict[tuple[Any, ...], tuple[Any, int]] = OrderedDict()
        self.bytes = 0

    def key(self, path: Path) -> tuple[str, int, int, int] | None:
        """A file as it is now (rewritten under its name: another key); None when
        nothing is kept."""
        if not self.limit:
            return None
        st = os.stat(path)  # (FileNotFoundError: read_at lists again)
        return str(path), st.st_ino, st.st_mtime_ns, st.st_size

    def get(self, key: tuple[Any, ...]) -> Any:
        with self.lock:
            found = self.held.get(key)
            if found is None:
                return None
            self.held.move_to_end(key)
            return found[0]

    def put(self, key: tuple[Any, ...], value: Any, size: int) -> None:
        with self.lock:
            if size > self.limit or key in self.held:
                return
            self.held[key] = (value, size)
            self.bytes += size
            while self.bytes > self.limit:
                _, (_, gone) = self.held.popitem(last=False)
                self.bytes -= gone

    def clear(self) -> None:
        with self.lock:
            self.held.clear()
            self.bytes = 0


_kept = _Kept()


def keep_groups(limit: int) -> None:
    """Keep up to ``limit`` bytes of the row groups ``read_at`` decodes (and the
    footers it reads) for this process's next reads, until ``drop_groups`` (0:
    none, the default). A web child answering a burst of message pages decoded
    the same groups again for each: the headers of 1,000 events are 1.3 MB decoded,
    2.5 ms; a file written as one group of 6,250 events, 13 ms. A file is known by
    its path, inode, mtime and size: one rewritten under its name is read anew."""
    _kept.limit = limit
    if not limit:
        _kept.clear()


def drop_groups() -> None:
    """Let go of what ``keep_groups`` kept (it keeps keeping)."""
    _kept.clear()


def _groups_at(meta: Any, seqs: list[int]) -> list[int]:
    """The row groups of a file (``meta``: its ``FileMetaData``) whose seq statistics
    hold one of ``seqs`` (sorted); a group without statistics is read."""
    column = next((j for j in range(meta.num_columns) if meta.schema.column(j).path == "seq"), None)
    found = []
    for i in range(meta.num_row_groups):
        stats = meta.row_group(i).column(column).statistics if column is not None else None
        if stats is None or not stats.has_min_max:
            found.append(i)
            continue
        k = bisect.bisect_left(seqs, stats.min)
        if k < len(seqs) and seqs[k] <= stats.max:
            found.append(i)
    return found

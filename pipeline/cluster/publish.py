"""``publish delta DEST``: every shard's new events appended to one Delta table,
partitioned by shard, for the engines people already run (Spark, Trino, DuckDB,
``deltalake``). The table is a copy for them, never our log: the log stays the
truth and the table can be thrown away and published again.

One publisher at a time (``flock`` on ``DEST/_mailledger-publish.lock``, a name
Delta's readers and ``vacuum`` pass over). Per shard, the rows go in chunks of at
most ``chunk_rows`` events in seq order, each chunk one Delta commit carrying the
application transaction ``(mailledger:SHARD, last seq of the chunk)``. delta-rs
does not refuse a repeated transaction by itself (docs/delta-spike.md), so the
publisher reads the shard's transaction version back before every write and
after every error (a lost response: the commit may have landed) and writes only
the events past it. A chunk whose commit landed is never written twice; a
publisher killed at any point resumes where the table says it stopped.

deltalake is imported only inside these functions: importing this module costs
nothing, and a missing install is a ``UsageError`` that names the extra.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from stores import arrow
from stores.errors import LogIntegrityError, MailledgerError, UsageError
from stores.events import SCHEMA
from stores.log.files import LogDirectory, LogFile

__all__ = [
    "CHUNK_ROWS",
    "LOCK_NAME",
    "RETENTION_HOURS",
    "PublishError",
    "PublishReport",
    "ShardPublished",
    "Writer",
    "app_id",
    "publish_delta",
    "require_deltalake",
    "table_schema",
    "write_chunk",
]

CHUNK_ROWS = 50_000
"""Events per Delta commit (and at most that many rows held in memory)."""
RETENTION_HOURS = 168
"""``--optimize``'s vacuum keeps files removed less than this long ago (Delta's 7 days)."""
LOCK_NAME = "_mailledger-publish.lock"
_PURGE_JOURNAL = "purge-journal.json"  # (stores.purge: present while a purge runs)
_SHARD_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_ATTEMPTS = 6
_BACKOFF_S = 0.2

Writer = Callable[[str, pa.Table, str, int], None]
"""Appends a chunk (uri, rows, app id, its transaction version) as one Delta commit."""


class PublishError(MailledgerError):
    """A chunk could not be committed after every attempt (nothing was doubled)."""


@dataclass(frozen=True)
class ShardPublished:
    """One shard's part of a publish: its last seq in the table before and after."""

    shard: str
    before: int
    after: int
    rows: int
    commits: int
    retries: int
    purged: int = 0
    """Published rows rewritten because a purge erased their headers in the log."""


@dataclass
class PublishReport:
    """What ``publish_delta`` did: the table, its version after, each shard's part."""

    dest: str
    version: int
    shards: list[ShardPublished] = field(default_factory=list)
    maintenance: dict[str, Any] = field(default_factory=dict)

    @property
    def rows(self) -> int:
        return sum(s.rows for s in self.shards)


def require_deltalake() -> None:
    """UsageError (exit 2) naming the extra when deltalake is not installed."""
    try:
        import deltalake  # noqa: F401
    except ImportError as exc:
        raise UsageError(
            "publish delta needs the deltalake package, which is not installed:"
            " pip install 'mailledger[cluster]'"
            f" ({exc})"
        ) from None


def app_id(shard: str) -> str:
    """The Delta application id of a shard's commits."""
    return f"mailledger:{shard}"


def table_schema() -> pa.Schema:
    """The table's schema: the log's event schema plus the ``shard`` partition."""
    return SCHEMA.remove_metadata().append(pa.field("shard", pa.string(), False))


def publish_delta(
    shards: Sequence[tuple[str, Path]],
    dest: Path,
    *,
    chunk_rows: int = CHUNK_ROWS,
    optimize: bool = False,
    retention_hours: int = RETENTION_HOURS,
    writer: Writer | None = None,
    progress: Callable[[str, int], None] | None = None,
) -> PublishReport:
    """Append each shard's events past its last published seq to the Delta table
    at ``dest`` (created if absent); with ``optimize``, then compact its small
    files, vacuum files removed more than ``retention_hours`` ago and write a
    checkpoint. ``shards``: (name, store directory) pairs.
    ``writer``: how a chunk is committed (the default: ``write_deltalake``).
    ``progress(shard, last seq published)`` after each commit."""
    require_deltalake()
    if chunk_rows < 1:
        raise UsageError(f"--chunk-rows {chunk_rows}: at least 1")
    if retention_hours < 0:
        raise UsageError(f"--retention-hours {retention_hours}: not negative")
    dest = Path(dest)
    uri = str(dest.resolve())
    write = writer or write_chunk
    from deltalake.exceptions import DeltaError

    for shard, _ in shards:  # (a partition's directory name, and a literal in a merge)
        if not _SHARD_NAME.fullmatch(shard):
            raise UsageError(f"shard name {shard}: letters, digits, '.', '_' and '-' only")
    _is_table(uri)  # (a path delta-rs refuses: before anything is created)
    with _publisher_lock(dest):
        report = PublishReport(uri, -1)
        try:
            _check_table(uri)
            for shard, store in shards:
                report.shards.append(
                    _publish_shard(uri, shard, Path(store), chunk_rows, write, progress)
                )
            if optimize:
                report.maintenance = _maintain(uri, retention_hours)
            report.version = _version(uri)
        except DeltaError as exc:  # (opening or reading the table back, or its upkeep)
            raise PublishError(f"{uri}: {_said(exc)}") from exc
    return report


# -- one shard -----------------------------------------------------------------


def _publish_shard(
    uri: str,
    shard: str,
    store: Path,
    chunk_rows: int,
    write: Writer,
    progress: Callable[[str, int], None] | None,
) -> ShardPublished:
    log_root = store / "log"
    if not log_root.is_dir():
        raise UsageError(f"{store}: not a mailledger store (no log/)")
    if (store / _PURGE_JOURNAL).exists():
        raise PublishError(
            f"{store}: a purge is running or was interrupted; `mailledger compact --purge`"
            " finishes it, then publish"
        )
    end = _last_seq(log_root)  # (events committed after this are for the next publish)
    before = published = _transaction_version(uri, app_id(shard))
    if published > end:
        raise UsageError(
            f"{uri}: holds shard {shard} up to seq {published}, but its store {store}"
            f" ends at seq {end}: a different store published under that name?"
        )
    purged = _republish_purged(uri, shard, log_root, published, end) if published else 0
    rows = commits = retries = 0
    for chunk in _chunks(log_root, published, end, chunk_rows):
        landed, tried = _commit(uri, shard, chunk, write)
        retries += tried
        if landed is not None:
            rows += landed
            commits += 1
        published = int(chunk.column("seq")[-1].as_py())
        if progress is not None:
            progress(shard, published)
    return ShardPublished(shard, before, published, rows, commits, retries, purged)


def _commit(uri: str, shard: str, chunk: pa.Table, write: Writer) -> tuple[int | None, int]:
    """Commit ``chunk`` once: (rows it added, or None when the table already held
    them; the retries it took). The transaction version is read back before every
    attempt, so a commit that landed while its answer was lost is not repeated."""
    app = app_id(shard)
    last = int(chunk.column("seq")[-1].as_py())
    error: BaseException | None = None
    for attempt in range(_ATTEMPTS):
        have = _transaction_version(uri, app)
        if have >= last:  # landed on an earlier attempt, or by an earlier publisher
            return (None if attempt == 0 else chunk.num_rows), attempt
        try:
            write(uri, _with_shard(chunk, shard), app, last)
            return chunk.num_rows, attempt
        except Exception as exc:  # delta-rs's own errors (a commit conflict...), OSError
            error = exc
            time.sleep(_BACKOFF_S * 2**attempt)
    if _transaction_version(uri, app) >= last:
        return chunk.num_rows, _ATTEMPTS
    raise PublishError(
        f"{uri}: shard {shard}: the chunk up to seq {last} was not committed after"
        f" {_ATTEMPTS} attempts: {_said(error)}"
    )


def _said(exc: BaseException | None) -> str:
    """An error's first line (delta-rs appends a Rust backtrace to some)."""
    return str(exc).strip().split("\n", 1)[0]


def _with_shard(rows: pa.Table, shard: str) -> pa.Table:
    column = pa.array([shard] * rows.num_rows, pa.string())
    return rows.append_column(pa.field("shard", pa.string(), False), column)


def write_chunk(uri: str, rows: pa.Table, app: str, version: int) -> None:
    """The default ``Writer``: ``rows`` appended as one Delta commit that carries the
    application transaction ``(app, version)``."""
    from deltalake import CommitProperties, Transaction, write_deltalake

    write_deltalake(
        uri,
        rows,
        mode="append",
        partition_by=["shard"],
        schema_mode="merge",  # (a later schema version adds columns; none are changed)
        commit_properties=CommitProperties(app_transactions=[Transaction(app, version)]),
    )


# -- a purge in the log: the published rows follow it --------------------------


def _republish_purged(uri: str, shard: str, log_root: Path, published: int, end: int) -> int:
    """Rewrite the published rows of messages a purge erased since the last publish;
    returns how many.

    A purge first appends a ``message-deleted`` by ``mailledger-purge`` for each
    pseudonym, then rewrites every earlier event of that message (headers gone, the
    Message-ID the pseudonym). Those markers among the events not yet published say a
    purge happened; the rows the table holds (seq <= ``published``) under those
    pseudonyms in the log are replaced by the log's rows in one Delta ``merge``
    (one commit), before the markers are published: a publisher killed in between
    finds the markers again next time, and a second merge changes nothing.
    The files that held the erased rows stay on disk, out of the table's current
    version, until ``--optimize`` vacuums them past ``--retention-hours``."""
    from stores.log import EventLog
    from stores.purge import PSEUDONYM, PURGE_ACTOR

    pc = arrow.compute()
    log = EventLog(log_root, durable=False)
    new = log.read(after=published, columns=["seq", "type", "actor", "message_id"])
    new = new.filter(pc.less_equal(new.column("seq"), end))
    marks = new.filter(
        pc.and_(
            pc.equal(new.column("type"), "message-deleted"),
            pc.equal(new.column("actor"), PURGE_ACTOR),
        )
    )
    pseudonyms = [m for m in marks.column("message_id").to_pylist() if m and PSEUDONYM.match(m)]
    if not pseudonyms:
        return 0
    ids = log.read(columns=["seq", "message_id"])  # (two columns of the whole log, once)
    hit = ids.filter(
        pc.and_(
            pc.is_in(ids.column("message_id"), pa.array(pseudonyms, pa.string())),
            pc.less_equal(ids.column("seq"), published),
        )
    )
    seqs = hit.column("seq").to_pylist()
    if not seqs:
        return 0
    rows = log.read_at(seqs, [n for n in SCHEMA.names if n != "seq"])
    rows = rows.select(SCHEMA.names).replace_schema_metadata(None).cast(SCHEMA.remove_metadata())
    _merge_rows(uri, _with_shard(rows, shard), shard)
    return len(seqs)


def _merge_rows(uri: str, rows: pa.Table, shard: str) -> None:
    from deltalake import DeltaTable

    DeltaTable(uri).merge(
        rows,
        predicate=f"t.shard = '{shard}' AND t.shard = s.shard AND t.seq = s.seq",
        source_alias="s",
        target_alias="t",
    ).when_matched_update_all().execute()


# -- reading a shard's log in bounded chunks --------------------------------------


def _listing(log_root: Path) -> list[LogFile]:
    """The log's files, listed again for a moment while a compaction renames files
    (a listing taken then may show a gap); a gap that stays is damage."""
    for attempt in range(50):
        try:
            return LogDirectory(log_root).files(fresh=True)
        except LogIntegrityError:
            if attempt == 49:
                raise
            time.sleep(0.01)
    raise AssertionError("unreachable")


def _last_seq(log_root: Path) -> int:
    files = _listing(log_root)
    return files[-1].last if files else 0


def _chunks(log_root: Path, after: int, end: int, chunk_rows: int) -> Iterator[pa.Table]:
    """The events ``after`` < seq <= ``end`` of the log at ``log_root``, in seq
    order, in tables of at most ``chunk_rows`` rows (the last may be smaller).

    A file at a time, a Parquet row group batch at a time: a shard of millions of
    events costs a chunk's memory. A file a compaction removed under us (its events
    now in a wider file) sends us back to the listing, from the last seq read."""
    pending: list[pa.Table] = []
    held = 0
    position = after
    while position < end:
        try:
            for f in _listing(log_root):
                if f.last <= position:
                    continue
                if f.first > end:
                    break
                for table in _file_batches(f, position, end, chunk_rows):
                    pending.append(table)
                    held += table.num_rows
                    position = int(table.column("seq")[-1].as_py())
                    while held >= chunk_rows:
                        whole = pa.concat_tables(pending)
                        yield whole.slice(0, chunk_rows)
                        rest = whole.slice(chunk_rows)
                        pending, held = ([rest] if rest.num_rows else []), rest.num_rows
            if position < end:
                raise LogIntegrityError(f"{log_root}: ends at seq {position}, not {end}")
        except FileNotFoundError:
            continue  # (a compaction merged files since the listing: list again)
    if held:
        yield pa.concat_tables(pending)


def _file_batches(f: LogFile, after: int, end: int, rows: int) -> Iterator[pa.Table]:
    """Rows ``after`` < seq <= ``end`` of log file ``f`` in the log schema, at most
    ``rows`` at a time. A file that does not read is a LogIntegrityError naming it."""
    schema = SCHEMA.remove_metadata()
    pc = arrow.compute()
    try:
        pf = arrow.parquet().ParquetFile(f.path)
        have = set(pf.schema_arrow.names)
        columns = [n for n in schema.names if n in have]
        for batch in pf.iter_batches(batch_size=rows, columns=columns):
            table = pa.Table.from_batches([batch])
            for i, fld in enumerate(schema):
                if fld.name not in have:  # (a file of an older schema version)
                    table = table.add_column(i, fld, pa.nulls(table.num_rows, fld.type))
            table = table.replace_schema_metadata(None)
            if not table.schema.equals(schema):
                table = table.cast(schema)
            table.validate(full=True)
            seq = table.column("seq")
            table = table.filter(pc.and_(pc.greater(seq, after), pc.less_equal(seq, end)))
            if table.num_rows:
                yield table
    except FileNotFoundError:
        raise
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise LogIntegrityError(f"{f.path}: unreadable: {exc}") from exc


# -- the table -----------------------------------------------------------------


@contextlib.contextmanager
def _publisher_lock(dest: Path) -> Iterator[None]:
    """One publisher per table: two would both read a shard's version N and both
    append the events after it."""
    if dest.exists() and not dest.is_dir():
        raise UsageError(f"{dest}: exists and is not a directory")
    created = not dest.exists()
    dest.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(dest / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise PublishError(f"{dest}: another publish to this table is running") from None
        yield
    except UsageError:
        if created:  # (refused before a row was written: leave no directory behind)
            (dest / LOCK_NAME).unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                dest.rmdir()
        raise
    finally:
        os.close(fd)


def _check_table(uri: str) -> None:
    """A table already there must be one of ours; a directory with anything but the
    lock in it and no Delta log is refused (never written into)."""
    from deltalake import DeltaTable

    if not _is_table(uri):
        others = sorted(p.name for p in Path(uri).iterdir() if p.name != LOCK_NAME)
        if others:
            raise UsageError(f"{uri}: not empty and not a Delta table ({', '.join(others[:3])})")
        return
    table = DeltaTable(uri)
    names = set(table.schema().to_arrow().names)
    columns = table.metadata().partition_columns
    if columns != ["shard"] or not {"seq", "type", "shard"} <= names:
        raise UsageError(
            f"{uri}: a Delta table, but not one of mailledger's events"
            f" (partitioned by {columns}, columns {sorted(names)[:5]}...)"
        )


def _is_table(uri: str) -> bool:
    """Whether a Delta table is at ``uri``; UsageError for a path delta-rs refuses."""
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaError

    try:
        return bool(DeltaTable.is_deltatable(uri))
    except DeltaError as exc:  # (delta-rs parses the path as a URL: ESC, say, is refused)
        raise UsageError(f"{uri}: not a path delta-rs can use: {_said(exc)}") from None


def _transaction_version(uri: str, app: str) -> int:
    """The last seq the table holds for application ``app`` (0: none), read from a
    fresh handle (one kept across commits grows dearer: docs/delta-spike.md)."""
    from deltalake import DeltaTable

    if not DeltaTable.is_deltatable(uri):
        return 0
    version = DeltaTable(uri).transaction_version(app)
    return int(version) if version is not None else 0


def _version(uri: str) -> int:
    from deltalake import DeltaTable

    return DeltaTable(uri).version() if DeltaTable.is_deltatable(uri) else -1


def _maintain(uri: str, retention_hours: int) -> dict[str, Any]:
    """Compact small files, vacuum what was removed more than ``retention_hours``
    ago, then write a checkpoint of the version that leaves; returns what each did."""
    from deltalake import DeltaTable

    if not DeltaTable.is_deltatable(uri):
        return {}
    compacted = DeltaTable(uri).optimize.compact()
    removed = DeltaTable(uri).vacuum(
        retention_hours=retention_hours,
        dry_run=False,
        enforce_retention_duration=retention_hours >= RETENTION_HOURS,
    )
    table = DeltaTable(uri)
    table.create_checkpoint()
    return {
        "files_added": int(compacted.get("numFilesAdded", 0)),
        "files_removed": int(compacted.get("numFilesRemoved", 0)),
        "vacuumed": len(removed),
        "checkpoint_version": table.version(),
    }

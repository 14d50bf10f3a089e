"""The bulk rebuild: every projection dropped and built again from the whole log.

The same rules and the same SQL as the incremental fold, run by builders at
once on empty tables, with the events staged in a scratch DuckDB database so
that memory is bounded by DuckDB's ``memory_limit`` (it spills to disk),
whatever the size of the log. Nothing here holds the log in Python.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import duckdb
import pyarrow as pa

from projections.filters import build_filters
from projections.fold.batch import FOLD_SCHEMA, SEEN, STAGE, STREAM_ROWS, batch_types, new_events
from projections.fold.cursors import CURSOR_EVENTS, fold_cursors
from projections.fold.deltas import stamp_filters
from projections.fold.headers import INSERT_ENTRIES, entries
from projections.fold.locations import LOCATION_EVENTS, fold_locations
from projections.fold.messages import (
    DECIDE,
    NEW_ROWS,
    NONE_EXISTING,
    REMOVALS,
    count_defects,
    derived_columns,
)
from projections.fold.meta import fresh_probe, set_meta
from projections.fold.threads import BULK_EDGES, bulk_components, count_threads
from projections.tables import (
    PROJECTION_VERSION,
    TABLES,
    base_of,
    column_types,
    create_indexes,
    create_tables,
    drop_tables,
    sql_string,
)

__all__ = ["REBUILD_PHASES", "build_tables", "rebuild", "stage_files"]

log = logging.getLogger("mailledger.projections")


@contextlib.contextmanager
def _timed(what: str) -> Iterator[None]:
    """Log at debug level how long ``what`` took (a rebuild's phases: ``--debug``
    shows where a replay's time goes)."""
    start, cpu = time.perf_counter(), time.thread_time()
    try:
        yield
    finally:
        log.debug(
            "rebuild: %s %.2f s (%.2f s cpu in this thread)",
            what,
            time.perf_counter() - start,
            time.thread_time() - cpu,
        )


#: What a rebuild does, in order (``rebuild``'s ``phase`` is told of each).
REBUILD_PHASES = ("staging the log", "building the tables", "writing them", "indexing")


def rebuild(
    con: duckdb.DuckDBPyConnection,
    chunks: Iterable[pa.Table],
    *,
    files: Sequence[Path] = (),
    scratch: Path | None = None,
    builders: int | None = None,
    phase: Callable[[int, str], None] | None = None,
) -> int:
    """Drop every projection and fold the whole log again; returns the last seq.

    ``chunks`` are the log's events in seq order. ``files``, when given, are the
    log's Parquet files holding those same events: DuckDB then reads them itself,
    faster than the chunks can be handed over. Should that read fail (a damaged
    file, a file a compaction just replaced), ``chunks`` are read instead, and
    their reader says precisely what is wrong.

    The events are staged in ``scratch``, a DuckDB file that must not exist yet
    and that the caller removes afterwards (None: in memory, for small logs and
    tests; a fold touches no file itself): the staged
    events and every intermediate table live in DuckDB's buffer pool, which
    spills to disk under the connection's ``memory_limit``. Nothing here holds
    the log in Python. ``builders``: how many tables are built at once (default
    one more than the cores); each needs working memory of its own, so a small
    ``memory_limit`` wants one. ``phase(i, name)`` is told as each of the
    ``REBUILD_PHASES`` begins (a progress display: the work is bulk SQL, so the
    phase is what can be shown).
    """
    tell = phase or (lambda i, name: None)
    tell(1, REBUILD_PHASES[0])
    for name, kind in con.execute(
        "SELECT table_name, table_type FROM information_schema.tables"
        " WHERE table_schema = 'main' AND table_catalog = current_database()"
    ).fetchall():
        con.execute(f'DROP {"VIEW" if kind == "VIEW" else "TABLE"} IF EXISTS "{name}"')
    create_tables(con)
    set_meta(con, "applied_seq", 0)
    set_meta(con, "threads", 0)
    set_meta(con, "ghosts", 0)
    # The builders are the parallelism: DuckDB's own worker threads on top of
    # them were measured to cost more than they gave (2 cores: 10-20% slower).
    # Every rule names its order (seq, arg_min, min): rows need not keep the
    # order they were inserted in, which DuckDB otherwise pays for.
    threads, ordered = con.execute(
        "SELECT current_setting('threads'), current_setting('preserve_insertion_order')"
    ).fetchall()[0]
    cached = con.execute("SELECT current_setting('parquet_metadata_cache')").fetchall()[0][0]
    con.execute("SET preserve_insertion_order = false")
    # (each builder scans the log's files: their footers are read once)
    con.execute("SET parquet_metadata_cache = true")
    where = ":memory:" if scratch is None else str(scratch)
    con.execute(f"ATTACH '{where}' AS {STAGE}")
    try:
        with _timed("staging"):
            last = stage_files(con, files) if files else None
            viewed = last is not None
            if last is None:
                last = _stage_chunks(con, chunks)
        con.execute("SET threads = 1")
        if last:
            tell(2, REBUILD_PHASES[1])
            with _timed("building"):
                try:
                    _build_or_retry(con, builders or _BUILDERS)
                except duckdb.OutOfMemoryException:
                    raise
                except duckdb.Error as exc:
                    if not viewed:
                        raise
                    # a log file failed a builder's read: the chunks' reader is exact
                    # about what is wrong, or reads the files a compaction made
                    log.warning("replay: a log file failed to read (%s): reading it again", exc)
                    _reset_build(con)
                    con.execute(f"DROP VIEW {STAGE}._batch")
                    last = _stage_chunks(con, chunks)
                    _build_or_retry(con, builders or _BUILDERS)
    finally:
        con.execute(f"DETACH {STAGE}")
        con.execute(f"SET threads = {int(threads)}")
        con.execute(f"SET preserve_insertion_order = {bool(ordered)}")
        con.execute(f"SET parquet_metadata_cache = {bool(cached)}")
    set_meta(con, "applied_seq", last)
    with _timed("counting threads"):
        count_threads(con)
        count_defects(con)
    tell(3, REBUILD_PHASES[2])
    with _timed("checkpoint"):
        con.execute("CHECKPOINT")  # (the tables written out: the indexes get the memory)
    tell(4, REBUILD_PHASES[3])
    with _timed("indexing"):
        missing = create_indexes(con)
    if missing:
        log.warning(
            "the projections were rebuilt without the index%s %s: DuckDB builds an index"
            " whole in memory and it did not fit in this rebuild's memory limit; every"
            " answer stays right, but lookups that needed it scan their table (replay with"
            " more --memory to build it)",
            "es" if len(missing) > 1 else "",
            ", ".join(missing),
        )
    with _timed("filters"):
        build_filters(con)
        stamp_filters(con, fresh=True)
    set_meta(con, "hash_probe", fresh_probe(con))
    # last: a rebuild killed before this point is redone at the next open
    set_meta(con, "projection_version", PROJECTION_VERSION)
    return last


def _stage_table(con: duckdb.DuckDBPyConnection, name: str = "_batch") -> None:
    """The empty ``STAGE.<name>``, in the column types the Arrow schema gives."""
    con.register("_empty", FOLD_SCHEMA.empty_table())
    con.execute(f"CREATE TABLE {STAGE}.{name} AS SELECT * FROM _empty")
    con.unregister("_empty")


def stage_files(con: duckdb.DuckDBPyConnection, files: Sequence[Path]) -> int | None:
    """``STAGE._batch``: a view of the events of the log ``files``, read by DuckDB
    where the builders scan it; returns the last seq, or None when they could not
    be read (or do not hold seq 1..last).

    A view, not a copy: copying the log into the scratch database (compressed,
    written, then read back by every builder) was a fifth of a replay; the
    builders' scans of the Parquet files, each of the few columns it needs, cost
    less than the copy alone. (1,000,000 events: the copy 9.5 s of CPU, a scan of
    every folded column 1.3 s.) A file that fails a builder's read (damaged, or
    replaced by a compaction midway) has the rebuild staged from the chunks
    instead (``rebuild``)."""
    kinds = column_types(con, FOLD_SCHEMA)
    listed = ", ".join(sql_string(str(f)) for f in files)
    # Columns matched by name, in the fold's types. A log written before a column
    # was added has files without it: DuckDB then binds no such column (an old file
    # first) or refuses a file that lacks it (a newer file first; the newest column
    # is read in the check, so that this is found here). Only then are the files
    # matched by name (union_by_name holds every file's schema: 140 MB more at
    # 1,000 files), a column none of them has read as NULL. A file of another
    # shape still fails the read, and the chunks are staged instead.
    newest = kinds[-1][0]
    for options in ("", ", union_by_name = true"):
        con.execute(f"DROP VIEW IF EXISTS {STAGE}._batch")
        source = f"read_parquet([{listed}]{options})"
        try:
            have = {name for name, _ in kinds}
            if options:
                have = {r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()}
            cols = ", ".join(
                f"CAST({_quoted(name) if name in have else 'NULL'} AS {kind}) AS {_quoted(name)}"
                for name, kind in kinds
            )
            con.execute(f"CREATE VIEW {STAGE}._batch AS SELECT {cols} FROM {source}")
            n, first, last, distinct, _ = con.execute(
                "SELECT count(*), min(seq), max(seq), count(DISTINCT seq),"
                f" count({_quoted(newest)}) FROM {STAGE}._batch"
            ).fetchall()[0]
        except duckdb.Error:
            continue
        if n == distinct == (last or 0) and first in (1, None):
            return int(last or 0)
        break
    con.execute(f"DROP VIEW IF EXISTS {STAGE}._batch")
    return None


def _quoted(name: str) -> str:
    return f'"{name}"'


def _stage_chunks(con: duckdb.DuckDBPyConnection, chunks: Iterable[pa.Table]) -> int:
    """Copy the events of ``chunks`` into ``STAGE._batch``, one chunk at a time;
    returns the last seq."""
    _stage_table(con)
    last = 0
    for chunk in new_events(chunks, 0):
        part = chunk.select(FOLD_SCHEMA.names).cast(FOLD_SCHEMA)
        con.register("_events", part)
        try:
            con.execute(f"INSERT INTO {STAGE}._batch SELECT * FROM _events")
        finally:
            con.unregister("_events")
        last = part.column("seq")[-1].as_py()
    return last


# Builders running at once: one more than the cores. More only take turns on the
# cores, each slower (2 cores, 100,000 events, 6 replays each in fresh processes:
# 1.81 s median with 2, 1.83 with 3, 2.00 with 4, 2.06 with 8).
_BUILDERS = (os.cpu_count() or 1) + 1


def build_tables(con: duckdb.DuckDBPyConnection, builders: int) -> None:
    """Fold the events staged in ``STAGE._batch`` (the whole log) into empty tables.

    The same rules and the same SQL as an incremental fold of everything in one
    batch (on empty tables nothing is removed or merged), but the tables are
    built by builders at once on their own cursors: messages, the header index,
    the thread edges, the thread components, and locations with cursors. DuckDB
    runs a statement without holding the GIL. A builder writes only its own
    tables; the indexes are made after every table is full, one at a time (DuckDB
    holds an index whole in memory while it builds it: made beside the builders,
    they took memory the builders' spills needed). Each statement commits
    by itself: a rebuild killed midway leaves no ``projection_version``, so the
    next open rebuilds again.
    """

    def views(c: duckdb.DuckDBPyConnection, new: str = "", staged: str = "_batch _win") -> None:
        """On cursor ``c``: views of the ``staged`` tables (the events, the winners'
        seqs, their derived columns) and ``_new``, the new message rows as the
        incremental fold has them."""
        for name in staged.split():
            c.execute(f"CREATE TEMP VIEW {name} AS SELECT * FROM {STAGE}.{name}")
        if new:
            c.execute(f"CREATE TEMP VIEW _new AS {new}")

    def decide(c: duckdb.DuckDBPyConnection) -> None:
        views(c, staged="_batch")
        c.execute(DECIDE.format(existing=NONE_EXISTING))  # on empty tables: every winner new
        c.execute(
            f"CREATE TABLE {STAGE}._win AS SELECT win AS seq FROM _decide WHERE win IS NOT NULL"
        )
        c.execute(REMOVALS.format(existing=""))

    def derive(c: duckdb.DuckDBPyConnection) -> None:
        """The columns the normalization rules define, of every message-seen event
        (the winners are among them: this need not wait for the decision), a
        slice at a time."""
        c.execute(f"CREATE TABLE {STAGE}._derived (seq BIGINT, subject_key VARCHAR,"
                  " date_key VARCHAR, date_iso VARCHAR)")  # fmt: skip
        reader = c.sql(
            f"SELECT seq, subject, date_utc FROM {STAGE}._batch WHERE type = '{SEEN}'"
        ).to_arrow_reader(STREAM_ROWS)
        w = con.cursor()
        try:
            for batch in reader:
                w.register("_derived_rows", derived_columns(pa.Table.from_batches([batch])))
                w.execute(f"INSERT INTO {STAGE}._derived SELECT * FROM _derived_rows")
                w.unregister("_derived_rows")
        finally:
            w.close()

    # the new message rows as the incremental fold has them (its _derived holds
    # the winners' rows only)
    new_rows = f"{NEW_ROWS} JOIN _win USING (seq)"

    def threads(c: duckdb.DuckDBPyConnection) -> None:
        """The thread graph: its edges written, then its components from them."""
        views(c, 'SELECT message_id, in_reply_to, "references" FROM _batch JOIN _win USING (seq)')
        c.execute(f"INSERT INTO thread_edges {BULK_EDGES}")
        bulk_components(c, "thread_edges")

    def places(c: duckdb.DuckDBPyConnection) -> None:
        views(c, staged="_batch")
        types = batch_types(c)
        if types & LOCATION_EVENTS:
            fold_locations(c, bulk=True)
        if types & CURSOR_EVENTS:
            fold_cursors(c)

    def messages(c: duckdb.DuckDBPyConnection) -> None:
        views(c, new_rows, "_batch _derived _win")
        c.execute(f"INSERT INTO {base_of('messages')} BY NAME SELECT * FROM _new")

    def header_index(c: duckdb.DuckDBPyConnection) -> None:
        views(c, new_rows, "_batch _derived _win")
        # (``entries`` writes the entries header by header: a header's entries lie
        # together, and a find reads few row groups. One pass over the rows, each
        # row's entries unnested, cost 1.5 s less CPU at 1M but interleaved them:
        # find from 1.7x slower on the same 100k store)
        c.execute(INSERT_ENTRIES.format(table=base_of("header_index"), src=f"({entries('_new')})"))

    catalog = con.execute("SELECT current_database()").fetchall()[0][0]

    def run(job: Callable[[duckdb.DuckDBPyConnection], None]) -> None:
        c = con.cursor()  # (a new cursor starts in the instance's default database)
        try:
            c.execute(f'USE "{catalog}"')
            with _timed(f"builder job {job.__name__}"):
                job(c)
        finally:
            c.close()

    # (one builder runs the jobs in the order they are submitted, which is an order
    # their dependencies allow)
    with ThreadPoolExecutor(max_workers=builders, thread_name_prefix="replay") as pool:
        # locations and cursors need no decision; the derived columns not yet
        decided, derived = pool.submit(run, decide), pool.submit(run, derive)
        jobs = [pool.submit(run, places), decided, derived]
        decided.result()
        jobs.append(pool.submit(run, threads))
        derived.result()
        # the longest builder first: it ends the rebuild when it starts last
        jobs += [pool.submit(run, header_index), pool.submit(run, messages)]
        for done in jobs:
            done.result()  # a builder's error is the rebuild's


def _build_or_retry(con: duckdb.DuckDBPyConnection, builders: int) -> None:
    """``build_tables``; should builders at once run out of memory, the tables are built
    again one at a time (slower, in less memory): a rebuild never fails for lack
    of memory that one builder would have had."""
    try:
        build_tables(con, builders)
    except duckdb.OutOfMemoryException as exc:
        if builders == 1:
            raise
        log.warning(
            "%d builders ran out of memory (%s): building one table at a time", builders, exc
        )
    else:
        return
    _reset_build(con)
    build_tables(con, 1)


def _reset_build(con: duckdb.DuckDBPyConnection) -> None:
    """Undo a ``build_tables`` that failed midway: its intermediate tables dropped (the
    staged events kept) and the projection tables emptied."""
    for (name,) in con.execute(
        f"SELECT table_name FROM duckdb_tables() WHERE database_name = '{STAGE}'"
        " AND table_name <> '_batch'"
    ).fetchall():
        con.execute(f"DROP TABLE {STAGE}.{name}")
    for name in TABLES:
        if name != "meta":
            drop_tables(con, name)
    create_tables(con)

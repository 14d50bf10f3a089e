"""The projections as one fold: ``apply(con, batch)`` folds committed events into tables.

Two paths, one set of rules:

- ``apply`` folds a batch of committed events into the tables as they stand (an
  incremental update after a commit). Its cost follows the batch: it reads the
  rows the batch touches (its ids, their threads, their locations, their index
  entries) through ART indexes with literal keys (``projections.lookup``), never
  a scan of a table whose size follows the store, unless the batch is itself so
  large that one scan is cheaper than its probes.
- ``rebuild`` drops every projection and builds them from the whole log on
  empty tables: the same SQL and the same normalization, run by builders at
  once, with the events staged in a scratch DuckDB file so that memory is
  bounded by DuckDB's ``memory_limit`` (it spills to disk), whatever the size
  of the log.

A batch is applied in one transaction together with the last seq it contains;
events at or below that seq are skipped, so applying a batch twice changes
nothing. No clock, network or file other than the DuckDB connection given (and
the scratch database a rebuild attaches; its caller makes room for it and
removes it) is touched here.

The fold runs as SQL over the events registered in DuckDB (the wide columns,
such as the addresses and references, never pass through Python); Python computes
only what the normalization rules of ``projections.normalize`` define (subject and
date keys) and the connected components of the thread graph.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from projections.lookup import INDEX_KEYS_MAX, rows_where_in, sql_literals
from projections.normalize import normalize_subject
from projections.tables import PROJECTION_VERSION, TABLES, create_indexes, create_tables
from stores.errors import LogIntegrityError
from stores.events import SCHEMA

# What a fold reads of the log: everything but the decoded headers (they stay in
# the log; ``MessageStore.get`` reads them from there).
FOLD_SCHEMA = pa.schema([field for field in SCHEMA if field.name != "headers"])

__all__ = [
    "FOLD_SCHEMA",
    "KEY_SEP",
    "applied_seq",
    "apply",
    "apply_chunks",
    "hash_matches",
    "hash_probe",
    "key_hash",
    "location_key",
    "meta_values",
    "projection_version",
    "rebuild",
    "thread_counts",
]

KEY_SEP = "\x1f"


def _pc() -> Any:
    """pyarrow.compute, imported when a fold first needs it (0.1 s a command that
    only reads)."""
    import pyarrow.compute

    return pyarrow.compute


log = logging.getLogger("mailledger.projections")

_SEEN = "message-seen"
_DELETED = "message-deleted"
_VANISHED = "location-vanished"
_MOVED = "cursor-moved"
_UIDV = "uidvalidity-changed"

# ``header_index.kh``: DuckDB's hash of header, 0x1F, value. The hash is
# DuckDB's own (fast, vectorized); a DuckDB whose hash differs from the one that
# built the tables has them rebuilt (``hash_matches``).
_KH = f"hash(header || '{KEY_SEP}' || value)"
_HASH_PROBE = "hash('mailledger header_index')"


def key_hash(con: duckdb.DuckDBPyConnection, header: str, value: str) -> int:
    """The ``kh`` of a normalized (header, value), computed by DuckDB: a query that
    compares ``kh`` with this number (a literal) is an index scan, where
    ``kh = hash(?)`` would not be (a parameter is not folded before the scan is
    planned)."""
    return int(con.execute("SELECT hash(?)", [f"{header}{KEY_SEP}{value}"]).fetchall()[0][0])


def _meta(con: duckdb.DuckDBPyConnection, key: str) -> int | None:
    try:
        rows = con.execute("SELECT value FROM meta WHERE key = ?", [key]).fetchall()
    except duckdb.CatalogException:
        return None
    return int(rows[0][0]) if rows else None


def applied_seq(con: duckdb.DuckDBPyConnection) -> int:
    """The last seq folded into these tables (0 for none)."""
    return _meta(con, "applied_seq") or 0


def projection_version(con: duckdb.DuckDBPyConnection) -> int | None:
    """The PROJECTION_VERSION the tables were built with (None: no tables)."""
    return _meta(con, "projection_version")


def _probe(con: duckdb.DuckDBPyConnection) -> int:
    return int(con.execute(f"SELECT ({_HASH_PROBE} >> 2)::BIGINT").fetchall()[0][0])


def hash_matches(con: duckdb.DuckDBPyConnection) -> bool:
    """True when this DuckDB hashes index keys as the one that built the tables."""
    return _meta(con, "hash_probe") == hash_probe(con)


def meta_values(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """Every value the tables keep about themselves (``applied_seq``,
    ``projection_version``, ``hash_probe``), read in one query: a reader opening
    the file asks for three of them, and the four queries they took (the probe
    too) were 1.8 ms of every one-shot read. Empty when there are no tables."""
    try:
        rows = con.execute("SELECT key, value FROM meta").fetchall()
    except duckdb.CatalogException:
        return {}
    return {key: int(value) for key, value in rows}


_PROBES: dict[str, int] = {}


def hash_probe(con: duckdb.DuckDBPyConnection) -> int:
    """What this process's DuckDB gives for the hash probe (``hash_matches``): asked
    once per DuckDB version, the library a process runs does not change under it."""
    version = duckdb.__version__
    if version not in _PROBES:
        _PROBES[version] = _probe(con)
    return _PROBES[version]


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


def _set_meta(con: duckdb.DuckDBPyConnection, key: str, value: int) -> None:
    con.execute("DELETE FROM meta WHERE key = ?", [key])
    con.execute("INSERT INTO meta VALUES (?, ?)", [key, value])


_STAGE = "_replay_stage"


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
    _set_meta(con, "applied_seq", 0)
    _set_meta(con, "threads", 0)
    _set_meta(con, "ghosts", 0)
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
    con.execute(f"ATTACH '{where}' AS {_STAGE}")
    try:
        with _timed("staging"):
            last = _stage_files(con, files) if files else None
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
                    con.execute(f"DROP VIEW {_STAGE}._batch")
                    last = _stage_chunks(con, chunks)
                    _build_or_retry(con, builders or _BUILDERS)
    finally:
        con.execute(f"DETACH {_STAGE}")
        con.execute(f"SET threads = {int(threads)}")
        con.execute(f"SET preserve_insertion_order = {bool(ordered)}")
        con.execute(f"SET parquet_metadata_cache = {bool(cached)}")
    _set_meta(con, "applied_seq", last)
    with _timed("counting threads"):
        _count_threads(con)
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
    _set_meta(con, "hash_probe", _probe(con))
    # last: a rebuild killed before this point is redone at the next open
    _set_meta(con, "projection_version", PROJECTION_VERSION)
    return last


def _stage_table(con: duckdb.DuckDBPyConnection, name: str = "_batch") -> None:
    """The empty ``_STAGE.<name>``, in the column types the Arrow schema gives."""
    con.register("_empty", FOLD_SCHEMA.empty_table())
    con.execute(f"CREATE TABLE {_STAGE}.{name} AS SELECT * FROM _empty")
    con.unregister("_empty")


def _stage_files(con: duckdb.DuckDBPyConnection, files: Sequence[Path]) -> int | None:
    """``_STAGE._batch``: a view of the events of the log ``files``, read by DuckDB
    where the builders scan it; returns the last seq, or None when they could not
    be read (or do not hold seq 1..last).

    A view, not a copy: copying the log into the scratch database (compressed,
    written, then read back by every builder) was a fifth of a replay; the
    builders' scans of the Parquet files, each of the few columns it needs, cost
    less than the copy alone. (1,000,000 events: the copy 9.5 s of CPU, a scan of
    every folded column 1.3 s.) A file that fails a builder's read (damaged, or
    replaced by a compaction midway) has the rebuild staged from the chunks
    instead (``rebuild``)."""
    con.register("_empty", FOLD_SCHEMA.empty_table())
    try:
        kinds = con.execute("DESCRIBE SELECT * FROM _empty").fetchall()
    finally:
        con.unregister("_empty")
    # (columns matched by name, in the fold's types; a file of another shape fails
    # the read and the chunks are staged instead. union_by_name would take it, but
    # it holds every file's schema: 140 MB more at 1,000 files)
    cols = ", ".join(f'CAST("{name}" AS {kind}) AS "{name}"' for name, kind, *_ in kinds)
    listed = ", ".join("'" + str(f).replace("'", "''") + "'" for f in files)
    try:
        con.execute(f"CREATE VIEW {_STAGE}._batch AS SELECT {cols} FROM read_parquet([{listed}])")
        n, first, last, distinct = con.execute(
            f"SELECT count(*), min(seq), max(seq), count(DISTINCT seq) FROM {_STAGE}._batch"
        ).fetchall()[0]
    except duckdb.Error:
        readable = False
    else:
        readable = n == distinct == (last or 0) and first in (1, None)
    if not readable:
        con.execute(f"DROP VIEW IF EXISTS {_STAGE}._batch")
        return None
    return int(last or 0)


def _stage_chunks(con: duckdb.DuckDBPyConnection, chunks: Iterable[pa.Table]) -> int:
    """Copy the events of ``chunks`` into ``_STAGE._batch``, one chunk at a time;
    returns the last seq."""
    _stage_table(con)
    last = 0
    for chunk in _new_events(chunks, 0):
        part = chunk.select(FOLD_SCHEMA.names).cast(FOLD_SCHEMA)
        con.register("_events", part)
        try:
            con.execute(f"INSERT INTO {_STAGE}._batch SELECT * FROM _events")
        finally:
            con.unregister("_events")
        last = part.column("seq")[-1].as_py()
    return last


# Builders running at once: one more than the cores. More only take turns on the
# cores, each slower (2 cores, 100,000 events, 6 replays each in fresh processes:
# 1.81 s median with 2, 1.83 with 3, 2.00 with 4, 2.06 with 8).
_BUILDERS = (os.cpu_count() or 1) + 1
# Rows handed to Python at a time (derived columns, thread components).
_STREAM_ROWS = 1 << 17


def _build(con: duckdb.DuckDBPyConnection, builders: int) -> None:
    """Fold the events staged in ``_STAGE._batch`` (the whole log) into empty tables.

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
            c.execute(f"CREATE TEMP VIEW {name} AS SELECT * FROM {_STAGE}.{name}")
        if new:
            c.execute(f"CREATE TEMP VIEW _new AS {new}")

    def decide(c: duckdb.DuckDBPyConnection) -> None:
        views(c, staged="_batch")
        c.execute(_DECIDE.format(existing=_NONE_EXISTING))  # on empty tables: every winner new
        c.execute(
            f"CREATE TABLE {_STAGE}._win AS SELECT win AS seq FROM _decide WHERE win IS NOT NULL"
        )

    def derive(c: duckdb.DuckDBPyConnection) -> None:
        """The columns the normalization rules define, of every message-seen event
        (the winners are among them: this need not wait for the decision), a
        slice at a time."""
        c.execute(f"CREATE TABLE {_STAGE}._derived (seq BIGINT, subject_key VARCHAR,"
                  " date_key VARCHAR, date_iso VARCHAR)")  # fmt: skip
        reader = c.sql(
            f"SELECT seq, subject, date_utc FROM {_STAGE}._batch WHERE type = '{_SEEN}'"
        ).to_arrow_reader(_STREAM_ROWS)
        w = con.cursor()
        try:
            for batch in reader:
                w.register("_derived_rows", _derived(pa.Table.from_batches([batch])))
                w.execute(f"INSERT INTO {_STAGE}._derived SELECT * FROM _derived_rows")
                w.unregister("_derived_rows")
        finally:
            w.close()

    # the new message rows as the incremental fold has them (its _derived holds
    # the winners' rows only)
    new_rows = f"{_NEW_ROWS} JOIN _win USING (seq)"

    def threads(c: duckdb.DuckDBPyConnection) -> None:
        """The thread graph: its edges written, then its components from them."""
        views(c, 'SELECT message_id, in_reply_to, "references" FROM _batch JOIN _win USING (seq)')
        c.execute(f"INSERT INTO thread_edges {_BULK_EDGES}")
        _bulk_components(c, "thread_edges")

    def places(c: duckdb.DuckDBPyConnection) -> None:
        views(c, staged="_batch")
        types = _ids(c, "SELECT DISTINCT type FROM _batch")
        if types & {_SEEN, _VANISHED}:
            _fold_locations(c, bulk=True)
        if types & {_MOVED, _UIDV}:
            _fold_cursors(c)

    def messages(c: duckdb.DuckDBPyConnection) -> None:
        views(c, new_rows, "_batch _derived _win")
        c.execute("INSERT INTO messages BY NAME SELECT * FROM _new")

    def header_index(c: duckdb.DuckDBPyConnection) -> None:
        views(c, new_rows, "_batch _derived _win")
        # (``_entries`` writes the entries header by header: a header's entries lie
        # together, and a find reads few row groups. One pass over the rows, each
        # row's entries unnested, cost 1.5 s less CPU at 1M but interleaved them:
        # find from 1.7x slower on the same 100k store)
        c.execute(_INSERT_ENTRIES.format(src=f"({_entries('_new')})"))

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
    """``_build``; should builders at once run out of memory, the tables are built
    again one at a time (slower, in less memory): a rebuild never fails for lack
    of memory that one builder would have had."""
    try:
        _build(con, builders)
    except duckdb.OutOfMemoryException as exc:
        if builders == 1:
            raise
        log.warning(
            "%d builders ran out of memory (%s): building one table at a time", builders, exc
        )
    else:
        return
    _reset_build(con)
    _build(con, 1)


def _reset_build(con: duckdb.DuckDBPyConnection) -> None:
    """Undo a ``_build`` that failed midway: its intermediate tables dropped (the
    staged events kept) and the projection tables emptied."""
    for (name,) in con.execute(
        f"SELECT table_name FROM duckdb_tables() WHERE database_name = '{_STAGE}'"
        " AND table_name <> '_batch'"
    ).fetchall():
        con.execute(f"DROP TABLE {_STAGE}.{name}")
    for name in TABLES:
        if name != "meta":
            con.execute(f"DROP TABLE {name}")
    create_tables(con)


def _bulk_components(c: duckdb.DuckDBPyConnection, edges: str) -> None:
    """``thread_nodes`` of the whole graph: the stored ids of ``_new`` and every
    end of the table ``edges``, each labelled with its component's smallest id.

    Each node gets a dense integer code in DuckDB, and the edges are turned into
    pairs of codes there, joined on DuckDB's 64-bit hash of the ids (a join of
    integers, not of strings); Python unites the pairs, streamed a slice at a
    time, in one list of ints (about 40 bytes a node, never the ids themselves);
    the labels (the smallest id of each component) are computed back in DuckDB.
    Should two ids share a hash (about one store in 10^7 at a million ids), the
    exact fold on the ids themselves runs instead: a collision must never join
    two threads.
    """
    c.execute(
        f"CREATE TABLE {_STAGE}._node AS SELECT id, hash(id) AS h,"
        " (row_number() OVER () - 1)::BIGINT AS code FROM"
        f" (SELECT message_id AS id FROM _new UNION SELECT parent FROM {edges})"
    )
    n, distinct = c.execute(f"SELECT count(*), count(DISTINCT h) FROM {_STAGE}._node").fetchall()[0]
    if n != distinct:
        _exact_components(c, edges)
        return
    parent = list(range(n))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = x = parent[parent[x]]  # path halving
        return x

    reader = c.sql(
        f"SELECT a.code AS c, b.code AS p FROM {edges} e"
        f" JOIN {_STAGE}._node a ON a.h = hash(e.child)"
        f" JOIN {_STAGE}._node b ON b.h = hash(e.parent)"
    ).to_arrow_reader(_STREAM_ROWS)
    for batch in reader:
        for x, y in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist(), strict=True):
            rx, ry = find(x), find(y)
            if rx != ry:
                parent[max(rx, ry)] = min(rx, ry)
    roots = pa.array([find(i) for i in range(n)], pa.int64())
    parent.clear()  # (the roots are all that is kept)
    c.register("_roots", pa.table({"code": pa.array(range(n), pa.int64()), "root": roots}))
    c.execute(f"CREATE TABLE {_STAGE}._root AS SELECT * FROM _roots")
    c.unregister("_roots")
    del roots
    c.execute(
        f"""
        INSERT INTO thread_nodes
        WITH r AS (SELECT n.id, r.root FROM {_STAGE}._node n JOIN {_STAGE}._root r USING (code)),
        l AS (SELECT root, min(id) AS thread_id FROM r GROUP BY root)
        SELECT r.id AS message_id, l.thread_id FROM r JOIN l USING (root)
        """
    )


def _exact_components(c: duckdb.DuckDBPyConnection, edges: str) -> None:
    """``_bulk_components`` on the ids themselves (two ids share a hash)."""
    stored = c.sql("SELECT message_id FROM _new").to_arrow_table().column("message_id")
    found = c.sql(f"SELECT child, parent FROM {edges}").to_arrow_table()
    nodes, labels = components(stored, found.column("child"), found.column("parent"))
    c.register("_nodes", pa.table({"message_id": nodes, "thread_id": labels}))
    c.execute("INSERT INTO thread_nodes SELECT message_id, thread_id FROM _nodes")
    c.unregister("_nodes")


def apply(con: duckdb.DuckDBPyConnection, batch: pa.Table) -> int:
    """Fold committed events (seq order) into the tables; returns the last applied seq."""
    return apply_chunks(con, [batch])


def apply_chunks(con: duckdb.DuckDBPyConnection, chunks: Iterable[pa.Table]) -> int:
    """Fold consecutive chunks of committed events as one batch, in one transaction.

    The chunks are staged into a DuckDB table first (which spills to disk under
    the memory limit) and folded once: one fold of everything pending is cheaper
    than one per chunk. Events at or below the applied seq are skipped; a gap
    before the first new event is an error.
    """
    applied = applied_seq(con)
    con.execute("BEGIN TRANSACTION")
    try:
        last = _stage(con, chunks, applied)
        if last > applied:
            types = _ids(con, "SELECT DISTINCT type FROM _batch")
            if types & {_SEEN, _DELETED}:
                _fold_messages(con)
            if types & {_SEEN, _VANISHED}:
                _fold_locations(con)
            if types & {_MOVED, _UIDV}:
                _fold_cursors(con)
            _set_meta(con, "applied_seq", last)
        con.execute("DROP TABLE IF EXISTS _batch")
        con.execute("COMMIT")
    except BaseException:
        # a failed COMMIT (a full disk) has ended the transaction already: the
        # ROLLBACK's own error must not hide the real one
        with contextlib.suppress(duckdb.Error):
            con.execute("ROLLBACK")
        raise
    return max(last, applied)


def _new_events(chunks: Iterable[pa.Table], applied: int) -> Iterator[pa.Table]:
    """The events of ``chunks`` (consecutive, in seq order) after seq ``applied``;
    a gap before the first of them is an error."""
    last = applied
    for chunk in chunks:
        if chunk.num_rows == 0:
            continue
        seqs = chunk.column("seq")
        first = seqs[0].as_py()
        if seqs[-1].as_py() <= last:
            continue
        if first > last + 1:
            raise LogIntegrityError(f"projections at seq {last} cannot apply a batch from {first}")
        if first <= last:
            chunk = chunk.filter(_pc().greater(seqs, last))
        last = chunk.column("seq")[-1].as_py()
        yield chunk


def _stage(con: duckdb.DuckDBPyConnection, chunks: Iterable[pa.Table], applied: int) -> int:
    """Copy the events after seq ``applied`` into the temp table ``_batch``; returns
    the last seq staged (``applied`` when there is none)."""
    last = applied
    created = False
    for chunk in _new_events(chunks, applied):
        if "headers" in chunk.column_names:
            chunk = chunk.drop_columns(["headers"])  # never folded: they stay in the log
        con.register("_chunk", chunk)
        try:
            if created:
                con.execute("INSERT INTO _batch BY NAME SELECT * FROM _chunk")
            else:
                con.execute("CREATE OR REPLACE TEMP TABLE _batch AS SELECT * FROM _chunk")
                created = True
        finally:
            con.unregister("_chunk")
        last = chunk.column("seq")[-1].as_py()
    return last


def subject_keys(subjects: pa.ChunkedArray | pa.Array) -> Any:
    """``normalize_subject`` of each value, computed once per distinct subject
    (replies share their thread's subject)."""
    subjects = _pc().cast(subjects, pa.string())
    uniq = _pc().unique(subjects)
    keys = pa.array([normalize_subject(v) for v in uniq.to_pylist()], pa.string())
    return _pc().take(keys, _pc().index_in(subjects, value_set=uniq, skip_nulls=False))


def date_columns(dates: pa.ChunkedArray | pa.Array) -> tuple[Any, Any]:
    """(``date_key``, ISO 8601 UTC) of each timestamp, vectorized.

    Spells exactly what ``normalize.date_key`` does (UTC day, zero-padded
    ``YYYY-MM-DD``), so index keys and query keys meet; a test holds the two
    together.
    """
    dates = _pc().cast(dates, pa.timestamp("us", tz="UTC"))

    def pad(values: Any, width: int) -> Any:
        return _pc().utf8_lpad(_pc().cast(values, pa.string()), width, "0")

    day = _pc().binary_join_element_wise(
        pad(_pc().year(dates), 4), pad(_pc().month(dates), 2), pad(_pc().day(dates), 2), "-"
    )
    clock = _pc().binary_join_element_wise(
        pad(_pc().hour(dates), 2), pad(_pc().minute(dates), 2), pad(_pc().second(dates), 2), ":"
    )
    iso = _pc().binary_join_element_wise(day, pa.scalar("T"), clock, pa.scalar("Z"), "")
    return day, iso


def _ids(con: duckdb.DuckDBPyConnection, sql: str) -> set[str]:
    return {r[0] for r in con.execute(sql).fetchall()}


def _column(table: pa.Table, name: str) -> list[Any]:
    return table.column(name).to_pylist()


def _register_table(con: duckdb.DuckDBPyConnection, name: str, rows: pa.Table) -> None:
    """``rows`` as the temp table ``name`` (a copy: it outlives the Arrow table)."""
    con.register("_rows", rows)
    try:
        con.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS SELECT * FROM _rows")
    finally:
        con.unregister("_rows")


# A fold probes the indexes of a large table for up to this many keys (in
# statements of INDEX_KEYS_MAX literals) rather than scan it: its COMMIT loads the
# index whole anyway (random keys touch every part of it), where a scan adds the
# table's columns to DuckDB's buffer pool. Into 1,000,000 messages, 10,000 ids
# scanned from ``messages`` took 1.0 s and 259 MiB of the pool, ``thread_nodes``
# 71 MiB more: the fold's peak RSS 692-702 -> 625-635 MiB, its wall +0.8-1.4 s.
# A table of fewer than _PROBE_RATIO rows a key is scanned: a 10k sync into an
# empty store spent 2-7 s (under load) in the probes of its second fold.
_PROBE_MAX = 20_000
_PROBE_RATIO = 50


def _probe_worth(con: duckdb.DuckDBPyConnection, table: str, keys: int) -> bool:
    """Whether ``keys`` (more than one statement's literals) are probed in chunks."""
    if keys > _PROBE_MAX:
        return False
    rows = con.execute(
        "SELECT estimated_size FROM duckdb_tables()"
        " WHERE database_name = current_database() AND table_name = ?",
        [table],
    ).fetchall()
    return bool(rows) and rows[0][0] >= _PROBE_RATIO * keys


def _probed(
    con: duckdb.DuckDBPyConnection,
    table: str,
    column: str,
    values: Sequence[Any],
    columns: str = "*",
) -> pa.Table:
    """``rows_where_in``, its keys probed through the index in chunks when that is
    worth it (``_probe_worth``)."""
    keys = sorted(set(values))
    if len(keys) <= INDEX_KEYS_MAX or not _probe_worth(con, table, len(keys)):
        return rows_where_in(con, table, column, keys, columns)
    parts = [
        rows_where_in(con, table, column, keys[i : i + INDEX_KEYS_MAX], columns)
        for i in range(0, len(keys), INDEX_KEYS_MAX)
    ]
    return pa.concat_tables(parts)


def _delete_where_in(
    con: duckdb.DuckDBPyConnection, table: str, column: str, values: Sequence[Any], source: str
) -> None:
    """Delete the rows of ``table`` whose ``column`` is in ``values`` (probed as
    literals through the index, ``INDEX_KEYS_MAX`` at a time, when few or when
    ``_probe_worth``; else joined from ``source``, SQL that selects them)."""
    if not values:
        return
    keys = sorted(set(values))
    few = len(keys) <= INDEX_KEYS_MAX or _probe_worth(con, table, len(keys))
    if few and sql_literals(keys) is not None:
        for i in range(0, len(keys), INDEX_KEYS_MAX):
            listed = sql_literals(keys[i : i + INDEX_KEYS_MAX])
            con.execute(f"DELETE FROM {table} WHERE {column} IN ({listed})")
    else:
        con.execute(f"DELETE FROM {table} WHERE {column} IN ({source})")


# -- primary store, header index, thread graph ------------------------------

# Which message-seen wins, per Message-ID in the batch: after the last delete of
# the batch, the first sighting; with no delete, the first sighting unless the
# id was already stored (first seen wins: later sightings add locations only).
# ``{existing}``: SQL selecting the batch's ids that the messages table holds.
_DECIDE = f"""
CREATE OR REPLACE TEMP TABLE _decide AS
WITH ev AS (
    SELECT seq, type, message_id FROM _batch WHERE type IN ('{_SEEN}', '{_DELETED}')
), g AS (
    SELECT message_id, max(seq) FILTER (WHERE type = '{_DELETED}') AS last_del
    FROM ev GROUP BY message_id
), w AS (
    SELECT ev.message_id, min(ev.seq) AS win FROM ev JOIN g USING (message_id)
    WHERE ev.type = '{_SEEN}' AND ev.seq > coalesce(g.last_del, 0) GROUP BY ev.message_id
)
SELECT g.message_id, g.last_del, w.win,
       g.message_id IN ({{existing}}) AS existed
FROM g LEFT JOIN w USING (message_id)
"""
_NONE_EXISTING = "SELECT NULL::VARCHAR WHERE false"

# The value(s) each indexed header takes in a message row.
_INDEXED = {
    "subject": "subject_key",
    "from": "from_addr",
    "to": "unnest(list_distinct(to_addrs))",
    "date": "date_key",
    "in-reply-to": "in_reply_to",
    "references": 'unnest(list_distinct("references"))',
    "list-id": "list_id",
}


def _entries(src: str) -> str:
    """SQL of the index entries of the message rows in ``src``: distinct
    (header, value, Message-ID) triples (an address in both To and Cc counts once)."""
    pairs = " UNION ALL ".join(
        f"SELECT '{h}' AS header, {value} AS value, message_id FROM {src}"
        for h, value in _INDEXED.items()
    )
    return f"SELECT header, value, message_id FROM ({pairs}) WHERE value IS NOT NULL"


# The header_index rows of the entries in {src}.
_INSERT_ENTRIES = f"INSERT INTO header_index SELECT {_KH}, header, value, message_id FROM {{src}}"

_MESSAGE_COLUMNS = (
    "message_id, seq, source, folder, uidvalidity, uid, uidl, size, sha256, subject,"
    ' date_utc, date_offset_min, from_addr, to_addrs, in_reply_to, "references", list_id,'
    " synthetic_id, defects"
)


# The new ``messages`` rows: the winning events of ``_batch``, with their ``_derived``.
_NEW_ROWS = (
    f"SELECT {_MESSAGE_COLUMNS}, d.subject_key, d.date_key, d.date_iso,"
    " recorded_at AS indexed_at FROM _batch JOIN _derived d USING (seq)"
)


def _derived(rows: pa.Table) -> pa.Table:
    """The columns the normalization rules define (``seq``, ``subject_key``,
    ``date_key``, ``date_iso``) of message rows with ``seq``, ``subject``, ``date_utc``."""
    day, iso = date_columns(rows.column("date_utc"))
    return pa.table(
        {
            "seq": rows.column("seq"),
            "subject_key": subject_keys(rows.column("subject")),
            "date_key": day,
            "date_iso": iso,
        }
    )


def _fold_messages(con: duckdb.DuckDBPyConnection) -> None:
    ids = sorted(
        _ids(con, f"SELECT DISTINCT message_id FROM _batch WHERE type IN ('{_SEEN}', '{_DELETED}')")
    )
    # the stored rows of the batch's ids: probed, not scanned, for a small batch
    _register_table(con, "_existing", _probed(con, "messages", "message_id", ids))
    con.execute(_DECIDE.format(existing="SELECT message_id FROM _existing"))
    con.execute(
        "CREATE OR REPLACE TEMP TABLE _removed AS SELECT e.* FROM _decide d"
        " JOIN _existing e USING (message_id) WHERE d.existed AND d.last_del IS NOT NULL"
    )
    con.execute(
        "CREATE OR REPLACE TEMP TABLE _win AS SELECT win AS seq FROM _decide"
        " WHERE win IS NOT NULL AND NOT (existed AND last_del IS NULL)"
    )
    removed = sorted(_ids(con, "SELECT message_id FROM _removed"))
    wins = con.execute("SELECT count(*) FROM _win").fetchall()[0][0]
    if not removed and not wins:
        for name in ("_decide", "_removed", "_win", "_existing"):
            con.execute(f"DROP TABLE {name}")
        return
    if removed:
        gone = "SELECT message_id FROM _removed"
        _delete_where_in(con, "messages", "message_id", removed, gone)
        # (no index on child: a delete reads the edges; a fetch never does)
        con.execute(f"DELETE FROM thread_edges WHERE child IN ({gone})")
        _delete_entries(con)

    small = con.sql(
        "SELECT seq, subject, date_utc FROM _batch WHERE seq IN (SELECT seq FROM _win)"
    ).to_arrow_table()
    con.register("_derived", _derived(small))
    con.execute(f"CREATE OR REPLACE TEMP TABLE _new AS {_NEW_ROWS}")
    con.unregister("_derived")
    con.execute("INSERT INTO messages BY NAME SELECT * FROM _new")
    con.execute(_INSERT_ENTRIES.format(src=f"({_entries('_new')})"))
    con.execute("INSERT INTO thread_edges " + _EDGES)
    affected = (
        set(removed)
        | _ids(con, "SELECT message_id FROM _new")
        | _ids(
            con,
            "SELECT in_reply_to FROM _new WHERE in_reply_to IS NOT NULL"
            ' UNION SELECT unnest("references") FROM _new',
        )
    )
    _refresh_threads(
        con, affected, new=_ids(con, "SELECT message_id FROM _new"), removed=set(removed)
    )
    for name in ("_decide", "_removed", "_win", "_new", "_existing"):
        con.execute(f"DROP TABLE {name}")


def _delete_entries(con: duckdb.DuckDBPyConnection) -> None:
    """Remove the header_index entries of the rows in ``_removed``.

    Their keys' hashes are probed through the index (the rows found are those of
    every message carrying those keys, filtered to the removed ones by row id);
    a removal with more keys than that is worth is one scan instead.
    """
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE _old_keys AS SELECT DISTINCT {_KH} AS kh, message_id"
        f" FROM ({_entries('_removed')})"
    )
    khs = [r[0] for r in con.execute("SELECT DISTINCT kh FROM _old_keys").fetchall()]
    if len(khs) <= INDEX_KEYS_MAX:
        found = con.sql(
            f"SELECT rowid AS r, kh, message_id FROM header_index WHERE kh IN ({sql_literals(khs)})"
        ).to_arrow_table()
        con.register("_found", found)
        rowids = [
            r[0]
            for r in con.execute(
                "SELECT r FROM _found JOIN _old_keys USING (kh, message_id)"
            ).fetchall()
        ]
        con.unregister("_found")
        if rowids:
            con.execute(f"DELETE FROM header_index WHERE rowid IN ({sql_literals(rowids)})")
    else:
        con.execute(
            "DELETE FROM header_index WHERE message_id IN (SELECT message_id FROM _old_keys)"
            " AND (kh, message_id) IN (SELECT kh, message_id FROM _old_keys)"
        )
    con.execute("DROP TABLE _old_keys")


# The thread_edges rows of the messages in {src} (``_new`` unless told).
_EDGES_OF = """
SELECT child, parent, min(kind) AS kind FROM (
    SELECT message_id AS child, in_reply_to AS parent, 'in-reply-to' AS kind FROM {src}
    UNION ALL SELECT message_id, unnest("references"), 'references' FROM {src}
) WHERE parent IS NOT NULL AND parent <> child
GROUP BY child, parent
"""
_EDGES = _EDGES_OF.format(src="_new")
# ``_EDGES`` of a rebuild, whose ``_new`` holds each Message-ID once: a pair
# (child, parent) is then one row's, and its distinct parents are the row's own
# (no GROUP BY of every pair of the store: 1,000,000 messages' 2,100,000 edges,
# 2.6 s -> 1.8 s of CPU); its kind is the least of the kinds it has, in-reply-to
# when the parent is the row's In-Reply-To.
_BULK_EDGES = """
SELECT child, parent,
       CASE WHEN parent = in_reply_to THEN 'in-reply-to' ELSE 'references' END AS kind
FROM (
    SELECT message_id AS child, in_reply_to,
           unnest(list_distinct(list_append("references", in_reply_to))) AS parent
    FROM _new
) WHERE parent <> child
"""


def _refresh_threads(
    con: duckdb.DuckDBPyConnection, affected: set[str], *, new: set[str], removed: set[str]
) -> None:
    """Recompute the connected components that ``affected`` nodes belong to.

    A component's thread_id is its smallest node id, so the labels depend only
    on the graph, never on the order in which it was built. The work follows the
    threads touched: their nodes are found through the indexes on thread_nodes,
    and their edges come from their stored messages' rows (every edge of a
    component has its child among the component's stored messages). The counts
    of threads and ghosts in ``meta`` change by what changed in those threads
    (``new``: the ids this fold stored; ``removed``: those it deleted).
    """
    if not affected:
        return
    ids = sorted(affected)
    threads = _column(_probed(con, "thread_nodes", "message_id", ids, "thread_id"), "thread_id")
    members = _column(
        _probed(con, "thread_nodes", "thread_id", threads, "message_id"), "message_id"
    )
    cand = sorted(affected | set(members))
    # before: the touched threads, and their nodes that were not stored messages
    stored_now = set(
        _column(_probed(con, "messages", "message_id", members, "message_id"), "message_id")
    )
    before_ghosts = sum(
        1 for m in members if not ((m in stored_now and m not in new) or m in removed)
    )
    before_threads = len(set(threads))
    con.register("_cand", pa.table({"v": pa.array(cand, pa.string())}))
    try:
        _delete_where_in(con, "thread_nodes", "message_id", cand, "SELECT v FROM _cand")
    finally:
        con.unregister("_cand")
    stored = _probed(con, "messages", "message_id", cand, 'message_id, in_reply_to, "references"')
    con.register("_stored", stored)
    try:
        edges = con.sql(_EDGES_OF.format(src="_stored")).to_arrow_table()
    finally:
        con.unregister("_stored")
    nodes, labels = components(
        stored.column("message_id"), edges.column("child"), edges.column("parent")
    )
    con.register("_nodes", pa.table({"message_id": nodes, "thread_id": labels}))
    con.execute("INSERT INTO thread_nodes SELECT message_id, thread_id FROM _nodes")
    con.unregister("_nodes")
    threads_now = len(_pc().unique(labels)) if len(labels) else 0
    _add_meta(con, "threads", threads_now - before_threads)
    _add_meta(con, "ghosts", (len(nodes) - stored.num_rows) - before_ghosts)


def _add_meta(con: duckdb.DuckDBPyConnection, key: str, delta: int) -> None:
    if delta:
        _set_meta(con, key, (_meta(con, key) or 0) + delta)


def _count_threads(con: duckdb.DuckDBPyConnection) -> None:
    """``meta`` threads and ghosts of the whole graph (what folds then keep up)."""
    threads, ghosts = con.execute(
        "SELECT count(DISTINCT thread_id), count(*) FILTER (WHERE m.message_id IS NULL)"
        " FROM thread_nodes n LEFT JOIN messages m USING (message_id)"
    ).fetchall()[0]
    _set_meta(con, "threads", int(threads))
    _set_meta(con, "ghosts", int(ghosts))


def thread_counts(con: duckdb.DuckDBPyConnection) -> tuple[int, int]:
    """(threads, ghost nodes) of these tables, as the folds keep them."""
    return _meta(con, "threads") or 0, _meta(con, "ghosts") or 0


def components(stored: Any, children: Any, parents: Any) -> tuple[pa.Array, pa.Array]:
    """Connected components of the graph whose nodes are ``stored`` and the edges'
    ends: (the nodes sorted, the smallest id of each one's component).

    Ids become integer codes (their rank in sorted order, by Arrow: one hash pass
    to encode them, one sort of the distinct ones), so the union-find runs on
    small ints; uniting by the smaller root keeps every root the smallest code of
    its component, which is then its label. Sorting is by UTF-8 bytes, which is
    code point order. (scipy's connected_components was tried: it is no faster
    here once its import, and numpy's, is paid by every command that folds.)
    """
    parts = [
        v.combine_chunks() if isinstance(v, pa.ChunkedArray) else v
        for v in (stored, children, parents)
    ]
    size = sum(p.nbytes for p in parts)
    kind = pa.large_string() if size >= 2**31 - 1 else pa.string()
    parts = [p if p.type == kind else _pc().cast(p, kind) for p in parts]
    encoded = _pc().dictionary_encode(pa.concat_arrays(parts))
    order = _pc().sort_indices(encoded.dictionary)
    nodes = encoded.dictionary.take(order)
    n_stored, n_edges = len(parts[0]), len(parts[1])
    if n_edges == 0:
        return nodes, nodes
    # rank[code] = the code's position in sorted order (the inverse permutation)
    codes = _pc().sort_indices(order).take(encoded.indices)
    parent = list(range(len(nodes)))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = x = parent[parent[x]]  # path halving
        return x

    ci = codes.slice(n_stored, n_edges).to_pylist()
    pi = codes.slice(n_stored + n_edges).to_pylist()
    for c, p in zip(ci, pi, strict=True):
        rc, rp = find(c), find(p)
        if rc < rp:
            parent[rp] = rc
        elif rp < rc:
            parent[rc] = rp
    roots = [find(i) for i in range(len(nodes))]
    return nodes, nodes.take(pa.array(roots, pa.int64()))


# -- locations ---------------------------------------------------------------

_LOC_KEY = (
    "concat_ws(chr(31), source, folder, coalesce(CAST(uidvalidity AS VARCHAR), ''),"
    " coalesce(CAST(uid AS VARCHAR), ''), coalesce(uidl, ''))"
)


def location_key(
    source: str | None,
    folder: str | None,
    uidvalidity: int | None,
    uid: int | None,
    uidl: str | None,
) -> str:
    """``locations.loc_key`` of a place, exactly as ``_LOC_KEY`` spells it in SQL
    (``concat_ws`` skips a NULL source or folder); a test holds the two together."""
    parts = [p for p in (source, folder) if p is not None]
    parts += [
        "" if uidvalidity is None else str(uidvalidity),
        "" if uid is None else str(uid),
        uidl or "",
    ]
    return "\x1f".join(parts)


# The locations already in the table (``_old``) merged with the batch's sightings
# (``seen``, one row per location and content); without old rows, ``seen`` as is.
_MERGE_OLD_LOCATIONS = """
    WITH merged AS (
        SELECT loc_key, sha256, source, folder, uidvalidity, uid, uidl, message_id,
               first_seq, last_seq, seen_at, vanished_seq FROM _old
        UNION ALL SELECT * FROM seen
    )
    SELECT loc_key, sha256,
           arg_min(source, first_seq) AS source, arg_min(folder, first_seq) AS folder,
           arg_min(uidvalidity, first_seq) AS uidvalidity,
           arg_min(uid, first_seq) AS uid, arg_min(uidl, first_seq) AS uidl,
           arg_min(message_id, first_seq) AS message_id,
           min(first_seq) AS first_seq, max(last_seq) AS last_seq,
           arg_min(seen_at, first_seq) AS seen_at, max(vanished_seq) AS vanished_seq
    FROM merged GROUP BY loc_key, sha256
"""


def _fold_locations(con: duckdb.DuckDBPyConnection, *, bulk: bool = False) -> None:
    """Fold the batch's sightings and vanishings into ``locations``.

    ``bulk``: the table is empty (a rebuild): nothing to merge with. Otherwise the
    rows of the batch's locations are probed through the index on ``loc_key``,
    removed, and written back merged with the batch.
    """
    # (a rebuild's _loc is a view: its events are read where they are used, where
    # a copy of 1,000,000 was written and read back; 7 s -> 3.7 s of CPU)
    con.execute(
        f"CREATE OR REPLACE TEMP {'VIEW' if bulk else 'TABLE'} _loc AS SELECT {_LOC_KEY}"
        " AS loc_key, seq, type, recorded_at, source, folder, uidvalidity, uid, uidl,"
        f" message_id, sha256 FROM _batch WHERE type IN ('{_SEEN}', '{_VANISHED}')"
    )
    old = 0
    if not bulk:
        keys = sorted(_ids(con, "SELECT DISTINCT loc_key FROM _loc"))
        _register_table(con, "_old", _probed(con, "locations", "loc_key", keys))
        old = con.execute("SELECT count(*) FROM _old").fetchall()[0][0]
        if old:
            _delete_where_in(con, "locations", "loc_key", keys, "SELECT loc_key FROM _old")
    con.execute(
        """
        INSERT INTO locations
        WITH span AS (
            SELECT loc_key, sha256, min(seq) AS first_seq, max(seq) AS last_seq
            FROM _loc WHERE type = 'message-seen' GROUP BY loc_key, sha256
        ), seen AS (
            -- the first sighting's columns: the row at first_seq (seq is unique), read
            -- by a join rather than an arg_min per column (a replay's 1,000,000
            -- locations: 13 s -> see the note in the commit)
            SELECT s.loc_key, s.sha256, l.source, l.folder, l.uidvalidity, l.uid, l.uidl,
                   l.message_id, s.first_seq, s.last_seq, l.recorded_at AS seen_at,
                   CAST(NULL AS BIGINT) AS vanished_seq
            FROM span s JOIN _loc l ON l.seq = s.first_seq
        ), folded AS ({folded}), van AS (
            -- A vanish applies to the content seen at the location before it, never to
            -- content first seen there later in the same batch: otherwise a replay (one
            -- big batch) and incremental applies (vanish and later sighting in separate
            -- batches) would disagree on vanished_seq.
            SELECT f.loc_key, f.sha256, max(l.seq) AS vseq
            FROM folded f JOIN _loc l ON l.loc_key = f.loc_key AND l.seq > f.first_seq
            WHERE l.type = 'location-vanished' GROUP BY f.loc_key, f.sha256
        )
        SELECT f.loc_key, f.source, f.folder, f.uidvalidity, f.uid, f.uidl, f.sha256,
               f.message_id, f.first_seq, f.last_seq, f.seen_at,
               CASE WHEN v.vseq IS NULL THEN f.vanished_seq
                    WHEN f.vanished_seq IS NULL THEN v.vseq
                    ELSE greatest(f.vanished_seq, v.vseq) END AS vanished_seq,
               coalesce(
                   CASE WHEN v.vseq IS NULL THEN f.vanished_seq
                        WHEN f.vanished_seq IS NULL THEN v.vseq
                        ELSE greatest(f.vanished_seq, v.vseq) END > f.last_seq,
                   false) AS vanished
        FROM folded f LEFT JOIN van v USING (loc_key, sha256)
        """.format(folded=_MERGE_OLD_LOCATIONS if old else "SELECT * FROM seen")
    )
    con.execute(f"DROP {'VIEW' if bulk else 'TABLE'} _loc")
    if not bulk:
        con.execute("DROP TABLE _old")


# -- sync cursors -----------------------------------------------------------


def _fold_cursors(con: duckdb.DuckDBPyConnection) -> None:
    rows = (
        con.sql(
            "SELECT seq, type, recorded_at, source, folder, uidvalidity, cursor_to, uidnext,"
            f" mode, new_uidvalidity FROM _batch WHERE type IN ('{_MOVED}', '{_UIDV}') ORDER BY seq"
        )
        .to_arrow_table()
        .to_pylist()
    )
    state: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows:
        key = (r["source"], r["folder"])
        if r["type"] == _MOVED:
            state[key] = {
                "uidvalidity": r["uidvalidity"], "last_uid": r["cursor_to"],
                "uidnext": r["uidnext"], "mode": r["mode"],
                "seq": r["seq"], "updated_at": r["recorded_at"],
            }  # fmt: skip
        else:
            # UIDs of the old UIDVALIDITY mean nothing now: no last_uid until a rescan.
            state[key] = {
                "uidvalidity": r["new_uidvalidity"], "last_uid": None, "uidnext": None,
                "mode": r["mode"], "seq": r["seq"], "updated_at": r["recorded_at"],
            }  # fmt: skip
    for (account, folder), s in state.items():
        con.execute("DELETE FROM cursors WHERE account = ? AND folder = ?", [account, folder])
        con.execute(
            "INSERT INTO cursors VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [account, folder, s["uidvalidity"], s["last_uid"], s["uidnext"], s["mode"],
             s["seq"], s["updated_at"]],
        )  # fmt: skip

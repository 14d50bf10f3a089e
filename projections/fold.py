"""The projections as one fold: ``apply(con, batch)`` folds committed events into tables.

The same code runs for an incremental update after a commit and for a full
replay (one call per chunk of the log on empty tables), so the two give the
same tables row for row. A batch is applied in one transaction together with
the last seq it contains; events at or below that seq are skipped, so applying
a batch twice changes nothing. No clock, network or file other than the
DuckDB connection given is touched here.

The fold runs as SQL over the batch registered in DuckDB (the wide columns,
such as the addresses and references, never pass through Python); Python computes only
what the normalization rules of ``projections.normalize`` define (subject and
date keys) and the connected components of the thread graph.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from projections.normalize import normalize_subject
from projections.tables import PROJECTION_VERSION, create_indexes, create_tables
from stores.errors import LogIntegrityError
from stores.events import SCHEMA

# What a fold reads of the log: everything but the decoded headers (they stay in
# the log; ``MessageStore.get`` reads them from there).
FOLD_SCHEMA = pa.schema([field for field in SCHEMA if field.name != "headers"])

__all__ = [
    "BULK_ROWS",
    "FOLD_SCHEMA",
    "ID_SEP",
    "KEY_SEP",
    "applied_seq",
    "apply",
    "apply_chunks",
    "index_key",
    "projection_version",
    "rebuild",
]

KEY_SEP = "\x1f"
# Between the Message-IDs of a ``header_keys`` row: no stored id holds whitespace
# (``normalize_msgid`` removes it, synthetic ids encode it).
ID_SEP = " "

_SEEN = "message-seen"
_DELETED = "message-deleted"
_VANISHED = "location-vanished"
_MOVED = "cursor-moved"
_UIDV = "uidvalidity-changed"


def index_key(header: str, value: str) -> str:
    """The ``header_keys.key`` of a normalized (header, value) pair."""
    return f"{header}{KEY_SEP}{value}"


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


def _set_meta(con: duckdb.DuckDBPyConnection, key: str, value: int) -> None:
    con.execute("DELETE FROM meta WHERE key = ?", [key])
    con.execute("INSERT INTO meta VALUES (?, ?)", [key, value])


# A log of at most this many events is rebuilt by ``_build`` from a copy held in
# memory (about 700 bytes an event without the headers); a longer one is folded
# in chunks by ``apply_chunks``, which stages them in DuckDB and spills to disk:
# the same tables, slower.
BULK_ROWS = 400_000

_STAGE = "_replay_stage"


def rebuild(
    con: duckdb.DuckDBPyConnection,
    chunks: Iterable[pa.Table],
    *,
    files: Sequence[Path] = (),
    bulk_rows: int = BULK_ROWS,
) -> int:
    """Drop every projection and fold the whole log again; returns the last seq.

    ``chunks`` are the log's events in seq order. ``files``, when given, are the
    log's Parquet files holding those same events: DuckDB then reads them itself,
    faster than the chunks can be handed over. Should that read fail (a damaged
    file, a file a compaction just replaced), ``chunks`` are read instead, and
    their reader says precisely what is wrong.
    """
    for name, kind in con.execute(
        "SELECT table_name, table_type FROM information_schema.tables"
        " WHERE table_schema = 'main' AND table_catalog = current_database()"
    ).fetchall():
        con.execute(f'DROP {"VIEW" if kind == "VIEW" else "TABLE"} IF EXISTS "{name}"')
    create_tables(con)
    _set_meta(con, "applied_seq", 0)
    rest: Iterable[pa.Table] = chunks
    # The builders are the parallelism: DuckDB's own worker threads on top of
    # them were measured to cost more than they gave (2 cores: 10-20% slower).
    # Every rule names its order (seq, arg_min, list_sort): rows need not keep
    # the order they were inserted in, which DuckDB otherwise pays for (2 cores,
    # 100,000 events, 6 replays each: 1.83 s -> 1.72 s median).
    threads, ordered = con.execute(
        "SELECT current_setting('threads'), current_setting('preserve_insertion_order')"
    ).fetchall()[0]
    con.execute("SET threads = 1")
    con.execute("SET preserve_insertion_order = false")
    con.execute(f"ATTACH ':memory:' AS {_STAGE}")
    try:
        last = _stage_files(con, files, bulk_rows) if files else None
        if last is None:
            last, rest = _stage_chunks(con, chunks, bulk_rows)
        if last:
            _build(con)
    finally:
        con.execute(f"DETACH {_STAGE}")
        con.execute(f"SET threads = {int(threads)}")
        con.execute(f"SET preserve_insertion_order = {bool(ordered)}")
    if last is None:  # too long to hold: fold it in chunks
        last = apply_chunks(con, rest)
    else:
        _set_meta(con, "applied_seq", last)
    create_indexes(con)  # (those ``_build`` did not make already)
    # last: a rebuild killed before this point is redone at the next open
    _set_meta(con, "projection_version", PROJECTION_VERSION)
    return last


def _stage_table(con: duckdb.DuckDBPyConnection, name: str = "_batch") -> None:
    """The empty ``_STAGE.<name>``, in the column types the Arrow schema gives."""
    con.register("_empty", FOLD_SCHEMA.empty_table())
    con.execute(f"CREATE TABLE {_STAGE}.{name} AS SELECT * FROM _empty")
    con.unregister("_empty")


# Cursors that read the log files at once (measured on 100 files of 1,000 events:
# 0.23 s with one, 0.15 s with two; one cursor with two DuckDB threads: 0.34 s).
_STAGE_READERS = 2


def _stage_files(
    con: duckdb.DuckDBPyConnection, files: Sequence[Path], bulk_rows: int
) -> int | None:
    """Copy the events of the log ``files`` into ``_STAGE._batch``; returns the last
    seq, or None when they could not be read or are more than ``bulk_rows``.

    Each reader copies a run of consecutive files into a table of its own;
    ``_batch`` is the view of all those tables (no rule relies on row order).
    """
    n, k = len(files), max(1, min(_STAGE_READERS, len(files)))
    runs = [[str(f) for f in files[i * n // k : (i + 1) * n // k]] for i in range(k)]
    parts = [f"{_STAGE}._batch_{i}" for i in range(k)]
    for i in range(k):
        _stage_table(con, f"_batch_{i}")
    cols = ", ".join(f'"{name}"' for name in FOLD_SCHEMA.names)

    def read(i: int) -> None:
        c = con.cursor()
        try:
            c.execute(
                f"INSERT INTO {parts[i]} SELECT {cols} FROM read_parquet(?, union_by_name = true)",
                [runs[i]],
            )
        finally:
            c.close()

    con.execute(
        f"CREATE VIEW {_STAGE}._batch AS "
        + " UNION ALL ".join(f"SELECT * FROM {part}" for part in parts)
    )
    try:
        with ThreadPoolExecutor(max_workers=k, thread_name_prefix="stage") as pool:
            for done in [pool.submit(read, i) for i in range(k)]:
                done.result()
        n, first, last, distinct = con.execute(
            f"SELECT count(*), min(seq), max(seq), count(DISTINCT seq) FROM {_STAGE}._batch"
        ).fetchall()[0]
    except duckdb.Error:
        readable = False
    else:
        readable = n == distinct == (last or 0) and first in (1, None)
    if not readable or n > bulk_rows:
        con.execute(f"DROP VIEW {_STAGE}._batch")
        for part in parts:
            con.execute(f"DROP TABLE {part}")
        return None
    return int(last or 0)


def _stage_chunks(
    con: duckdb.DuckDBPyConnection, chunks: Iterable[pa.Table], bulk_rows: int
) -> tuple[int | None, Iterable[pa.Table]]:
    """Copy the events of ``chunks`` into ``_STAGE._batch``: (the last seq, ()); or,
    when there are more than ``bulk_rows``, (None, all of the chunks, unstaged)."""
    held: list[pa.Table] = []
    rows = 0
    rest = iter(chunks)
    for chunk in rest:
        held.append(chunk)
        rows += chunk.num_rows
        if rows > bulk_rows:
            return None, itertools.chain(held, rest)
    parts = [c.select(FOLD_SCHEMA.names).cast(FOLD_SCHEMA) for c in _new_events(held, 0)]
    last = parts[-1].column("seq")[-1].as_py() if parts else 0
    _stage_table(con)
    if parts:
        con.register("_events", pa.concat_tables(parts))
        con.execute(f"INSERT INTO {_STAGE}._batch SELECT * FROM _events")
        con.unregister("_events")
    return last, ()


# Builders running at once: one more than the cores. More only take turns on the
# cores, each slower (2 cores, 100,000 events, 6 replays each in fresh processes:
# 1.81 s median with 2, 1.83 with 3, 2.00 with 4, 2.06 with 8).
_BUILDERS = (os.cpu_count() or 1) + 1


def _build(con: duckdb.DuckDBPyConnection) -> None:
    """Fold the events staged in ``_STAGE._batch`` (the whole log) into empty tables.

    The same rules and the same SQL as an incremental fold of everything in one
    batch (on empty tables nothing is removed or merged), but the tables are
    built by builders at once on their own cursors: messages, header keys, the
    thread edges, the thread components, and locations with cursors. DuckDB runs
    a statement without holding the GIL, and reads its own tables (unlike a
    registered Arrow table) without taking it. A builder writes only its own tables and creates
    their indexes once they are full. Each statement commits by itself: a
    rebuild killed midway leaves no ``projection_version``, so the next open
    rebuilds again.
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
        c.execute(_DECIDE)  # on empty tables nothing existed: every winner is new
        c.execute(
            f"CREATE TABLE {_STAGE}._win AS SELECT win AS seq FROM _decide WHERE win IS NOT NULL"
        )

    def derive(c: duckdb.DuckDBPyConnection) -> None:
        """The columns the normalization rules define, of every message-seen event
        (the winners are among them: this need not wait for the decision)."""
        rows = c.sql(
            f"SELECT seq, subject, date_utc FROM {_STAGE}._batch WHERE type = '{_SEEN}'"
        ).to_arrow_table()
        c.register("_derived_rows", _derived(rows))
        c.execute(f"CREATE TABLE {_STAGE}._derived AS SELECT * FROM _derived_rows")
        c.unregister("_derived_rows")

    # the new message rows as the incremental fold has them (its _derived holds
    # the winners' rows only)
    new_rows = f"{_NEW_ROWS} JOIN _win USING (seq)"

    def edges(c: duckdb.DuckDBPyConnection) -> None:
        views(c, 'SELECT message_id, in_reply_to, "references" FROM _batch JOIN _win USING (seq)')
        c.execute(f"CREATE TABLE {_STAGE}._edges AS {_EDGES}")

    def edge_rows(c: duckdb.DuckDBPyConnection) -> None:
        c.execute(f"INSERT INTO thread_edges SELECT * FROM {_STAGE}._edges")

    def threads(c: duckdb.DuckDBPyConnection) -> None:
        views(c, "SELECT message_id FROM _batch JOIN _win USING (seq)")
        found = c.sql(f"SELECT child, parent FROM {_STAGE}._edges").to_arrow_table()
        stored = c.sql("SELECT message_id FROM _new").to_arrow_table()
        nodes, labels = _components(
            stored.column("message_id"), found.column("child"), found.column("parent")
        )
        c.register("_nodes", pa.table({"message_id": nodes, "thread_id": labels}))
        c.execute("INSERT INTO thread_nodes SELECT message_id, thread_id FROM _nodes")
        create_indexes(c, "thread_nodes")

    def places(c: duckdb.DuckDBPyConnection) -> None:
        views(c, staged="_batch")
        types = _ids(c, "SELECT DISTINCT type FROM _batch")
        if types & {_SEEN, _VANISHED}:
            _fold_locations(c)
        if types & {_MOVED, _UIDV}:
            _fold_cursors(c)

    def messages(c: duckdb.DuckDBPyConnection) -> None:
        views(c, new_rows, "_batch _derived _win")
        c.execute("INSERT INTO messages BY NAME SELECT * FROM _new")
        create_indexes(c, "messages")

    def header_keys(c: duckdb.DuckDBPyConnection) -> None:
        views(c, new_rows, "_batch _derived _win")
        c.execute(_NEW_KEYS.format(src=f"({_entries('_new')})"))
        create_indexes(c, "header_keys")

    catalog = con.execute("SELECT current_database()").fetchall()[0][0]

    def run(job: Callable[[duckdb.DuckDBPyConnection], None]) -> None:
        c = con.cursor()  # (a new cursor starts in the instance's default database)
        try:
            c.execute(f'USE "{catalog}"')
            job(c)
        finally:
            c.close()

    with ThreadPoolExecutor(max_workers=_BUILDERS, thread_name_prefix="replay") as pool:
        # locations and cursors need no decision; the derived columns not yet
        decided, derived = pool.submit(run, decide), pool.submit(run, derive)
        jobs = [pool.submit(run, places), decided, derived]
        decided.result()
        # the thread graph's edges first: both its table and the components need them
        staged_edges = pool.submit(run, edges)
        derived.result()
        # the longest builder first: it ends the rebuild when it starts last
        jobs += [staged_edges, pool.submit(run, header_keys), pool.submit(run, messages)]
        staged_edges.result()
        jobs += [pool.submit(run, threads), pool.submit(run, edge_rows)]
        for done in jobs:
            done.result()  # a builder's error is the rebuild's


def apply(con: duckdb.DuckDBPyConnection, batch: pa.Table) -> int:
    """Fold committed events (seq order) into the tables; returns the last applied seq."""
    return apply_chunks(con, [batch])


def apply_chunks(con: duckdb.DuckDBPyConnection, chunks: Iterable[pa.Table]) -> int:
    """Fold consecutive chunks of committed events as one batch, in one transaction.

    The chunks are staged into a DuckDB table first (which spills to disk under
    the memory limit, so a whole log can be one batch) and folded once: a fold
    costs mostly per call and per existing row it merges with, so one fold of
    everything pending is far cheaper than one per chunk. Events at or below the
    applied seq are skipped; a gap before the first new event is an error.
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
            chunk = chunk.filter(pc.greater(seqs, last))
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
    subjects = pc.cast(subjects, pa.string())
    uniq = pc.unique(subjects)
    keys = pa.array([normalize_subject(v) for v in uniq.to_pylist()], pa.string())
    return pc.take(keys, pc.index_in(subjects, value_set=uniq, skip_nulls=False))


def date_columns(dates: pa.ChunkedArray | pa.Array) -> tuple[Any, Any]:
    """(``date_key``, ISO 8601 UTC) of each timestamp, vectorized.

    Spells exactly what ``normalize.date_key`` does (UTC day, zero-padded
    ``YYYY-MM-DD``), so index keys and query keys meet; a test holds the two
    together.
    """
    dates = pc.cast(dates, pa.timestamp("us", tz="UTC"))

    def pad(values: Any, width: int) -> Any:
        return pc.utf8_lpad(pc.cast(values, pa.string()), width, "0")

    day = pc.binary_join_element_wise(
        pad(pc.year(dates), 4), pad(pc.month(dates), 2), pad(pc.day(dates), 2), "-"
    )
    clock = pc.binary_join_element_wise(
        pad(pc.hour(dates), 2), pad(pc.minute(dates), 2), pad(pc.second(dates), 2), ":"
    )
    iso = pc.binary_join_element_wise(day, pa.scalar("T"), clock, pa.scalar("Z"), "")
    return day, iso


def _ids(con: duckdb.DuckDBPyConnection, sql: str) -> set[str]:
    return {r[0] for r in con.execute(sql).fetchall()}


# -- primary store, header index, thread graph ------------------------------

# Which message-seen wins, per Message-ID in the batch: after the last delete of
# the batch, the first sighting; with no delete, the first sighting unless the
# id was already stored (first seen wins: later sightings add locations only).
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
       g.message_id IN (SELECT message_id FROM messages) AS existed
FROM g LEFT JOIN w USING (message_id)
"""

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
    (key, Message-ID) pairs (an address in both To and Cc counts once)."""
    pairs = " UNION ALL ".join(
        f"SELECT '{h}' AS header, {value} AS value, message_id FROM {src}"
        for h, value in _INDEXED.items()
    )
    return (
        f"SELECT header || '{KEY_SEP}' || value AS key, message_id FROM ({pairs})"
        " WHERE value IS NOT NULL"
    )


# A key's ``message_ids``: its entries' ids, sorted, in one string (the entries
# of one fold are distinct; those of a merge are made so).
_IDS = f"array_to_string(list_sort(list(message_id)), '{ID_SEP}')"

# The header_keys rows of keys that no row has yet, from the entries in {src}.
_NEW_KEYS = f"INSERT INTO header_keys SELECT key, {_IDS} FROM {{src}} GROUP BY key"

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
    con.execute(_DECIDE)
    con.execute(
        "CREATE OR REPLACE TEMP TABLE _removed AS SELECT d.message_id, m.seq"
        " FROM _decide d JOIN messages m USING (message_id)"
        " WHERE d.existed AND d.last_del IS NOT NULL"
    )
    con.execute(
        "CREATE OR REPLACE TEMP TABLE _win AS SELECT win AS seq FROM _decide"
        " WHERE win IS NOT NULL AND NOT (existed AND last_del IS NULL)"
    )
    removed = con.execute("SELECT count(*) FROM _removed").fetchall()[0][0]
    wins = con.execute("SELECT count(*) FROM _win").fetchall()[0][0]
    if not removed and not wins:
        return
    con.execute(
        "CREATE OR REPLACE TEMP TABLE _old_entries AS "
        + _entries("(SELECT * FROM messages WHERE message_id IN (SELECT message_id FROM _removed))")
    )
    if removed:
        con.execute("DELETE FROM messages WHERE message_id IN (SELECT message_id FROM _removed)")
        con.execute("DELETE FROM thread_edges WHERE child IN (SELECT message_id FROM _removed)")

    small = con.sql(
        "SELECT seq, subject, date_utc FROM _batch WHERE seq IN (SELECT seq FROM _win)"
    ).to_arrow_table()
    con.register("_derived", _derived(small))
    con.execute(f"CREATE OR REPLACE TEMP TABLE _new AS {_NEW_ROWS}")
    con.unregister("_derived")
    con.execute("INSERT INTO messages BY NAME SELECT * FROM _new")
    con.execute("CREATE OR REPLACE TEMP TABLE _new_entries AS " + _entries("_new"))
    _merge_header_keys(con)
    con.execute(_INSERT_EDGES)
    affected = (
        _ids(con, "SELECT message_id FROM _removed")
        | _ids(con, "SELECT message_id FROM _new")
        | _ids(
            con,
            "SELECT in_reply_to FROM _new WHERE in_reply_to IS NOT NULL"
            ' UNION SELECT unnest("references") FROM _new',
        )
    )
    _refresh_threads(con, affected)
    for name in ("_decide", "_removed", "_win", "_new", "_old_entries", "_new_entries"):
        con.execute(f"DROP TABLE {name}")


def _merge_header_keys(con: duckdb.DuckDBPyConnection) -> None:
    """Each touched key's ids: the old ones less the removed rows', plus the new.

    Keys not in the table yet (all of them in a replay) are inserted straight from
    the new entries; only keys already there are split and merged. A key left
    with no id loses its row.
    """
    con.execute(
        """
        CREATE OR REPLACE TEMP TABLE _existing_keys AS
        SELECT key FROM header_keys
        WHERE key IN (SELECT key FROM _old_entries UNION SELECT key FROM _new_entries)
        """
    )
    if con.execute("SELECT count(*) FROM _existing_keys").fetchall()[0][0]:
        con.execute(
            f"""
            CREATE OR REPLACE TEMP TABLE _merged AS
            WITH cur AS (
                SELECT key, unnest(string_split(message_ids, '{ID_SEP}')) AS message_id
                FROM header_keys WHERE key IN (SELECT key FROM _existing_keys)
            ), entries AS (
                SELECT * FROM cur WHERE message_id NOT IN (SELECT message_id FROM _removed)
                UNION SELECT key, message_id FROM _new_entries
                WHERE key IN (SELECT key FROM _existing_keys)
            )
            SELECT key, {_IDS} AS message_ids FROM entries GROUP BY key
            """
        )
        con.execute("DELETE FROM header_keys WHERE key IN (SELECT key FROM _existing_keys)")
        con.execute("INSERT INTO header_keys SELECT * FROM _merged")
        con.execute("DROP TABLE _merged")
    con.execute(
        _NEW_KEYS.format(
            src="(SELECT * FROM _new_entries WHERE key NOT IN (SELECT key FROM _existing_keys))"
        )
    )
    con.execute("DROP TABLE _existing_keys")


# The thread_edges rows of the messages in ``_new``.
_EDGES = """
SELECT child, parent, min(kind) AS kind FROM (
    SELECT message_id AS child, in_reply_to AS parent, 'in-reply-to' AS kind FROM _new
    UNION ALL SELECT message_id, unnest("references"), 'references' FROM _new
) WHERE parent IS NOT NULL AND parent <> child
GROUP BY child, parent
"""
_INSERT_EDGES = "INSERT INTO thread_edges " + _EDGES


def _refresh_threads(con: duckdb.DuckDBPyConnection, affected: set[str]) -> None:
    """Recompute the connected components that ``affected`` nodes belong to.

    A component's thread_id is its smallest node id, so the labels depend only
    on the graph, never on the order in which it was built.
    """
    if not affected:
        return
    con.register("_affected", pa.table({"id": pa.array(sorted(affected), pa.string())}))
    con.execute(
        """
        CREATE OR REPLACE TEMP TABLE _cand AS
        SELECT id FROM _affected
        UNION SELECT message_id FROM thread_nodes WHERE thread_id IN (
            SELECT thread_id FROM thread_nodes WHERE message_id IN (SELECT id FROM _affected))
        """
    )
    con.unregister("_affected")
    con.execute("DELETE FROM thread_nodes WHERE message_id IN (SELECT id FROM _cand)")
    edges = con.sql(
        "SELECT child, parent FROM thread_edges WHERE child IN (SELECT id FROM _cand)"
        " UNION SELECT child, parent FROM thread_edges WHERE parent IN (SELECT id FROM _cand)"
    ).to_arrow_table()
    stored = con.sql(
        "SELECT message_id FROM messages WHERE message_id IN (SELECT id FROM _cand)"
    ).to_arrow_table()
    con.execute("DROP TABLE _cand")
    nodes, labels = _components(
        stored.column("message_id"), edges.column("child"), edges.column("parent")
    )
    con.register("_nodes", pa.table({"message_id": nodes, "thread_id": labels}))
    con.execute("INSERT INTO thread_nodes SELECT message_id, thread_id FROM _nodes")
    con.unregister("_nodes")


def _components(stored: Any, children: Any, parents: Any) -> tuple[pa.Array, pa.Array]:
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
    parts = [p if p.type == kind else pc.cast(p, kind) for p in parts]
    encoded = pc.dictionary_encode(pa.concat_arrays(parts))
    order = pc.sort_indices(encoded.dictionary)
    nodes = encoded.dictionary.take(order)
    n_stored, n_edges = len(parts[0]), len(parts[1])
    if n_edges == 0:
        return nodes, nodes
    # rank[code] = the code's position in sorted order (the inverse permutation)
    codes = pc.sort_indices(order).take(encoded.indices)
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


def _fold_locations(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE _loc AS SELECT {_LOC_KEY} AS loc_key, seq, type,"
        " recorded_at, source, folder, uidvalidity, uid, uidl, message_id, sha256 FROM _batch"
        f" WHERE type IN ('{_SEEN}', '{_VANISHED}')"
    )
    con.execute(
        "CREATE OR REPLACE TEMP TABLE _old AS SELECT * FROM locations"
        " WHERE loc_key IN (SELECT loc_key FROM _loc)"
    )
    con.execute("DELETE FROM locations WHERE loc_key IN (SELECT loc_key FROM _loc)")
    old = con.execute("SELECT count(*) FROM _old").fetchall()[0][0]
    con.execute(
        """
        INSERT INTO locations
        WITH seen AS (
            SELECT loc_key, sha256,
                   arg_min(source, seq) AS source, arg_min(folder, seq) AS folder,
                   arg_min(uidvalidity, seq) AS uidvalidity, arg_min(uid, seq) AS uid,
                   arg_min(uidl, seq) AS uidl, arg_min(message_id, seq) AS message_id,
                   min(seq) AS first_seq, max(seq) AS last_seq,
                   arg_min(recorded_at, seq) AS seen_at, CAST(NULL AS BIGINT) AS vanished_seq
            FROM _loc WHERE type = 'message-seen' GROUP BY loc_key, sha256
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
    con.execute("DROP TABLE _loc")
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

"""The ``messages`` projection: one row per stored Message-ID, the winning
sighting's columns with the keys the normalization rules derive from them. Its
fold also keeps the header index and the thread graph of the rows it writes and
removes."""

from __future__ import annotations

from typing import Any

import duckdb
import pyarrow as pa

from projections.fold.batch import DELETED, SEEN, pc
from projections.fold.headers import INSERT_ENTRIES, delete_entries, entries
from projections.fold.meta import add_meta, meta_value, set_meta
from projections.fold.probes import delete_where_in, probed, register_table, values_of
from projections.fold.threads import EDGES, refresh_threads
from projections.normalize import normalize_subject
from projections.tables import delta_of

__all__ = [
    "DECIDE",
    "DEFECT_COUNTS",
    "MESSAGE_EVENTS",
    "NEW_ROWS",
    "NONE_EXISTING",
    "count_defects",
    "date_columns",
    "derived_columns",
    "fold_messages",
    "kept_defect_counts",
    "subject_keys",
]

# The events this projection folds.
MESSAGE_EVENTS = frozenset({SEEN, DELETED})

# Which message-seen wins, per Message-ID in the batch: after the last delete of
# the batch, the first sighting; with no delete, the first sighting unless the
# id was already stored (first seen wins: later sightings add locations only).
# ``{existing}``: SQL selecting the batch's ids that the messages table holds.
DECIDE = f"""
CREATE OR REPLACE TEMP TABLE _decide AS
WITH ev AS (
    SELECT seq, type, message_id FROM _batch WHERE type IN ('{SEEN}', '{DELETED}')
), g AS (
    SELECT message_id, max(seq) FILTER (WHERE type = '{DELETED}') AS last_del
    FROM ev GROUP BY message_id
), w AS (
    SELECT ev.message_id, min(ev.seq) AS win FROM ev JOIN g USING (message_id)
    WHERE ev.type = '{SEEN}' AND ev.seq > coalesce(g.last_del, 0) GROUP BY ev.message_id
)
SELECT g.message_id, g.last_del, w.win,
       g.message_id IN ({{existing}}) AS existed
FROM g LEFT JOIN w USING (message_id)
"""


NONE_EXISTING = "SELECT NULL::VARCHAR WHERE false"

# The ``removals`` of the batch: each deletion that removed a stored message,
# with the winning seq it removed. The events of each deleted id fall into runs,
# each ended by one of its deletions; a run's first sighting (or, in the first
# run, the row already stored: ``{{existing}}``, SQL of its seq and id) was the
# stored message when its deletion came. Folding the events one at a time gives
# these rows, so any batching does, and so does a replay: one batch of all. (Run
# after ``DECIDE``: its ``last_del`` names the deleted ids, without another scan of
# the batch, which in a replay is the whole log.)
REMOVALS = f"""
INSERT INTO removals
SELECT seq, deleted_seq FROM (
    SELECT min(seq) FILTER (WHERE NOT is_del) AS seq, max(seq) FILTER (WHERE is_del) AS deleted_seq
    FROM (
        SELECT seq, is_del, message_id, coalesce(sum(is_del::INTEGER) OVER (
            PARTITION BY message_id ORDER BY seq
            ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS run
        FROM (
            SELECT seq, type = '{DELETED}' AS is_del, message_id FROM _batch
            WHERE type IN ('{SEEN}', '{DELETED}') AND message_id IN (
                SELECT message_id FROM _decide WHERE last_del IS NOT NULL)
            {{existing}}
        )
    )
    GROUP BY message_id, run
)
WHERE seq IS NOT NULL AND deleted_seq IS NOT NULL
"""

# The ``meta`` counts ``stats`` prints of the message rows, with what each counts:
# kept by the folds (the rows written less those removed), so that a fold's
# cost, and ``stats``, never scan the whole table for them.
DEFECT_COUNTS = {"malformed": "len(defects) > 0", "synthetic_ids": "synthetic_id"}


def _defect_counts(con: duckdb.DuckDBPyConnection, table: str) -> dict[str, int]:
    """``DEFECT_COUNTS`` of the rows of ``table``."""
    cols = ", ".join(f"count(*) FILTER (WHERE {where})" for where in DEFECT_COUNTS.values())
    row = con.execute(f"SELECT {cols} FROM {table}").fetchall()[0]
    return {key: int(n) for key, n in zip(DEFECT_COUNTS, row, strict=True)}


def kept_defect_counts(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """``DEFECT_COUNTS`` as the folds keep them in ``meta``."""
    return {key: meta_value(con, key) or 0 for key in DEFECT_COUNTS}


def count_defects(con: duckdb.DuckDBPyConnection) -> None:
    """``meta``'s ``DEFECT_COUNTS`` of the whole table (what folds then keep up)."""
    for key, n in _defect_counts(con, "messages").items():
        set_meta(con, key, n)


_MESSAGE_COLUMNS = (
    "message_id, seq, source, folder, uidvalidity, uid, uidl, size, sha256, subject,"
    ' date_utc, date_offset_min, from_addr, to_addrs, in_reply_to, "references", list_id,'
    " synthetic_id, defects"
)


# The new ``messages`` rows: the winning events of ``_batch``, with their ``_derived``.
NEW_ROWS = (
    f"SELECT {_MESSAGE_COLUMNS}, d.subject_key, d.date_key, d.date_iso,"
    " recorded_at AS indexed_at FROM _batch JOIN _derived d USING (seq)"
)


def subject_keys(subjects: pa.ChunkedArray | pa.Array) -> Any:
    """``normalize_subject`` of each value, computed once per distinct subject
    (replies share their thread's subject)."""
    subjects = pc().cast(subjects, pa.string())
    uniq = pc().unique(subjects)
    keys = pa.array([normalize_subject(v) for v in uniq.to_pylist()], pa.string())
    return pc().take(keys, pc().index_in(subjects, value_set=uniq, skip_nulls=False))


def date_columns(dates: pa.ChunkedArray | pa.Array) -> tuple[Any, Any]:
    """(``date_key``, ISO 8601 UTC) of each timestamp, vectorized.

    Spells exactly what ``normalize.date_key`` does (UTC day, zero-padded
    ``YYYY-MM-DD``), so index keys and query keys meet; a test holds the two
    together.
    """
    dates = pc().cast(dates, pa.timestamp("us", tz="UTC"))

    def pad(values: Any, width: int) -> Any:
        return pc().utf8_lpad(pc().cast(values, pa.string()), width, "0")

    day = pc().binary_join_element_wise(
        pad(pc().year(dates), 4), pad(pc().month(dates), 2), pad(pc().day(dates), 2), "-"
    )
    clock = pc().binary_join_element_wise(
        pad(pc().hour(dates), 2), pad(pc().minute(dates), 2), pad(pc().second(dates), 2), ":"
    )
    iso = pc().binary_join_element_wise(day, pa.scalar("T"), clock, pa.scalar("Z"), "")
    return day, iso


def derived_columns(rows: pa.Table) -> pa.Table:
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


def fold_messages(con: duckdb.DuckDBPyConnection, *, deletions: bool = True) -> None:
    """Fold the batch's sightings and deletions into ``messages``, with the header
    index entries and thread edges of the rows written and removed, the
    ``removals`` made, and the threads they touch recomputed (``DECIDE`` says
    which sighting wins). ``deletions``: whether the batch may hold any (False
    spares a batch of sightings the query of its removals)."""
    ids = sorted(
        values_of(
            con, f"SELECT DISTINCT message_id FROM _batch WHERE type IN ('{SEEN}', '{DELETED}')"
        )
    )
    # the stored rows of the batch's ids: probed, not scanned, for a small batch
    register_table(con, "_existing", probed(con, "messages", "message_id", ids))
    con.execute(DECIDE.format(existing="SELECT message_id FROM _existing"))
    if deletions:
        con.execute(
            REMOVALS.format(existing="UNION ALL SELECT seq, false, message_id FROM _existing")
        )
    con.execute(
        "CREATE OR REPLACE TEMP TABLE _removed AS SELECT e.* FROM _decide d"
        " JOIN _existing e USING (message_id) WHERE d.existed AND d.last_del IS NOT NULL"
    )
    con.execute(
        "CREATE OR REPLACE TEMP TABLE _win AS SELECT win AS seq FROM _decide"
        " WHERE win IS NOT NULL AND NOT (existed AND last_del IS NULL)"
    )
    removed = sorted(values_of(con, "SELECT message_id FROM _removed"))
    wins = con.execute("SELECT count(*) FROM _win").fetchall()[0][0]
    if not removed and not wins:
        for name in ("_decide", "_removed", "_win", "_existing"):
            con.execute(f"DROP TABLE {name}")
        return
    if removed:
        for key, n in _defect_counts(con, "_removed").items():
            add_meta(con, key, -n)
        gone = "SELECT message_id FROM _removed"
        delete_where_in(con, "messages", "message_id", removed, gone)
        # (no index on child: a delete reads the edges; a fetch never does)
        con.execute(f"DELETE FROM thread_edges WHERE child IN ({gone})")
        delete_entries(con)

    small = con.sql(
        "SELECT seq, subject, date_utc FROM _batch WHERE seq IN (SELECT seq FROM _win)"
    ).to_arrow_table()
    con.register("_derived", derived_columns(small))
    con.execute(f"CREATE OR REPLACE TEMP TABLE _new AS {NEW_ROWS}")
    con.unregister("_derived")
    con.execute(f"INSERT INTO {delta_of('messages')} BY NAME SELECT * FROM _new")
    for key, n in _defect_counts(con, "_new").items():
        add_meta(con, key, n)
    con.execute(INSERT_ENTRIES.format(table=delta_of("header_index"), src=f"({entries('_new')})"))
    con.execute("INSERT INTO thread_edges " + EDGES)
    affected = (
        set(removed)
        | values_of(con, "SELECT message_id FROM _new")
        | values_of(
            con,
            "SELECT in_reply_to FROM _new WHERE in_reply_to IS NOT NULL"
            ' UNION SELECT unnest("references") FROM _new',
        )
    )
    refresh_threads(
        con, affected, new=values_of(con, "SELECT message_id FROM _new"), removed=set(removed)
    )
    for name in ("_decide", "_removed", "_win", "_new", "_existing"):
        con.execute(f"DROP TABLE {name}")

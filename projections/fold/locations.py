"""The ``locations`` projection: where each content was seen (source, folder,
UIDVALIDITY, UID or UIDL), from which seq to which, and whether it vanished
from there since."""

from __future__ import annotations

import duckdb

from projections.fold.batch import FLAGS, SEEN, VANISHED
from projections.fold.probes import delete_where_in, probed, register_table, values_of
from projections.tables import base_of, delta_of

__all__ = ["LOCATION_EVENTS", "LOC_KEY", "fold_locations", "location_key"]

# The events this projection folds.
LOCATION_EVENTS = frozenset({SEEN, VANISHED, FLAGS})

LOC_KEY = (
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
    """``locations.loc_key`` of a place, exactly as ``LOC_KEY`` spells it in SQL
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
               first_seq, last_seq, seen_at, vanished_seq, flags, flags_seq FROM _old
        UNION ALL SELECT * FROM seen
    )
    SELECT loc_key, sha256,
           arg_min(source, first_seq) AS source, arg_min(folder, first_seq) AS folder,
           arg_min(uidvalidity, first_seq) AS uidvalidity,
           arg_min(uid, first_seq) AS uid, arg_min(uidl, first_seq) AS uidl,
           arg_min(message_id, first_seq) AS message_id,
           min(first_seq) AS first_seq, max(last_seq) AS last_seq,
           arg_min(seen_at, first_seq) AS seen_at, max(vanished_seq) AS vanished_seq,
           arg_max(flags, flags_seq) AS flags, max(flags_seq) AS flags_seq
    FROM merged GROUP BY loc_key, sha256
"""


def fold_locations(con: duckdb.DuckDBPyConnection, *, bulk: bool = False) -> None:
    """Fold the batch's sightings and vanishings into ``locations``.

    ``bulk``: the table is empty (a rebuild): nothing to merge with. Otherwise the
    rows of the batch's locations are probed through the index on ``loc_key``,
    removed, and written back merged with the batch.

    A location's flags are those of the last event that showed any there: a
    ``message-seen`` of that content with flags, or a ``flags-changed`` of its
    message after the content was first seen there (one with NULL flags, a
    source that shows none, changes nothing). ``flags_seq`` is that event's seq,
    so that one batch or many give the same row.
    """
    # (a rebuild's _loc is a view: its events are read where they are used, where
    # a copy of 1,000,000 was written and read back; 7 s -> 3.7 s of CPU)
    con.execute(
        f"CREATE OR REPLACE TEMP {'VIEW' if bulk else 'TABLE'} _loc AS SELECT {LOC_KEY}"
        " AS loc_key, seq, type, recorded_at, source, folder, uidvalidity, uid, uidl,"
        f" message_id, sha256, flags FROM _batch"
        f" WHERE type IN ('{SEEN}', '{VANISHED}', '{FLAGS}')"
    )
    old = 0
    if not bulk:
        keys = sorted(values_of(con, "SELECT DISTINCT loc_key FROM _loc"))
        register_table(con, "_old", probed(con, "locations", "loc_key", keys))
        old = con.execute("SELECT count(*) FROM _old").fetchall()[0][0]
        if old:
            delete_where_in(con, "locations", "loc_key", keys, "SELECT loc_key FROM _old")
    con.execute(
        """
        INSERT INTO {table}
        WITH span AS (
            SELECT loc_key, sha256, min(seq) AS first_seq, max(seq) AS last_seq
            FROM _loc WHERE type = 'message-seen' GROUP BY loc_key, sha256
        ), shown AS (
            SELECT loc_key, sha256, arg_max(flags, seq) AS flags, max(seq) AS flags_seq
            FROM _loc WHERE type = 'message-seen' AND flags IS NOT NULL
            GROUP BY loc_key, sha256
        ), seen AS (
            -- the first sighting's columns: the row at first_seq (seq is unique), read
            -- by a join rather than an arg_min per column (a replay's 1,000,000
            -- locations: 13 s -> see the note in the commit)
            SELECT s.loc_key, s.sha256, l.source, l.folder, l.uidvalidity, l.uid, l.uidl,
                   l.message_id, s.first_seq, s.last_seq, l.recorded_at AS seen_at,
                   CAST(NULL AS BIGINT) AS vanished_seq, sh.flags, sh.flags_seq
            FROM span s JOIN _loc l ON l.seq = s.first_seq
            LEFT JOIN shown sh ON sh.loc_key = s.loc_key AND sh.sha256 = s.sha256
        ), folded AS ({folded}), changed AS (
            -- flags shown for the message at the location after its content was
            -- first seen there (as a vanish, never for content first seen later)
            SELECT f.loc_key, f.sha256, arg_max(l.flags, l.seq) AS flags, max(l.seq) AS cseq
            FROM folded f JOIN _loc l ON l.loc_key = f.loc_key AND l.seq > f.first_seq
                 AND l.message_id = f.message_id
            WHERE l.type = '{flags_changed}' AND l.flags IS NOT NULL
            GROUP BY f.loc_key, f.sha256
        ), van AS (
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
                   false) AS vanished,
               CASE WHEN c.cseq > coalesce(f.flags_seq, 0) THEN c.flags ELSE f.flags END
                   AS flags,
               CASE WHEN c.cseq > coalesce(f.flags_seq, 0) THEN c.cseq ELSE f.flags_seq END
                   AS flags_seq
        FROM folded f LEFT JOIN van v USING (loc_key, sha256)
        LEFT JOIN changed c USING (loc_key, sha256)
        """.format(
            flags_changed=FLAGS,
            table=base_of("locations") if bulk else delta_of("locations"),
            folded=_MERGE_OLD_LOCATIONS if old else "SELECT * FROM seen",
        )
    )
    con.execute(f"DROP {'VIEW' if bulk else 'TABLE'} _loc")
    if not bulk:
        con.execute("DROP TABLE _old")

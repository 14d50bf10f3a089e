"""The order a full-text build is given the messages in: that of their keys, so
that FTS5 gets ascending rowids (each rowid below the last wrote its pending
terms out as a segment of its own)."""

from __future__ import annotations

import duckdb

from projections.queries.fulltext import BUCKET, doc_key, winners


def test_a_build_reads_the_messages_in_the_order_of_their_keys() -> None:
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE messages (seq BIGINT, message_id VARCHAR, sha256 VARCHAR,"
        " date_utc TIMESTAMPTZ)"
    )
    rows = [
        (1, "a", "x", "2024-01-01 00:00:00+00"),
        (2, "b", "x", None),
        (3, "c", "x", "1960-05-01 00:00:00.5+00"),
        (4, "d", "x", "2024-01-01 00:00:00+00"),
        (5, "e", "x", "2023-01-01 00:00:00.999+00"),
        (BUCKET + 1, "f", "x", "2024-01-01 00:00:00+00"),  # (the first key of seq 1)
        (6, "g", "x", "9999-12-31 00:00:00+00"),
        (7, "h", "x", None),
        (8, "i", "x", "0001-01-01 00:00:00+00"),
        (9, "j", "x", "2024-01-02 00:00:00+00"),  # (the week of seq 1, a later day)
        (10, "k", "x", "1969-12-31 23:59:59+00"),  # (weeks before 1970 are floored)
        (11, "l", "x", "1969-12-25 00:00:00+00"),
        (12, "m", "x", "1969-12-24 23:59:59+00"),
    ]
    con.executemany("INSERT INTO messages VALUES (?, ?, ?, ?)", rows)
    got = [(r["seq"], r["date"]) for r in winners(con).read_all().to_pylist()]
    assert len(got) == len(rows)
    assert got == sorted(got, key=lambda r: (doc_key(*r), r[0]))
    assert [seq for seq, _ in got][:2] == [2, 7]  # undated first, then by date

"""Building a batch's table and digesting it: the fast paths of an append.

``events_to_table`` must give exactly the table the obvious per-event loop gave, and
the digest (format v2, over Arrow buffers) must depend only on the logical rows while
files written with the first (JSON) digest keep verifying.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stores.events import (
    SCHEMA,
    SCHEMA_VERSION,
    CursorMoved,
    Event,
    LocationVanished,
    MessageDeleted,
    MessageSeen,
    UidvalidityChanged,
    events_from_table,
    events_to_table,
)
from stores.log import EventLog, legacy_table_digest, table_digest
from testkit.strategies import any_event

T0 = datetime(2026, 6, 26, 9, 30, 15, 123456, tzinfo=UTC)


def slow_events_to_table(events: Sequence[Event], first_seq: int | None = None) -> pa.Table:
    """The reference: ``events_to_table`` as it was, one dict per header, value by value."""
    n = len(events)
    columns: dict[str, list[Any]] = {name: [None] * n for name in SCHEMA.names}
    for i, ev in enumerate(events):
        for f in dataclasses.fields(ev):
            value = getattr(ev, f.name)
            if value is not None:
                if f.name == "headers":
                    value = [{"name": k, "value": v} for k, v in value]
                elif f.name in {"to_addrs", "references", "defects"}:
                    value = list(value)
            columns[f.name][i] = value
        columns["type"][i] = ev.type
        columns["schema_version"][i] = SCHEMA_VERSION
        if first_seq is not None:
            columns["seq"][i] = first_seq + i
    return pa.table(columns, schema=SCHEMA)


def seen(i: int, **kw: Any) -> MessageSeen:
    """A realistic message-seen event, numbered; ``kw`` overrides fields."""
    base: dict[str, Any] = {
        "run_id": "run-1",
        "recorded_at": T0 + timedelta(microseconds=i),
        "source": "imap:ann@example.org",
        "folder": "INBOX",
        "uidvalidity": 1700000000,
        "uid": 100 + i,
        "message_id": f"m{i}@example.org",
        "sha256": f"{i:064x}",
        "size": 4096 + i,
        "internal_date": T0 - timedelta(days=i),
        "headers": (
            ("From", f"Ann <ann{i}@example.org>"),
            ("To", "bob@example.org"),
            ("Subject", f"hello {i}"),
            ("Message-ID", f"<m{i}@example.org>"),
        ),
        "date_utc": T0 - timedelta(days=i, hours=1),
        "date_offset_min": 120,
        "from_addr": f"ann{i}@example.org",
        "to_addrs": ("bob@example.org", "cc@example.org"),
        "in_reply_to": f"m{i - 1}@example.org" if i else None,
        "references": (f"m{i - 1}@example.org",) if i else (),
        "list_id": "dev.lists.example.org" if i % 2 else None,
        "subject": f"hello {i}",
        "defects": (),
    }
    base.update(kw)
    return MessageSeen(**base)


def varied_events() -> list[Event]:
    """Every event type, NULLs, empty tuples and strings, unicode, odd timestamps."""
    plus2 = timezone(timedelta(hours=2))
    return [
        seen(0),
        seen(
            1,
            uidvalidity=None,
            uid=None,
            uidl="1700000000.M1P2.host,S=4097:2,S",
            internal_date=None,
            headers=(),
            date_utc=None,
            date_offset_min=None,
            from_addr=None,
            to_addrs=(),
            references=(),
            list_id=None,
            subject=None,
            synthetic_id=True,
            defects=("MissingHeaderBodySeparatorDefect", "InvalidBase64PaddingDefect"),
        ),
        seen(
            2,
            headers=(
                ("Subject", "Zażółć gęślą jaźń 😀 中文 e\u0301"),
                ("X-Empty", ""),
                ("", "no name"),
                ("X-Nul", "a\x00b"),
            ),
            subject="Zażółć gęślą jaźń 😀",
            from_addr="",
            to_addrs=("",),
            recorded_at=datetime(1900, 1, 1, tzinfo=UTC),
            internal_date=datetime(2100, 1, 1, 23, 59, 59, 999999, tzinfo=UTC),
            date_utc=datetime(2026, 6, 26, 11, 30, tzinfo=plus2),
            date_offset_min=-720,
            size=2**40,
        ),
        MessageDeleted(run_id="run-1", recorded_at=T0, message_id="m0@example.org", actor="ann"),
        MessageDeleted(
            run_id="rün-2", recorded_at=T0, message_id="m1@example.org", actor="", reason="spam"
        ),
        UidvalidityChanged(
            run_id="run-1",
            recorded_at=T0,
            source="imap:ann@example.org",
            folder="[Gmail]/Wszystkie",
            old_uidvalidity=None,
            new_uidvalidity=2**32 - 1,
            action="alarm+rescan",
        ),
        CursorMoved(
            run_id="run-1",
            recorded_at=T0,
            source="pop:ünï",
            folder="",
            uidvalidity=1,
            cursor_from=None,
            cursor_to=0,
            mode="delta",
            reason="sync",
            uidnext=None,
        ),
        LocationVanished(
            run_id="run-1",
            recorded_at=T0,
            source="imap:ann@example.org",
            folder="Archiv/2026",
            message_id="m2@example.org",
            uidl=None,
            reason="reconcile",
        ),
        seen(3, headers=(("Received", "x" * 5000),) * 3, defects=("",)),
    ]


def assert_same_table(new: pa.Table, old: pa.Table) -> None:
    new.validate(full=True)
    assert new.schema.equals(old.schema, check_metadata=True)
    assert new.equals(old)
    assert new.to_pylist() == old.to_pylist()


# -- events_to_table ------------------------------------------------------------------


@pytest.mark.parametrize("first_seq", [None, 1, 1000])
def test_events_to_table_gives_the_table_the_per_event_loop_gave(first_seq: int | None) -> None:
    events = varied_events()
    assert_same_table(events_to_table(events, first_seq), slow_events_to_table(events, first_seq))
    # one type at a time (the fast path of a single type) and every order of types
    for cls in {type(ev) for ev in events}:
        only = [ev for ev in events if type(ev) is cls]
        assert_same_table(events_to_table(only, first_seq), slow_events_to_table(only, first_seq))
    backwards = events[::-1]
    assert_same_table(
        events_to_table(backwards, first_seq), slow_events_to_table(backwards, first_seq)
    )


def test_events_to_table_keeps_committed_seq_without_first_seq_and_round_trips() -> None:
    events = [dataclasses.replace(ev, seq=i) for i, ev in enumerate(varied_events(), 7)]
    table = events_to_table(events)
    assert_same_table(table, slow_events_to_table(events))
    assert table.column("seq").to_pylist() == list(range(7, 7 + len(events)))
    assert events_from_table(table) == events
    assert_same_table(events_to_table([]), slow_events_to_table([]))
    assert events_to_table([]).num_rows == 0


def test_events_to_table_keeps_null_lists_as_null() -> None:
    """A NULL where a list belongs (never built by mailledger) stays NULL, not empty."""
    odd = [
        seen(0, headers=None, to_addrs=None),
        seen(1),
        seen(2, references=None, defects=None),
    ]
    assert_same_table(events_to_table(odd, 1), slow_events_to_table(odd, 1))
    assert events_to_table(odd, 1).column("headers").null_count == 1


@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(events=st.lists(any_event, max_size=8), first_seq=st.none() | st.integers(1, 2**40))
def test_any_events_make_the_same_table_as_the_per_event_loop(
    events: list[Event], first_seq: int | None
) -> None:
    assert_same_table(events_to_table(events, first_seq), slow_events_to_table(events, first_seq))


# -- the digest: what it depends on --------------------------------------------------


@pytest.fixture
def table() -> pa.Table:
    return events_to_table(varied_events() * 3, first_seq=1)


def _with_column(table: pa.Table, name: str, values: list[Any]) -> pa.Table:
    i = table.schema.get_field_index(name)
    return table.set_column(i, table.schema.field(i), pa.array(values, table.schema.field(i).type))


def _edit(table: pa.Table, name: str, row: int, change: Callable[[Any], Any]) -> pa.Table:
    values = table.column(name).to_pylist()
    values[row] = change(values[row])
    return _with_column(table, name, values)


def _other(value: Any, type_: pa.DataType) -> Any:
    """A different value of the same type (NULL becomes a non-NULL one, and the reverse
    for a value that can be NULL)."""
    if value is None:
        if pa.types.is_list(type_):
            return []
        if pa.types.is_string(type_):
            return ""
        if pa.types.is_timestamp(type_):
            return datetime(1970, 1, 1, tzinfo=UTC)
        if pa.types.is_boolean(type_):
            return False
        return 0
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, str):
        return value + "x"
    if isinstance(value, datetime):
        return value + timedelta(microseconds=1)
    if isinstance(value, list):
        if value:
            return None
        return [{"name": "x", "value": "x"} if pa.types.is_struct(type_.value_type) else "x"]
    raise AssertionError(f"no other value for {value!r}")


@pytest.mark.parametrize("name", SCHEMA.names)
def test_a_changed_value_in_any_column_changes_the_digest(table: pa.Table, name: str) -> None:
    digest = table_digest(table)
    type_ = SCHEMA.field(name).type
    for row in range(table.num_rows):
        changed = _edit(table, name, row, lambda v: _other(v, type_))
        assert table_digest(changed) != digest, (name, row)


@pytest.mark.parametrize(
    "name, row, change",
    [
        # inside the nested headers list: a value, a name, one character, the order
        ("headers", 0, lambda h: [*h[:-1], {**h[-1], "value": h[-1]["value"] + "!"}]),
        ("headers", 0, lambda h: [{**h[0], "name": "from"}, *h[1:]]),
        ("headers", 2, lambda h: [{**h[0], "value": h[0]["value"].replace("ż", "z")}, *h[1:]]),
        ("headers", 0, lambda h: h[::-1]),
        ("headers", 0, lambda h: [*h, {"name": "", "value": ""}]),
        ("headers", 0, lambda h: [*h, {"name": None, "value": None}]),
        ("headers", 1, lambda h: None),  # an empty list is not a NULL list
        ("uidl", 0, lambda v: ""),  # a NULL is not an empty string
        ("list_id", 0, lambda v: ""),
        ("from_addr", 2, lambda v: None),  # nor the reverse
        ("uid", 1, lambda v: 0),  # nor zero
        ("size", 0, lambda v: v + 1),
        ("date_offset_min", 2, lambda v: -v),
        ("recorded_at", 3, lambda v: v + timedelta(microseconds=1)),
        ("synthetic_id", 1, lambda v: not v),
        ("to_addrs", 0, lambda v: v[:1]),
        ("defects", 1, lambda v: [v[0] + v[1]]),  # same bytes, other boundaries
    ],
)
def test_a_change_anywhere_in_a_row_changes_the_digest(
    table: pa.Table, name: str, row: int, change: Callable[[Any], Any]
) -> None:
    assert table_digest(_edit(table, name, row, change)) != table_digest(table)


def test_bytes_moved_between_rows_or_rows_swapped_change_the_digest(table: pa.Table) -> None:
    digest = table_digest(table)
    subjects = table.column("subject").to_pylist()
    assert subjects[1] is None  # so the bytes of rows 0 and 2 are adjacent
    subjects[0], subjects[2] = "hello", " 0" + subjects[2]  # the same bytes, re-cut
    assert table_digest(_with_column(table, "subject", subjects)) != digest
    to = table.column("to_addrs").to_pylist()
    to[0], to[1] = to[0][:1], to[0][1:] + to[1]  # one address moves to the next row
    assert table_digest(_with_column(table, "to_addrs", to)) != digest
    swapped = pa.concat_tables([table.slice(1, 1), table.slice(0, 1), table.slice(2)])
    assert table_digest(swapped) != digest
    assert table_digest(table.slice(0, table.num_rows - 1)) != digest


def test_the_digest_is_the_same_however_the_rows_are_chunked_or_sliced(table: pa.Table) -> None:
    digest = table_digest(table)
    assert digest.startswith("v2:") and len(digest) == 67
    rechunked = pa.concat_tables([table.slice(0, 1), table.slice(1, 7), table.slice(8)])
    assert rechunked.column("headers").num_chunks == 3
    assert table_digest(rechunked) == digest
    assert table_digest(rechunked.combine_chunks()) == digest
    # a slice (offset into every buffer) digests like the same rows built on their own
    events = varied_events() * 3
    for start, stop in [(1, 5), (4, 20), (9, 27), (0, 0)]:
        piece = table.slice(start, stop - start)
        alone = events_to_table(events[start:stop], first_seq=start + 1)
        assert table_digest(piece) == table_digest(alone), (start, stop)
    # the column order of the table does not matter, the schema's does
    shuffled = table.select(sorted(table.column_names))
    assert table_digest(shuffled) == digest


def test_the_digest_ignores_bitmaps_and_bytes_no_value_owns() -> None:
    """An all-valid validity bitmap, or bytes left under a NULL string, change nothing."""
    plain = pa.array(["ab", None, "c"], pa.string())
    offsets = pa.array([0, 2, 5, 6], pa.int32()).buffers()[1]
    data = pa.py_buffer(b"abXYZc")  # "XYZ" under the NULL
    odd = pa.Array.from_buffers(pa.string(), 3, [plain.buffers()[0], offsets, data])
    assert odd.to_pylist() == plain.to_pylist()
    ints = pa.array([5, 6, 7], pa.int64())
    all_valid = pa.py_buffer(b"\x07")
    with_bitmap = pa.Array.from_buffers(pa.int64(), 3, [all_valid, ints.buffers()[1]])
    assert with_bitmap.buffers()[0] is not None and ints.buffers()[0] is None

    def one(subject: pa.Array, size: pa.Array) -> pa.Table:
        t = events_to_table([seen(0), seen(1), seen(2)], first_seq=1)
        t = t.set_column(t.schema.get_field_index("subject"), SCHEMA.field("subject"), subject)
        return t.set_column(t.schema.get_field_index("size"), SCHEMA.field("size"), size)

    assert table_digest(one(odd, with_bitmap)) == table_digest(one(plain, ints))


def test_the_digest_survives_parquet_round_trips_and_other_writers(
    table: pa.Table, tmp_path: Path
) -> None:
    digest = table_digest(table)
    path = tmp_path / "t.parquet"
    for options in [{}, {"row_group_size": 4, "use_dictionary": False}, {"compression": "zstd"}]:
        pq.write_table(table, path, **options)
        assert table_digest(pq.read_table(path)) == digest, options
        assert table_digest(pq.ParquetFile(path).read()) == digest, options
    # other types for the same values (another writer's choice) digest alike
    wide = table.cast(
        pa.schema(
            [f.with_type(pa.large_string()) if pa.types.is_string(f.type) else f for f in SCHEMA]
        )
    )
    assert table_digest(wide) == digest
    # DuckDB wrote it and read it back (its timestamps say Etc/UTC)
    con = duckdb.connect()
    con.register("t", table)
    out = tmp_path / "duck.parquet"
    con.execute(f"COPY (SELECT * FROM t) TO '{out}' (FORMAT parquet, ROW_GROUP_SIZE 5)")
    assert table_digest(pq.read_table(out)) == digest
    assert table_digest(con.sql(f"SELECT * FROM read_parquet('{out}')").to_arrow_table()) == digest


def test_a_column_the_table_lacks_is_not_part_of_the_digest(table: pa.Table) -> None:
    """A file written before a column was added keeps its digest."""
    older = table.drop_columns(["mode"])
    assert table_digest(older) != table_digest(table)
    assert table_digest(older) == table_digest(older.select(older.column_names[::-1]))


# -- files: the new digest and the old one --------------------------------------------


def _write_like_the_first_format(log: EventLog, events: Sequence[Event]) -> Path:
    """Append ``events`` as a file the code before digest v2 wrote: the JSON digest of
    the batch's table in the same metadata key."""
    log.append(events)
    f = log.files()[-1]
    table = pq.read_table(f.path)
    meta = dict(table.schema.metadata or {})
    assert meta[b"mailledger.digest"].startswith(b"v2:")
    batch = events_to_table(list(events), first_seq=f.first)
    meta[b"mailledger.digest"] = legacy_table_digest(batch).encode()
    pq.write_table(table.replace_schema_metadata(meta), f.path, compression="zstd")
    return f.path


@pytest.fixture
def log(tmp_path: Path) -> EventLog:
    return EventLog(tmp_path / "log", durable=False)


def test_a_new_file_carries_a_v2_digest_and_verifies(log: EventLog) -> None:
    table = log.append(varied_events())
    meta = pq.read_schema(log.files()[0].path).metadata
    assert meta[b"mailledger.digest"] == table_digest(table).encode()
    assert meta[b"mailledger.digest"].startswith(b"v2:")
    assert log.verify() == []
    (log.root / ".checked.json").unlink()
    log.check()  # checked in full at open


def test_a_file_with_the_first_digest_format_still_verifies(log: EventLog) -> None:
    old = _write_like_the_first_format(log, varied_events())
    _write_like_the_first_format(log, [seen(i) for i in range(10, 20)])
    log.append([seen(30)])
    assert len(pq.read_schema(old).metadata[b"mailledger.digest"]) == 64
    assert log.verify() == []
    (log.root / ".checked.json").unlink(missing_ok=True)
    log.check()
    assert [ev.seq for ev in events_from_table(log.read())] == list(
        range(1, len(varied_events()) + 12)
    )


def test_a_changed_row_in_a_file_of_either_format_is_named(log: EventLog) -> None:
    old = _write_like_the_first_format(log, varied_events())
    log.append([seen(i) for i in range(10, 20)])
    new = log.files()[-1].path
    for path in (old, new):
        table = pq.read_table(path)
        headers = table.column("headers").to_pylist()
        headers[0][0]["value"] += "!"
        i = table.schema.get_field_index("headers")
        changed = table.set_column(
            i, table.schema.field(i), pa.array(headers, SCHEMA.field(i).type)
        )
        pq.write_table(changed, path)  # keeps the metadata, so the digest of the old rows
    problems = log.verify()
    assert len(problems) == 2
    for path in (old, new):
        assert any(path.name in p and "digest" in p for p in problems), problems


def test_compaction_of_first_format_files_writes_a_v2_digest(log: EventLog) -> None:
    _write_like_the_first_format(log, varied_events())
    _write_like_the_first_format(log, [seen(i) for i in range(10, 20)])
    log.append([seen(30)])
    before = events_from_table(log.read())
    assert log.compact() == (3, 1)
    (merged,) = log.files()
    meta = pq.read_schema(merged.path).metadata
    assert meta[b"mailledger.digest"].startswith(b"v2:")
    assert log.verify() == []
    assert events_from_table(log.read()) == before


def test_a_digest_in_neither_format_is_refused(log: EventLog) -> None:
    log.append([seen(0)])
    f = log.files()[0]
    table = pq.read_table(f.path)
    for bogus in (b"v2:" + b"0" * 64, b"0" * 64, b"v3:abc", b""):
        meta = {**(table.schema.metadata or {}), b"mailledger.digest": bogus}
        pq.write_table(table.replace_schema_metadata(meta), f.path)
        problem = log.check_file(f)
        assert problem is not None and "digest" in problem, bogus

"""The Parquet event log: round trip, plain Parquet, crash safety, compaction, verify, lock."""

from __future__ import annotations

import dataclasses
import itertools
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stores.errors import LockTimeout, LogIntegrityError
from stores.events import (
    SCHEMA,
    Event,
    MessageDeleted,
    events_from_table,
)
from stores.log import EventLog, tiers
from testkit.strategies import any_event

T0 = datetime(2026, 6, 26, 9, 30, 15, 123456, tzinfo=UTC)


def deleted(i: int, run: str = "run-1") -> MessageDeleted:
    """A small event, numbered so a test can tell events apart."""
    return MessageDeleted(
        run_id=run,
        recorded_at=T0 + timedelta(microseconds=i),
        message_id=f"m{i}@example.org",
        actor="test",
        reason=f"event {i}",
    )


def fill(log: EventLog, batches: Sequence[int]) -> list[Event]:
    """Append batches of the given sizes; returns every event appended, in order."""
    out: list[Event] = []
    for size in batches:
        batch = [deleted(len(out) + i) for i in range(size)]
        log.append(batch)
        log.settle()  # (its merge made before the next commit: the counts are exact)
        out.extend(batch)
    return out


def committed(events: Sequence[Event]) -> list[Event]:
    """``events`` as the log gives them back: seq 1..N assigned in order."""
    return [dataclasses.replace(ev, seq=i) for i, ev in enumerate(events, 1)]


def seqs(log: EventLog, after: int = 0) -> list[int]:
    return log.read(after, columns=["seq"]).column("seq").to_pylist()


def files_on_disk(log: EventLog) -> list[str]:
    return sorted(p.name for p in log.root.iterdir() if p.name.endswith(".parquet"))


def place_merged_file(log: EventLog, rows: int) -> None:
    """Put beside the small files of ``log`` the merged file of its first ``rows``
    seqs, as a compaction writes it before it removes them (what a crash then
    leaves): compacted in a copy of the log, and the merged file copied back."""
    copy = EventLog(log.root.with_name(log.root.name + "-copy"))
    shutil.copytree(log.root, copy.root)
    copy.compact(target_rows=rows)
    merged = copy.files()[0]
    assert (merged.first, merged.last) == (1, rows)
    shutil.copy2(merged.path, log.root / merged.name)


@pytest.fixture
def log(tmp_path: Path) -> EventLog:
    return EventLog(tmp_path / "log")


@pytest.fixture
def unmerged(tmp_path: Path) -> EventLog:
    """A log whose appends keep every commit's file (for ``compact`` to merge)."""
    return EventLog(tmp_path / "log", merge_small=False)


# -- round trip ---------------------------------------------------------------------


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(batches=st.lists(st.lists(any_event, min_size=1, max_size=6), max_size=5), data=st.data())
def test_any_events_round_trip_with_contiguous_seq_across_appends(
    batches: list[list[Event]], data: st.DataObject
) -> None:
    with tempfile.TemporaryDirectory() as d:
        log = EventLog(Path(d) / "log", durable=False)  # fsync does not change what is read
        sent: list[Event] = []
        for batch in batches:
            table = log.append(batch)
            assert table.column("seq").to_pylist() == list(
                range(len(sent) + 1, len(sent) + len(batch) + 1)
            )
            sent.extend(batch)
        want = committed(sent)
        assert events_from_table(log.read()) == want
        assert log.last_seq() == len(sent)
        assert seqs(log) == list(range(1, len(sent) + 1))
        k = data.draw(st.integers(0, len(sent) + 1), label="after")
        assert events_from_table(log.read(after=k)) == want[k:]
        assert seqs(log, after=k) == list(range(k + 1, len(sent) + 1))


def test_events_read_back_from_the_log_are_never_appended_again(log: EventLog) -> None:
    log.append([deleted(1)])
    with pytest.raises(ValueError, match="already committed"):
        log.append(events_from_table(log.read()))
    assert log.append([]).num_rows == 0
    assert log.last_seq() == 1


def test_read_after_with_chosen_columns_only(log: EventLog) -> None:
    fill(log, [3, 3, 3])
    for k in range(0, 10):
        t = log.read(after=k, columns=["message_id"])
        assert t.column_names == ["message_id"]
        assert t.column("message_id").to_pylist() == [f"m{i}@example.org" for i in range(k, 9)]
        t = log.read(after=k, columns=["type", "seq"])
        assert t.column("seq").to_pylist() == list(range(k + 1, 10))


def test_an_empty_log_reads_as_no_events(log: EventLog) -> None:
    assert log.read().num_rows == 0
    assert log.read().schema.names == SCHEMA.names
    assert events_from_table(log.read()) == []
    assert log.last_seq() == 0
    assert log.verify() == []


# -- plain Parquet --------------------------------------------------------------------


def test_every_log_file_is_plain_parquet_for_duckdb_and_pyarrow(log: EventLog) -> None:
    events = fill(log, [4, 1, 7])
    glob = str(log.root / "*.parquet")
    rows = duckdb.sql(
        f"select count(*), min(seq), max(seq), count(distinct seq) from read_parquet('{glob}')"
    ).fetchall()
    assert rows == [(12, 1, 12, 12)]
    ids = duckdb.sql(f"select message_id from read_parquet('{glob}') order by seq").fetchall()
    assert [r[0] for r in ids] == [ev.message_id for ev in events]  # type: ignore[attr-defined]
    got: list[int] = []
    for name in files_on_disk(log):
        t = pq.read_table(log.root / name)
        assert t.schema.field("recorded_at").type == pa.timestamp("us", tz="UTC")
        got += t.column("seq").to_pylist()
    assert got == list(range(1, 13))
    assert pads.dataset(log.root, format="parquet").count_rows() == 12
    # and the file names tell the seq range each holds
    assert files_on_disk(log) == [
        "00000000000000000001-00000000000000000004.parquet",
        "00000000000000000005-00000000000000000005.parquet",
        "00000000000000000006-00000000000000000012.parquet",
    ]


# -- crashed writers ------------------------------------------------------------------

_CRASH_IN_WRITE = textwrap.dedent(
    """
    import os, sys
    from datetime import UTC, datetime
    from pathlib import Path
    from stores.events import MessageDeleted
    from stores.log import EventLog
    os.link = lambda *a, **k: os._exit(9)  # die after the fsync, before the link names it
    ev = MessageDeleted(run_id="r", recorded_at=datetime.now(UTC), message_id="lost@x", actor="a")
    EventLog(Path(sys.argv[1])).append([ev, ev])
    """
)


def test_a_crashed_writers_temporary_file_is_invisible_and_removed_by_the_next_append(
    log: EventLog,
) -> None:
    fill(log, [2])
    proc = subprocess.run([sys.executable, "-c", _CRASH_IN_WRITE, str(log.root)], check=False)
    assert proc.returncode == 9
    leftovers = [p for p in log.root.iterdir() if p.name.startswith(".tmp-")]
    assert len(leftovers) == 1, "the crashed writer left no temporary file"
    # a second one, cut off halfway through its write
    half = log.root / ".tmp-3-4-999999"
    half.write_bytes(leftovers[0].read_bytes()[:300])

    assert seqs(log) == [1, 2]
    assert log.last_seq() == 2
    assert log.verify() == []
    glob = str(log.root / "*.parquet")  # the glob the docs give for other engines
    assert duckdb.sql(f"select count(*) from read_parquet('{glob}')").fetchall() == [(2,)]
    assert pads.dataset(log.root, format="parquet").count_rows() == 2

    log.append([deleted(2)])
    assert not [p for p in log.root.iterdir() if p.name.startswith(".tmp")]
    assert seqs(log) == [1, 2, 3]
    assert [ev.message_id for ev in events_from_table(log.read())][-1] == "m2@example.org"  # type: ignore[attr-defined]


# -- compaction -----------------------------------------------------------------------


def test_compaction_merges_small_files_keeping_every_event_and_seq(unmerged: EventLog) -> None:
    log = unmerged
    events = fill(log, [1, 2, 3] * 20)
    before = log.read()
    assert log.compact() == (60, 1)
    assert files_on_disk(log) == ["00000000000000000001-00000000000000000120.parquet"]
    assert log.read().equals(before)
    assert events_from_table(log.read()) == committed(events)
    assert log.verify() == []
    glob = str(log.root / "*.parquet")
    assert duckdb.sql(f"select count(*) from read_parquet('{glob}')").fetchall() == [(120,)]
    log.append([deleted(120)])
    assert seqs(log) == list(range(1, 122))
    assert log.compact() == (2, 1)
    assert log.compact() == (1, 1)  # nothing left to merge


def test_compaction_respects_the_target_size_and_leaves_big_files_alone(log: EventLog) -> None:
    fill(log, [10] * 5 + [50] + [10] * 3)
    before = log.read()
    assert log.compact(target_rows=20) == (9, 6)
    ranges = [(1, 20), (21, 40), (41, 50), (51, 100), (101, 120), (121, 130)]
    assert files_on_disk(log) == [f"{a:020d}-{b:020d}.parquet" for a, b in ranges]
    assert log.read().equals(before)
    assert log.verify() == []


def test_readers_never_see_a_duplicate_or_a_gap_while_compaction_and_appends_run(
    tmp_path: Path,
) -> None:
    log = EventLog(tmp_path / "log", durable=False)  # fsync does not change visibility
    fill(log, [1, 2] * 100)  # 200 small files
    stop = threading.Event()
    problems: list[str] = []
    reads: list[tuple[float, float, int]] = []

    def reader() -> None:
        prev = 0
        while not stop.is_set():
            start = time.monotonic()
            try:
                got = seqs(log)
            except Exception as exc:  # any error is a failure of the test
                problems.append(repr(exc))
                continue
            reads.append((start, time.monotonic(), len(got)))
            if got != list(range(1, len(got) + 1)):
                problems.append(f"not 1..N contiguous: {len(got)} rows, {len(set(got))} distinct")
            if len(got) < prev:
                problems.append(f"went back from {prev} to {len(got)} events")
            prev = len(got)

    def writer() -> None:
        i = 1000
        while not stop.is_set():
            log.append([deleted(i), deleted(i + 1)])
            i += 2
            time.sleep(0.002)

    threads = [threading.Thread(target=reader) for _ in range(2)]
    threads.append(threading.Thread(target=writer))
    for t in threads:
        t.start()
    compacting: list[tuple[float, float]] = []
    try:
        for target in (25, 1000, 100_000):  # many groups, then regrouping merged files
            start = time.monotonic()
            log.compact(target_rows=target)
            compacting.append((start, time.monotonic()))
    finally:
        time.sleep(0.05)
        stop.set()
        for t in threads:
            t.join()
    assert problems == []
    during = [r for r in reads if any(a <= r[0] and r[1] <= b for a, b in compacting)]
    assert len(during) >= 5, f"only {len(during)} reads ran wholly inside a compaction"
    total = log.last_seq()
    assert seqs(log) == list(range(1, total + 1))
    assert total > 300  # the writer kept committing meanwhile
    assert log.verify() == []


def test_a_compaction_that_crashed_before_removing_small_files_is_harmless(
    unmerged: EventLog,
) -> None:
    log = unmerged
    events = fill(log, [3] * 10)
    # the crash: the merged file of seq 1..24 is in place, the small ones still there
    place_merged_file(log, 24)
    assert len(files_on_disk(log)) == 11
    assert events_from_table(log.read()) == committed(events)
    assert [f.path.name[:41] for f in log.files()] == [
        f"{1:020d}-{24:020d}",
        f"{25:020d}-{27:020d}",
        f"{28:020d}-{30:020d}",
    ]
    assert log.verify() == []
    assert log.compact() == (3, 1)
    assert files_on_disk(log) == [f"{1:020d}-{30:020d}.parquet"]
    assert events_from_table(log.read()) == committed(events)


def test_a_crashed_compaction_that_removed_some_small_files_reads_each_event_once(
    log: EventLog,
) -> None:
    events = fill(log, [2] * 8)
    small = files_on_disk(log)
    place_merged_file(log, 16)
    for name in small[:3]:  # it got this far deleting the small ones
        (log.root / name).unlink()
    assert events_from_table(log.read()) == committed(events)
    glob = str(log.root / "*.parquet")
    log.append([deleted(16)])  # the next commit clears what the crash left behind
    assert files_on_disk(log) == [f"{1:020d}-{16:020d}.parquet", f"{17:020d}-{17:020d}.parquet"]
    counts = duckdb.sql(f"select count(distinct seq), count(*) from read_parquet('{glob}')")
    assert counts.fetchall() == [(17, 17)]  # no event twice for another engine either


def test_compaction_refuses_to_merge_a_file_that_was_altered(log: EventLog) -> None:
    fill(log, [2] * 5)
    victim = log.files()[2].path
    _rewrite_with_pyarrow(victim, lambda t: _set_column(t, "actor", ["mallory"] * t.num_rows))
    with pytest.raises(LogIntegrityError, match=victim.name):
        log.compact()
    assert victim.exists()
    assert any(victim.name in p for p in log.verify())  # still named, not hidden by a merge


# -- the merge each append makes -----------------------------------------------------


def test_appends_merge_small_files_so_the_file_count_follows_the_events_not_the_commits(
    tmp_path: Path,
) -> None:
    log = EventLog(tmp_path / "log", durable=False)
    events = fill(log, [1] * 250)
    counts = [len(log.files())]
    events += fill(log, [1, 2, 3, 30, 1] * 30)  # sizes mixed: a run takes any small ones
    counts.append(len(log.files()))
    assert max(counts) <= 4 * (tiers.FANOUT - 1) + 1, counts  # a commit a file: 250, 400
    assert files_on_disk(log) == [f.name for f in log.files()]  # no merged file left behind
    assert events_from_table(log.read()) == committed(events)
    assert log.verify() == []


def test_import_sized_commits_end_as_files_of_ten_thousand_events(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "log", durable=False)
    fill(log, [1_000] * 25)
    # 20 commits made two files of 10,000; the last five wait for five more
    assert [f.rows for f in log.files()] == [10_000, 10_000] + [1_000] * 5
    assert seqs(log) == list(range(1, 25_001))
    assert log.verify() == []


def test_a_merge_that_cannot_read_a_file_leaves_the_append_and_every_file_as_they_were(
    log: EventLog, caplog: pytest.LogCaptureFixture
) -> None:
    fill(log, [2] * 9)
    victim = log.files()[4].path
    _rewrite_with_pyarrow(victim, lambda t: _set_column(t, "actor", ["mallory"] * t.num_rows))
    before = files_on_disk(log)
    log = EventLog(log.root)  # (another process: not one that wrote these rows itself)
    log.append([deleted(18)])  # the tenth small file: its run would be merged now
    log.settle()
    assert seqs(log) == list(range(1, 20))
    assert files_on_disk(log) == [*before, f"{19:020d}-{19:020d}.parquet"]
    assert victim.name in caplog.text and "not merged" in caplog.text
    assert any(victim.name in p for p in log.verify())  # named, not hidden by a merge


def test_a_merge_takes_the_rows_a_rewrite_put_in_place_not_those_first_written(
    log: EventLog,
) -> None:
    fill(log, [2] * 9)
    f = log.files()[3]
    with log.lock():  # (as a purge does)
        new = _set_column(log.read_checked(f), "actor", ["purge"] * 2)
        log.rewrite(f, new)
    log.append([deleted(18)])  # merged now, from rows this process still holds
    log.settle()
    assert len(log.files()) == 1
    assert log.read(columns=["actor"]).column("actor").to_pylist()[6:8] == ["purge"] * 2
    assert log.verify() == []


# -- verify ---------------------------------------------------------------------------


def _set_column(table: pa.Table, name: str, values: list[object]) -> pa.Table:
    i = table.schema.get_field_index(name)
    return table.set_column(i, table.schema.field(i), pa.array(values, table.schema.field(i).type))


def _rewrite_with_pyarrow(path: Path, change: Callable[[pa.Table], pa.Table]) -> None:
    """Edit a log file the way someone with pyarrow would: read, change rows, write back.

    ``read_table`` keeps the schema's key-value metadata and ``write_table`` writes it
    again, so the file keeps mailledger's digest of the *old* rows.
    """
    table = pq.read_table(path)
    assert table.schema.metadata and b"mailledger.digest" in table.schema.metadata
    new = change(table)
    pq.write_table(new, path)


def _problems_naming(log: EventLog, path: Path) -> list[str]:
    problems = log.verify()
    assert problems, "verify found nothing"
    assert any(path.name in p for p in problems), problems
    return problems


def test_verify_finds_nothing_wrong_with_a_good_log(log: EventLog) -> None:
    fill(log, [3, 1, 4, 1, 5])
    assert log.verify() == []
    log.compact()
    assert log.verify() == []


def test_verify_names_a_file_whose_rows_were_changed_and_rewritten(log: EventLog) -> None:
    fill(log, [3, 3, 3])
    victim = log.files()[1].path
    _rewrite_with_pyarrow(victim, lambda t: _set_column(t, "reason", ["edited"] * t.num_rows))
    problems = _problems_naming(log, victim)
    assert any("digest" in p for p in problems)
    # a change to one timestamp by one microsecond is found as well
    victim = log.files()[2].path
    _rewrite_with_pyarrow(
        victim,
        lambda t: _set_column(
            t,
            "recorded_at",
            [v + timedelta(microseconds=1) for v in t.column("recorded_at").to_pylist()],
        ),
    )
    _problems_naming(log, victim)


def test_verify_names_a_file_that_lost_a_row(log: EventLog) -> None:
    fill(log, [3, 3, 3])
    victim = log.files()[1].path
    _rewrite_with_pyarrow(victim, lambda t: t.slice(0, 2))
    _problems_naming(log, victim)


def test_verify_names_a_truncated_file(log: EventLog) -> None:
    fill(log, [3, 3, 3])
    victim = log.files()[1].path
    data = victim.read_bytes()
    victim.write_bytes(data[: len(data) // 2])
    _problems_naming(log, victim)
    with pytest.raises(LogIntegrityError, match=victim.name):
        log.read()


@pytest.mark.parametrize("where", [0.1, 0.5, 0.9])
def test_verify_names_a_file_whose_bytes_were_overwritten(log: EventLog, where: float) -> None:
    fill(log, [30, 30, 30])
    victim = log.files()[1].path
    data = bytearray(victim.read_bytes())
    start = int(len(data) * where)
    data[start : start + 64] = b"\xa5" * 64
    victim.write_bytes(bytes(data))
    _problems_naming(log, victim)


def test_verify_names_the_gap_a_deleted_file_leaves(log: EventLog) -> None:
    fill(log, [3, 3, 3, 3])
    log.files()[1].path.unlink()
    after_gap = log.files  # files() itself refuses the gap
    with pytest.raises(LogIntegrityError, match="gap"):
        after_gap()
    problems = log.verify()
    assert len(problems) == 1
    assert "gap" in problems[0] and "seq 4" in problems[0]
    assert f"{7:020d}-{9:020d}.parquet" in problems[0]
    with pytest.raises(LogIntegrityError, match="gap"):
        log.read()


def test_verify_names_a_file_with_a_wrong_seq_column(log: EventLog) -> None:
    fill(log, [3, 3, 3])
    victim = log.files()[1].path
    _rewrite_with_pyarrow(
        victim, lambda t: _set_column(t, "seq", [10, 11, 12])
    )  # the rows of another range
    problems = _problems_naming(log, victim)
    assert any("seq column" in p for p in problems)


def test_verify_names_a_file_without_a_digest(log: EventLog) -> None:
    fill(log, [3, 3])
    victim = log.files()[0].path
    table = pq.read_table(victim).replace_schema_metadata(None)
    pq.write_table(table, victim)
    problems = _problems_naming(log, victim)
    assert any("no mailledger digest" in p for p in problems)


def test_verify_names_a_file_whose_name_and_rows_disagree(log: EventLog) -> None:
    fill(log, [3, 3])
    victim = log.files()[1].path
    victim.rename(log.root / f"{4:020d}-{7:020d}.parquet")  # claims 4 rows, holds 3
    _problems_naming(log, log.root / f"{4:020d}-{7:020d}.parquet")


# -- the writer lock ------------------------------------------------------------------

_APPENDER = textwrap.dedent(
    """
    import random, sys, time
    from datetime import UTC, datetime
    from pathlib import Path
    from stores.events import MessageDeleted
    from stores.log import EventLog
    root, who, batches = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    start_at = float(sys.argv[4])
    log = EventLog(root)
    time.sleep(max(0.0, start_at - time.time()))  # both start together
    for b in range(batches):
        time.sleep(random.random() * 0.02)  # work between commits, as a fetcher does
        log.append([
            MessageDeleted(run_id=who, recorded_at=datetime.now(UTC),
                           message_id=f"{who}-{b}-{i}@x", actor=who, reason=str(b))
            for i in range(3)
        ])
    """
)


def test_two_processes_appending_at_once_get_one_contiguous_seq_and_lose_no_batch(
    log: EventLog,
) -> None:
    log.create()
    start_at = time.time() + 1.0
    procs = [
        subprocess.Popen([sys.executable, "-c", _APPENDER, str(log.root), who, "40", str(start_at)])
        for who in ("alpha", "beta")
    ]
    for p in procs:
        assert p.wait(timeout=60) == 0
    table = log.read()
    assert table.column("seq").to_pylist() == list(range(1, 241))
    rows = table.select(["seq", "run_id", "reason", "message_id"]).to_pylist()
    by_batch: dict[tuple[str, str], list[int]] = {}
    for r in rows:
        by_batch.setdefault((r["run_id"], r["reason"]), []).append(r["seq"])
    assert len(by_batch) == 80  # no batch lost
    for key, got in by_batch.items():
        assert len(got) == 3 and got == list(range(got[0], got[0] + 3)), key  # one piece
    assert len({r["message_id"] for r in rows}) == 240
    runs = [r["run_id"] for r in rows]
    switches = sum(1 for a, b in itertools.pairwise(runs) if a != b)
    assert switches >= 3, "the two writers never interleaved: the test did not test the lock"
    assert log.verify() == []


_HOLDER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from stores.log import EventLog
    with EventLog(Path(sys.argv[1])).lock():
        print("locked", flush=True)
        sys.stdin.readline()
    """
)


def test_a_writer_waits_for_the_lock_and_times_out_when_it_stays_held(log: EventLog) -> None:
    log.create()
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(log.root)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdin is not None and holder.stdout is not None
    try:
        assert holder.stdout.readline().strip() == "locked"
        t0 = time.monotonic()
        with pytest.raises(LockTimeout), log.lock(timeout=0.3):
            pass
        assert time.monotonic() - t0 >= 0.3
        done = threading.Event()

        def append() -> None:
            log.append([deleted(0)])
            done.set()

        t = threading.Thread(target=append)
        t.start()
        time.sleep(0.2)
        assert not done.is_set()  # waits for the other process
        holder.stdin.write("\n")
        holder.stdin.flush()
        t.join(timeout=10)
        assert done.is_set()
        assert seqs(log) == [1]
    finally:
        holder.kill()
        holder.wait()


# -- listing ------------------------------------------------------------------------


def _count_listings(monkeypatch: pytest.MonkeyPatch, root: Path) -> list[str]:
    """A list that grows by one entry each time ``root`` is listed."""
    calls: list[str] = []
    listdir = os.listdir

    def counting(path: str | os.PathLike[str] = ".") -> list[str]:
        if os.fspath(path) == os.fspath(root):
            calls.append(os.fspath(path))
        return listdir(path)

    monkeypatch.setattr(os, "listdir", counting)
    return calls


def _settle(root: Path) -> None:
    """Stamp the directory as last changed a minute ago (as a log is between runs)."""
    old = time.time() - 60
    os.utime(root, (old, old))


def test_a_settled_log_directory_is_listed_once_however_often_it_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = EventLog(tmp_path / "log")
    fill(log, [2, 3, 1])
    _settle(log.root)
    calls = _count_listings(monkeypatch, log.root)
    for _ in range(5):
        assert log.last_seq() == 6
        assert [f.rows for f in log.files()] == [2, 3, 1]
        assert seqs(log, after=4) == [5, 6]
    assert len(calls) == 1


def test_a_kept_listing_still_sees_what_another_writer_adds_or_merges(tmp_path: Path) -> None:
    reader, writer = EventLog(tmp_path / "log"), EventLog(tmp_path / "log")
    fill(writer, [2, 3])
    _settle(reader.root)
    assert reader.last_seq() == 5
    writer.append([deleted(5)])
    assert reader.last_seq() == 6
    _settle(reader.root)
    assert len(reader.files()) == 3
    writer.compact()
    assert [(f.first, f.last) for f in reader.files()] == [(1, 6)]
    assert seqs(reader) == list(range(1, 7))


def test_a_log_directory_changed_just_now_is_listed_again_at_every_read(
    log: EventLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a change within the same tick of the filesystem's clock could leave the
    # directory's times as they were: a fresh listing is never kept
    fill(log, [1, 1])
    calls = _count_listings(monkeypatch, log.root)
    assert log.last_seq() == 2
    assert log.last_seq() == 2
    assert len(calls) == 2


def test_an_append_lists_the_log_directory_once(
    log: EventLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under the writer lock nothing else changes the directory: one listing serves
    the whole append (its clean-ups, its seq, its note of the file checked). An
    import appends 1,000 times at 1,000,000 messages, into 1,000 files."""
    fill(log, [1, 1])  # changed just now: nothing kept, every read lists
    calls = _count_listings(monkeypatch, log.root)
    log.append([deleted(3)])
    assert len(calls) == 1
    assert seqs(log) == [1, 2, 3]
    assert log.verify() == []


def test_an_append_still_removes_what_a_crashed_compaction_left(log: EventLog) -> None:
    fill(log, [2, 1])
    first = log.files()
    log.compact()
    wide = log.files()
    # the narrow files back beside the merged one, as a compaction killed before
    # removing them leaves them
    for f in first:
        log.rewrite(f, log.read(after=f.first - 1).slice(0, f.rows))
    names = {f.name for f in first} | {f.name for f in wide}
    assert {p.name for p in log.root.glob("*.parquet")} == names
    log.append([deleted(4)])
    assert {p.name for p in log.root.glob("*.parquet")} == {f.name for f in log.files()}
    assert seqs(log) == [1, 2, 3, 4]


def test_a_fresh_listing_is_asked_of_the_directory_even_when_it_is_settled(
    log: EventLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``fresh``: a check that must not trust the directory's stat (NFS's attribute
    cache may show it unchanged) lists it again, and sees what was added."""
    fill(log, [2])
    _settle(log.root)
    calls = _count_listings(monkeypatch, log.root)
    assert log.last_seq() == log.last_seq() == 2
    assert len(calls) == 1
    assert log.last_seq(fresh=True) == 2
    assert len(calls) == 2
    fill(EventLog(log.root), [1])
    assert log.last_seq(fresh=True) == 3


# -- permissions ----------------------------------------------------------------------


def test_log_files_are_private(tmp_path: Path) -> None:
    old = os.umask(0)  # the modes must come from the code, not from a umask
    try:
        log = EventLog(tmp_path / "store" / "log")
        fill(log, [2, 2, 2])
        log.compact()
        log.append([deleted(6)])
    finally:
        os.umask(old)
    assert stat.S_IMODE(log.root.stat().st_mode) == 0o700
    names = sorted(p.name for p in log.root.iterdir())
    # .lock, .merge-lock (the small-file merges'), the two log files, and
    # .checked.json (the open-time check's cache)
    assert {".lock", ".merge-lock", ".checked.json"} <= set(names) and len(names) == 5
    for p in log.root.iterdir():
        assert stat.S_IMODE(p.stat().st_mode) == 0o600, p


# -- file metadata --------------------------------------------------------------------


def test_file_metadata_tells_its_seq_range_schema_version_and_digest(log: EventLog) -> None:
    fill(log, [5])
    meta = pq.read_schema(log.files()[0].path).metadata
    assert meta is not None
    assert meta[b"mailledger.first_seq"] == b"1" and meta[b"mailledger.last_seq"] == b"5"
    assert meta[b"mailledger.schema_version"] == b"1"
    digest = meta[b"mailledger.digest"]  # format v2: "v2:" and a sha256 in hex
    assert digest.startswith(b"v2:") and len(digest) == 67
    assert pc.all(pc.equal(log.read().column("type"), "message-deleted")).as_py()


def test_a_log_file_is_written_in_row_groups_so_one_event_is_read_without_the_rest(
    tmp_path: Path,
) -> None:
    """``read_at`` (a message's headers for ``show``) decodes the row groups that
    hold the events asked for: a file is written in row groups of
    ``ROW_GROUP_ROWS`` events, whatever its size."""
    from stores.log.files import ROW_GROUP_ROWS

    log = EventLog(tmp_path / "log", durable=False, merge_small=False)
    fill(log, [ROW_GROUP_ROWS * 2 + 500])
    (f,) = log.files()
    meta = pq.ParquetFile(f.path).metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [
        ROW_GROUP_ROWS,
        ROW_GROUP_ROWS,
        500,
    ]
    got = log.read_at([ROW_GROUP_ROWS + 7], ["message_id"])
    assert got.to_pylist() == [
        {"seq": ROW_GROUP_ROWS + 7, "message_id": f"m{ROW_GROUP_ROWS + 6}@example.org"}
    ]
    assert log.verify() == []


def test_kept_row_groups_answer_again_without_the_file_and_a_rewritten_file_is_read_anew(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``keep_groups`` (a web child under load): the second read of an event's row
    group opens no file; a compaction that rewrites the log is read from its new
    files, the events the same; ``drop_groups`` lets go of what was kept."""
    from stores.log import reading
    from stores.log.files import ROW_GROUP_ROWS

    log = EventLog(tmp_path / "log", durable=False, merge_small=False)
    fill(log, [ROW_GROUP_ROWS + 10, 20])
    seq = ROW_GROUP_ROWS + 3
    want = [{"seq": seq, "message_id": f"m{seq - 1}@example.org"}]
    opened: list[object] = []
    real = pq.ParquetFile

    def counting(*args: object, **kwargs: object) -> pq.ParquetFile:
        opened.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(pq, "ParquetFile", counting)
    reading.keep_groups(8 << 20)
    try:
        assert log.read_at([seq], ["message_id"]).to_pylist() == want
        assert len(opened) == 1
        assert log.read_at([seq], ["message_id"]).to_pylist() == want
        assert len(opened) == 1  # (the footer and the group kept)
        assert log.compact() == (2, 1)
        assert log.read_at([seq, 2], ["message_id"]).to_pylist() == [
            {"seq": 2, "message_id": "m1@example.org"},
            *want,
        ]
        assert len(opened) == 2  # (the compacted file: another)
        reading.drop_groups()
        assert log.read_at([seq], ["message_id"]).to_pylist() == want
        assert len(opened) == 3
    finally:
        reading.keep_groups(0)

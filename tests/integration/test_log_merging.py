"""The small-file merges made outside the writer lock (``stores.log.merging``): a
commit never waits for one, and no merge loses, doubles or un-purges an event."""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from stores.log import EventLog, merging
from stores.log.files import LogFile
from tests.integration.test_event_log import deleted, fill, seqs


def _parquet(log: EventLog) -> list[str]:
    return sorted(p.name for p in log.root.iterdir() if p.name.endswith(".parquet"))


def _merge_stalled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[EventLog, threading.Event, threading.Event]:
    """A log of nine small files and a tenth, whose merge stalls once it has written
    its rows (``reached``), until ``go`` is set."""
    log = EventLog(tmp_path / "log", durable=False)
    fill(log, [5] * 9)
    reached, go = threading.Event(), threading.Event()
    write_temp = log.write_temp

    def stalled(*args: object, **kwargs: object) -> Path:
        path = write_temp(*args, **kwargs)  # type: ignore[arg-type]
        if kwargs.get("prefix") == merging.MERGING_PREFIX:
            reached.set()
            assert go.wait(30)
        return path

    monkeypatch.setattr(log, "write_temp", stalled)
    log.append([deleted(45 + i) for i in range(5)])  # the tenth small file: a merge
    return log, reached, go


def test_commits_go_on_while_a_merge_waits_to_put_its_file_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log, reached, go = _merge_stalled(tmp_path, monkeypatch)
    assert reached.wait(30)  # the merge has its rows written, not yet in place
    for i in range(5):  # and commits still go through, not waiting for it
        log.append([deleted(50 + i)])
    assert seqs(log) == list(range(1, 56))
    go.set()
    log.settle()
    assert [f.rows for f in log.files()] == [50, 1, 1, 1, 1, 1]
    assert _parquet(log) == [f.name for f in log.files()]
    assert not [p for p in log.root.iterdir() if p.name.startswith(merging.MERGING_PREFIX)]
    assert seqs(log) == list(range(1, 56)) and log.verify() == []


def test_a_merge_gives_up_when_a_purge_rewrote_a_file_of_its_run_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = EventLog(tmp_path / "log", durable=False)
    fill(log, [2] * 9)
    victim = log.files()[3]
    rows = merging.SmallFiles.rows

    def purged_between(self: merging.SmallFiles, run: list[LogFile], doing: str) -> pa.Table:
        out = rows(self, run, doing)  # the merge has read the rows as they were
        with log.lock():  # a purge, in another process, rewrites one of them
            table = log.read_checked(victim)
            i = table.schema.get_field_index("actor")
            purged = pa.array(["purge"] * 2, table.schema.field(i).type)
            log.rewrite(victim, table.set_column(i, table.schema.field(i), purged))
        return out

    monkeypatch.setattr(merging.SmallFiles, "rows", purged_between)
    log.append([deleted(18)])
    log.settle()
    monkeypatch.setattr(merging.SmallFiles, "rows", rows)
    actors = log.read(columns=["actor"]).column("actor").to_pylist()
    assert actors[6:8] == ["purge", "purge"]  # the purge stands: the merge did not undo it
    assert not [p for p in log.root.iterdir() if p.name.startswith(merging.MERGING_PREFIX)]
    log.append([deleted(19)])  # the next merge takes the rewritten rows
    log.settle()
    assert log.read(columns=["actor"]).column("actor").to_pylist()[6:8] == ["purge", "purge"]
    assert len(log.files()) < 10 and log.verify() == []


def test_a_merge_under_way_elsewhere_is_not_waited_for(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "log", durable=False)
    fill(log, [1] * 5)
    fd = os.open(log.root / ".merge-lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # (as another process merging)
        fill(log, [1] * 10)  # ten small files more, and the merge each asks for passes
        assert len(log.files()) == 15
    finally:
        os.close(fd)
    log.append([deleted(15)])
    log.settle()
    assert len(log.files()) == 7 and seqs(log) == list(range(1, 17))


def test_what_a_killed_merge_left_is_no_commit_s_leftover_and_the_next_merge_clears_it(
    tmp_path: Path,
) -> None:
    log = EventLog(tmp_path / "log", durable=False)
    fill(log, [1] * 3)
    left = log.root / f"{merging.MERGING_PREFIX}1-3-99999"
    left.write_bytes(b"half a merge")
    log.append([deleted(3)])  # a commit: its leftovers are `.tmp-` files, not merges'
    assert left.exists()
    glob = str(log.root / "*.parquet")  # the documented glob does not read it
    assert duckdb.sql(f"select count(*) from read_parquet('{glob}')").fetchall() == [(4,)]
    fill(log, [1] * 6)  # the tenth file: a merge, which first clears what a dead one left
    assert not left.exists()
    assert seqs(log) == list(range(1, 11)) and log.verify() == []


def test_a_rebuild_reads_the_log_after_this_process_s_merge_not_under_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # An import ends with a rebuild of the projections from the whole log, while its
    # last commits' merge may still run on its thread: listed before that merge put
    # its file in place, the build read files the merge then removed, and was staged
    # again from the log's chunks (read and decoded in Python), or failed midway and
    # was made again from them ("replay: a log file failed to read").
    from projections.fold import bulk
    from projections.projector import Projector

    log, reached, go = _merge_stalled(tmp_path, monkeypatch)
    assert reached.wait(30)
    files = log.files

    def listed(*args: object, **kwargs: object) -> list[LogFile]:
        seen = files(*args, **kwargs)  # type: ignore[arg-type]
        go.set()  # the merge goes on as soon as the build has listed the log
        log.settle()
        return seen

    monkeypatch.setattr(log, "files", listed)
    chunked: list[bool] = []
    stage_chunks = bulk._stage_chunks

    def from_chunks(*args: object) -> int:
        chunked.append(True)
        return stage_chunks(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(bulk, "_stage_chunks", from_chunks)
    threading.Timer(1.0, go.set).start()  # (a rebuild that waits for the merge first)
    assert Projector(tmp_path, log).reindex() == 50
    assert not chunked  # the log's files, as listed after the merge, were read
    assert "failed to read" not in caplog.text
    assert [f.rows for f in files()] == [50]

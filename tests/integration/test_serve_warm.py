"""``serve --keep-warm``: a worker back from a read keeps the store open for the next
read (``pipeline.serve.warm``), and still answers as the command line does, lets a
writer in at once and sees what it wrote. A real server and real subprocesses."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

from tests.integration.test_serve import (
    FIXTURES,
    MAILLEDGER,
    READS,
    Place,
    Server,
    assert_answered_as_in_process,
    make_place,
    ml,
)


def _workers(log: str) -> list[tuple[int, str]]:
    """(worker pid, argv) of each command the server's log names, in order."""
    return [
        (int(pid), argv)
        for pid, argv in re.findall(r" pid (\d+): (?!exit|idle|cancelled)(.+)$", log, re.M)
    ]


def _count(place: Place, query: str = "*") -> int:
    done = ml(place, "search", "--output", "count", query)
    assert done.returncode == 0, done.stderr.decode()
    return int(done.stdout)


def test_reads_are_answered_by_one_warm_worker_exactly_as_in_process(tmp_path: Path) -> None:
    place = make_place(tmp_path)
    server = Server(place)  # (--keep-warm 30s by default)
    try:
        reads = [argv for argv in READS if argv[0] != "query"]  # (query: never kept)
        for argv in reads * 2:
            assert_answered_as_in_process(place, argv)
        log = server.log()
        spare = server.status()["spare"]
        status = ml(place, "serve", "status").stdout.decode()
    finally:
        server.stop()
    pids = {pid for pid, _ in _workers(log)}
    assert len(pids) == 1, log  # (one worker answered them all, back for each)
    assert spare == {"pid": pids.pop(), "warm": True}
    assert f"worker: pid {spare['pid']} waits for the next command, keeps the store open" in status
    assert log.count("(kept)") == 2 * len(reads)


def test_a_query_or_a_write_ends_the_warm_worker_and_leaves_the_file_clean(
    tmp_path: Path,
) -> None:
    place = make_place(tmp_path)
    server = Server(place)
    try:
        before = _count(place)
        imported = ml(place, "import", "mbox", str(FIXTURES / "lists.mbox"))
        assert imported.returncode == 0, imported.stderr.decode()
        assert _count(place) == before + 2
        assert ml(place, "query", "select 1").returncode == 0
        assert _count(place) == before + 2
        log = server.log()
    finally:
        server.stop()
    (reader, _), (writer, argv), (after, _), (query, _), (last, _) = _workers(log)
    assert " import " in argv and writer == reader  # (the warm one took it)
    assert query == after != reader  # (a new worker after the write, warm for the query)
    for pid in (writer, query):  # each ended after it: not kept
        assert f"pid {pid}: exit 0\n" in log
    assert last not in (reader, query)
    assert not (place.store / "projections.duckdb.wal").exists()
    assert ml(place, "verify").returncode == 0


def test_a_writer_beside_a_warm_worker_gets_the_file_and_the_worker_sees_its_commit(
    tmp_path: Path,
) -> None:
    place = make_place(tmp_path)
    server = Server(place)
    try:
        before = _count(place)  # the worker waits now, the projection file attached
        for attempt in range(3):
            here = ml(place, "--no-serve", "import", "mbox", str(FIXTURES / "lists.mbox"))
            assert here.returncode == 0, here.stderr.decode()
            assert b"not updated now" not in here.stderr  # (a LockTimeout after 30 s)
            assert _count(place) == before + 2, attempt
        deleted = ml(place, "--no-serve", "delete", "<plan-1@example.org>", "--reason", "t")
        assert deleted.returncode == 0, deleted.stderr.decode()
        assert _count(place) == before + 1
        log = server.log()
    finally:
        server.stop()
    assert len({pid for pid, _ in _workers(log)}) == 1, log  # (the same warm worker)


def test_a_reader_that_went_away_leaves_nothing_for_the_next_command(tmp_path: Path) -> None:
    # `search ... | head -c 20`: the command's output hits a closed pipe; what it
    # could not write must not reach the next client of the same worker
    place = make_place(tmp_path)
    expected = ml(place, "--no-serve", "search", "--output", "count", "*").stdout
    server = Server(place)
    try:
        for _ in range(3):
            head = subprocess.run(
                f"{' '.join(MAILLEDGER)} --store {place.store} search --format json '*'"
                " | head -c 20",
                shell=True,
                capture_output=True,
                cwd=place.tmp,
                env=place.env,
                timeout=60,
                check=False,
            )
            assert len(head.stdout) == 20, head.stderr.decode()
            after = ml(place, "search", "--output", "count", "*")
            assert (after.returncode, after.stdout, after.stderr) == (0, expected, b"")
    finally:
        server.stop()


def test_a_warm_worker_lets_go_after_keep_warm_and_a_new_one_answers(tmp_path: Path) -> None:
    place = make_place(tmp_path)
    server = Server(place, "--keep-warm", "1s")
    try:
        first = _count(place)
        deadline = time.monotonic() + 30
        while "let go of the store" not in server.log() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _count(place) == first
        log = server.log()
    finally:
        server.stop()
    (one, _), (two, _) = _workers(log)
    assert one != two and f"pid {one}: idle for --keep-warm, let go of the store" in log


def test_keep_warm_0_runs_each_command_in_a_worker_of_its_own(tmp_path: Path) -> None:
    place = make_place(tmp_path)
    server = Server(place, "--keep-warm", "0")
    try:
        counts = {_count(place) for _ in range(3)}
        log = server.log()
    finally:
        server.stop()
    assert len(counts) == 1
    assert len({pid for pid, _ in _workers(log)}) == 3 and "(kept)" not in log

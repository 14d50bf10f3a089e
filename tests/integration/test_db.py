"""The projection database's plumbing: one DuckDB instance per process, the file
attached while held and detached (closed, unlocked) when the last holder lets go."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import duckdb
import pytest

from stores import db
from stores.errors import LockTimeout


def _other_process(
    path: Path, code: str, timeout: float = 30.0
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` (with ``con`` open on ``path`` for writing) in a separate process."""
    script = textwrap.dedent(
        f"""
        import duckdb
        con = duckdb.connect({str(path)!r})
        """
    ) + textwrap.dedent(code)
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout, check=False
    )


def _new_db(path: Path) -> None:
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE t AS SELECT 1 AS x")
    con.close()


def test_a_released_writer_unlocks_the_file_for_another_process(tmp_path: Path) -> None:
    path = tmp_path / "p.duckdb"
    _new_db(path)
    con = db.connect(path, read_only=False)
    con.execute("INSERT INTO t VALUES (2)")
    held = _other_process(path, "print('opened')", timeout=60)
    assert held.returncode != 0 and "lock" in held.stderr.lower()  # we hold it
    db.release(con)
    done = _other_process(path, "print(con.execute('SELECT sum(x) FROM t').fetchall())")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[(3,)]"  # our committed row, visible after the release


def test_holders_of_the_same_mode_share_one_attachment_until_the_last_lets_go(
    tmp_path: Path,
) -> None:
    path = tmp_path / "p.duckdb"
    _new_db(path)
    a = db.connect(path, read_only=True)
    b = db.connect(path, read_only=True)
    assert (
        a.execute("SELECT current_database()").fetchall()
        == b.execute("SELECT current_database()").fetchall()
    )
    db.release(a)
    assert b.execute("SELECT x FROM t").fetchall() == [(1,)]  # still attached for b
    db.release(b)
    done = _other_process(path, "con.execute('INSERT INTO t VALUES (5)'); print('wrote')")
    assert done.returncode == 0 and "wrote" in done.stdout, done.stderr


def test_a_writer_and_a_reader_of_one_file_in_one_process_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "p.duckdb"
    _new_db(path)
    w = db.connect(path, read_only=False)
    try:
        with pytest.raises(duckdb.ConnectionException, match="already held"):
            db.connect(path, read_only=True)
    finally:
        db.release(w)
    r = db.connect(path, read_only=True)  # free again once released
    db.release(r)


def test_a_file_another_process_holds_times_out_with_lock_timeout(tmp_path: Path) -> None:
    path = tmp_path / "p.duckdb"
    _new_db(path)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import duckdb, time; c = duckdb.connect({str(path)!r});"
            " print('held', flush=True); time.sleep(30)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(LockTimeout, match="held by another process"):
            db.connect(path, read_only=True, timeout=0.3)
    finally:
        holder.kill()
        holder.wait()
    con = db.connect(path, read_only=True, timeout=10)  # the lock went with the process
    assert con.execute("SELECT x FROM t").fetchall() == [(1,)]
    db.release(con)


def test_each_attachment_reads_its_own_file(tmp_path: Path) -> None:
    one, two = tmp_path / "one.duckdb", tmp_path / "two.duckdb"
    _new_db(one)
    con = duckdb.connect(str(two))
    con.execute("CREATE TABLE t AS SELECT 2 AS x")
    con.close()
    a, b = db.connect(one, read_only=True), db.connect(two, read_only=True)
    try:
        assert a.execute("SELECT x FROM t").fetchall() == [(1,)]
        assert b.execute("SELECT x FROM t").fetchall() == [(2,)]
    finally:
        db.release(a)
        db.release(b)


def test_the_file_is_held_again_after_a_query_spilled_to_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DuckDB refuses to set its spill directory again once a query has used it (even
    to the same path): each hold used to set it, so the next hold failed."""
    monkeypatch.setitem(db.CONFIG, "memory_limit", "32MB")
    path = tmp_path / "p.duckdb"
    with db.fresh_instances():  # (made with the small memory limit)
        _new_db(path)
        con = db.connect(path, read_only=False)
        con.execute(
            "CREATE TEMP TABLE big AS SELECT range::VARCHAR || repeat('x', 60) AS s"
            " FROM range(2000000)"
        )
        spilled = list((tmp_path / "p.duckdb.tmp").iterdir())
        assert spilled, "the query did not spill: the case is not exercised"
        db.release(con)
        again = db.connect(path, read_only=True)
        assert again.execute("SELECT sum(x) FROM t").fetchall() == [(1,)]
        db.release(again)


def test_a_second_file_is_held_after_the_first_one_spilled_to_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One process, two stores (a script comparing them; the hostile campaign's
    import, then its IMAP slice): spill files go beside each file, and DuckDB
    refuses to move its spill directory once a query has used it. Holding the
    second file used to fail with "Cannot switch temporary directory"."""
    monkeypatch.setitem(db.CONFIG, "memory_limit", "32MB")
    first, second = tmp_path / "a" / "p.duckdb", tmp_path / "b" / "p.duckdb"
    with db.fresh_instances():  # (made with the small memory limit)
        for path in (first, second):
            path.parent.mkdir()
            _new_db(path)
        con = db.connect(first, read_only=False)
        con.execute(
            "CREATE TEMP TABLE big AS SELECT range::VARCHAR || repeat('x', 60) AS s"
            " FROM range(2000000)"
        )
        assert list((tmp_path / "a" / "p.duckdb.tmp").iterdir()), "nothing spilled"
        other = db.connect(second, read_only=False)
        other.execute("INSERT INTO t VALUES (2)")
        assert other.execute("SELECT sum(x) FROM t").fetchall() == [(3,)]
        db.release(other)
        db.release(con)
        again = db.connect(first, read_only=True)  # (the first file's own instance again)
        assert again.execute("SELECT sum(x) FROM t").fetchall() == [(1,)]
        db.release(again)


def test_a_writer_announces_itself_while_it_waits_and_holds_and_not_after(
    tmp_path: Path,
) -> None:
    """``writer_waiting``, as another process sees it: true from before a writer's
    ATTACH (it waits for a reader that keeps the file) until its release."""
    path = tmp_path / "p.duckdb"
    _new_db(path)
    probe = f"from stores import db; print(db.writer_waiting({str(path)!r}))"

    def seen() -> str:
        done = subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    assert seen() == "False"  # (no writer yet: no intent file even)
    reader = db.connect(path, read_only=True)  # a reader keeping the file...
    waiting = subprocess.Popen(
        [sys.executable, "-c", "from stores import db; import sys;"
         f" c = db.connect({str(path)!r}, read_only=False, timeout=60);"
         " print('held', flush=True); sys.stdin.readline(); db.release(c)"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not db.writer_waiting(path):  # ...sees the writer waiting for it
            assert time.monotonic() < deadline, "no intent seen"
        db.release(reader)  # (and lets go)
        assert waiting.stdout is not None and waiting.stdout.readline() == "held\n"
        assert seen() == "True"  # held: still announced
        assert not db.wait_for_writer(path, timeout=0.2)
    finally:
        assert waiting.stdin is not None
        waiting.stdin.write("\n")
        waiting.stdin.close()
        assert waiting.wait(timeout=60) == 0
        if waiting.stdout is not None:
            waiting.stdout.close()
    assert seen() == "False" and db.wait_for_writer(path, timeout=1)

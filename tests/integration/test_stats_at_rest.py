"""`mailledger stats` read at rest: the counts from the cursor snapshot the folds
keep, the rest from the log's directory and the blob index; no DuckDB, no
pyarrow; the same figures as the opened store gives."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from pipeline.at_rest import quick_stats
from pipeline.store import MessageStore
from projections import snapshot


def _msg(i: int, *, defect: bool = False) -> bytes:
    mid = "" if i % 4 == 0 else f"Message-ID: <r{i}@rest.example>\r\n"
    date = "Date: not a date\r\n" if defect else "Date: Mon, 01 Jun 2026 10:00:00 +0200\r\n"
    return (f"From: s{i}@rest.example\r\nSubject: rest {i}\r\n{date}{mid}\r\nbody {i}\r\n").encode()


def _stats_cli(root: Path) -> tuple[dict[str, object], bool]:
    probe = (
        "import atexit, runpy, sys\n"
        "atexit.register(lambda: print('HEAVY=' + ','.join(m for m in ('duckdb', 'pyarrow')"
        " if m in sys.modules), file=sys.stderr))\n"
        "sys.argv = ['mailledger', *sys.argv[1:]]\n"
        "runpy.run_module('pipeline', run_name='__main__', alter_sys=True)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, "--store", str(root), "stats", "--json"],
        env=dict(os.environ), capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    heavy = next(ln for ln in done.stderr.splitlines() if ln.startswith("HEAVY="))
    return json.loads(done.stdout), heavy != "HEAVY="


def test_stats_at_rest_match_the_opened_store_and_load_no_duckdb(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with MessageStore.open(root) as s:
        for i in range(9):
            s.add(f"u{i}", _msg(i, defect=i == 3), folder="INBOX")
        s.delete("r5@rest.example")
        opened = s.stats()
    assert opened["synthetic_ids"] >= 1 and opened["malformed"] >= 1
    at_rest, heavy = _stats_cli(root)
    assert at_rest == opened and not heavy
    assert quick_stats(root) == opened


def test_stats_open_the_store_when_the_snapshot_is_stale_or_gone(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with MessageStore.open(root) as s:
        s.add("u1", _msg(1), folder="INBOX")
        s.add("u2", _msg(2), folder="INBOX")  # (a fold: the first add built the file)
    path = root / snapshot.SNAPSHOT_NAME
    doc = json.loads(path.read_text())
    doc["seq"] -= 1  # as if made before the log's last commit
    path.write_text(json.dumps(doc))
    assert quick_stats(root) is None
    stats, heavy = _stats_cli(root)
    assert heavy and stats["messages"] == 2
    path.unlink()
    assert quick_stats(root) is None
    assert main_replay(root) == 0
    assert quick_stats(root) is not None


def main_replay(root: Path) -> int:
    from pipeline.cli import main

    return main(["--store", str(root), "replay"], env={})


def test_a_moved_store_is_opened_before_its_snapshot_is_used_again(tmp_path: Path) -> None:
    """The open points the events view kept in the projections at the store's new
    place (stock DuckDB reads the log through it): read at rest, a moved store
    would keep the old place until its next fold."""
    root = tmp_path / "store"
    with MessageStore.open(root) as s:
        s.add("u1", _msg(1), folder="INBOX")
        s.add("u2", _msg(2), folder="INBOX")
    assert quick_stats(root) is not None
    moved = tmp_path / "moved"
    root.rename(moved)
    assert quick_stats(moved) is None
    stats, heavy = _stats_cli(moved)
    assert heavy and stats["messages"] == 2


def test_the_folds_keep_the_defect_counts_a_scan_gives(tmp_path: Path) -> None:
    """``malformed`` and ``synthetic_ids`` are counters the folds keep (the rows
    written less those removed), not scans of the messages table at every fold:
    after adds and deletes of such messages they equal what a scan counts, and
    what a replay counts."""
    root = tmp_path / "store"
    scan = (
        "SELECT count(*) FILTER (WHERE len(defects) > 0) AS malformed,"
        " count(*) FILTER (WHERE synthetic_id) AS synthetic_ids FROM messages"
    )
    with MessageStore.open(root) as s:
        for i in range(12):
            s.add(f"u{i}", _msg(i, defect=i % 3 == 0), folder="INBOX")
        s.delete("r3@rest.example")  # malformed, with an id
        s.delete("r6@rest.example")
        stats = s.stats()
        scanned = s.query(scan).to_pylist()[0]
        assert {k: stats[k] for k in scanned} == scanned
        # (i = 0, 4, 8 have no Message-ID, itself a defect; 3 and 6 were deleted)
        assert scanned == {"malformed": 4, "synthetic_ids": 3}
        kept = s.query("SELECT key, value FROM meta WHERE key IN ('malformed', 'synthetic_ids')")
        assert dict(zip(*kept.to_pydict().values(), strict=True)) == scanned
        s.reindex()
        counted = ("messages", "threads", "ghosts", "locations", "malformed", "synthetic_ids")
        assert {k: s.stats()[k] for k in counted} == {k: stats[k] for k in counted}

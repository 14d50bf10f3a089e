"""``mailledger publish delta DEST``: a store's or a cluster's events appended to a
Delta table partitioned by shard, each event once however often it runs or fails,
readable by deltalake, pyarrow and DuckDB."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
from deltalake import DeltaTable

from pipeline.cli import main
from pipeline.cluster import init_cluster
from pipeline.cluster.publish import LOCK_NAME, app_id, publish_delta
from testkit.delta import duplicates, log_rows, problems, published_rows
from testkit.eventlogs import append_events

REPO = Path(__file__).resolve().parents[2]


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv), env={"HOME": "/nonexistent"})
    out, err = capsys.readouterr()
    return code, out, err


def _cluster(tmp_path: Path, events: list[int]) -> list[tuple[str, Path]]:
    catalog, _ = init_cluster(tmp_path / "cluster", len(events), [])
    shards = [(s, catalog.shard_path(s)) for s in catalog.shards]
    for (shard, path), n in zip(shards, events, strict=True):
        append_events(path, n, batch=70, tag=shard)
    return shards


def test_publish_appends_every_event_once_and_later_only_the_new_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store, dest = tmp_path / "store", tmp_path / "table"
    append_events(store, 450, batch=40)
    argv = ["--store", str(store), "publish", "delta", str(dest), "--chunk-rows", "100"]
    code, out, err = _cli(capsys, *argv, "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["rows"] == 450
    assert report["shards"] == [
        {
            "shard": "store",
            "before": 0,
            "after": 450,
            "rows": 450,
            "commits": 5,
            "retries": 0,
            "purged": 0,
        }
    ]
    assert problems(dest, [("store", store)]) == []
    assert DeltaTable(str(dest)).transaction_version(app_id("store")) == 450
    # again: nothing new, nothing written, no new version
    code, out, _ = _cli(capsys, "--store", str(store), "publish", "delta", str(dest), "--json")
    assert code == 0 and json.loads(out)["rows"] == 0 and json.loads(out)["version"] == 4
    # more events: only they are appended
    append_events(store, 30, batch=30)
    code, out, _ = _cli(capsys, "--store", str(store), "publish", "delta", str(dest))
    assert code == 0
    assert "store: seq 450 -> 480, 30 rows in 1 commits" in out
    assert problems(dest, [("store", store)]) == []


def test_each_shard_of_a_cluster_is_a_partition_with_its_own_position(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shards = _cluster(tmp_path, [300, 0, 120])
    dest = tmp_path / "table"
    code, out, err = _cli(
        capsys, "publish", "delta", str(dest), "--cluster", str(tmp_path / "cluster"), "--json"
    )
    assert code == 0, err
    by_shard = {s["shard"]: s for s in json.loads(out)["shards"]}
    assert {s: (v["after"], v["rows"]) for s, v in by_shard.items()} == {
        "shard-000": (300, 300), "shard-001": (0, 0), "shard-002": (120, 120),
    }  # fmt: skip
    assert problems(dest, shards) == []
    assert sorted(p.name for p in dest.iterdir() if p.name.startswith("shard=")) == [
        "shard=shard-000",
        "shard=shard-002",
    ]
    table = DeltaTable(str(dest))
    assert table.metadata().partition_columns == ["shard"]
    assert table.transaction_version(app_id("shard-001")) is None
    # the same seq in two shards is two events, not a duplicate
    assert duplicates(dest) == 0 and published_rows(dest)["shard-002"].column("seq")[0].as_py() == 1


def test_a_table_version_read_back_gives_the_events_as_of_then(tmp_path: Path) -> None:
    store, dest = tmp_path / "store", tmp_path / "table"
    append_events(store, 200)
    first = publish_delta([("store", store)], dest, chunk_rows=200)
    append_events(store, 150)
    second = publish_delta([("store", store)], dest, chunk_rows=100)
    assert (first.version, second.version) == (0, 2)
    assert published_rows(dest, version=0)["store"].equals(log_rows(store, upto=200))
    assert published_rows(dest, version=1)["store"].equals(log_rows(store, upto=300))
    assert published_rows(dest)["store"].equals(log_rows(store))
    assert DeltaTable(str(dest), version=1).transaction_version(app_id("store")) == 300


def test_duckdb_and_pyarrow_read_the_table_through_its_file_list(tmp_path: Path) -> None:
    shards = _cluster(tmp_path, [90, 60])
    dest = tmp_path / "table"
    publish_delta(shards, dest)
    uris = DeltaTable(str(dest)).file_uris()
    counts = duckdb.sql(
        "select shard, count(*), count(distinct seq), max(seq) from read_parquet($1,"
        " hive_partitioning = true) group by shard order by shard",
        params=[uris],
    ).fetchall()
    assert counts == [("shard-000", 90, 90, 90), ("shard-001", 60, 60, 60)]
    subject = duckdb.sql(
        "select subject from read_parquet($1, hive_partitioning = true)"
        " where shard = 'shard-001' and seq = 2",
        params=[uris],
    ).fetchall()
    assert subject == [("Re: topic 0",)]
    import pyarrow.dataset as ds

    dataset = ds.dataset(uris, format="parquet")
    assert dataset.count_rows() == 150


def test_a_lost_response_is_found_committed_and_never_written_twice(tmp_path: Path) -> None:
    """The commit lands, then the caller sees an error (a reply lost on the way back):
    a kill cannot make that happen after the commit returned, so the writer is
    wrapped to raise after it; the read-back must find the chunk applied."""
    from pipeline.cluster import publish

    store, dest = tmp_path / "store", tmp_path / "table"
    append_events(store, 500)
    lost: list[int] = []

    def write_then_lose_the_answer(uri: str, rows: pa.Table, app: str, version: int) -> None:
        publish.write_chunk(uri, rows, app, version)
        if version % 200 == 0:
            lost.append(version)
            raise OSError("connection reset by peer (after the commit)")

    report = publish_delta(
        [("store", store)], dest, chunk_rows=100, writer=write_then_lose_the_answer
    )
    assert lost == [200, 400]
    assert report.shards[0].retries == 2 and report.shards[0].rows == 500
    assert problems(dest, [("store", store)]) == []


def test_a_log_compacted_under_a_publish_loses_and_doubles_nothing(tmp_path: Path) -> None:
    """``compact`` merges the files the publisher listed and removes them while it
    reads: it lists again from the last seq it read."""
    from pipeline.cluster import publish
    from stores.log import EventLog

    store, dest = tmp_path / "store", tmp_path / "table"
    append_events(store, 600, batch=40)
    log = EventLog(store / "log", durable=False)
    merged: list[tuple[int, int]] = []

    def write_then_compact(uri: str, rows: pa.Table, app: str, version: int) -> None:
        publish.write_chunk(uri, rows, app, version)
        if not merged:
            merged.append(log.compact(target_rows=10_000))

    report = publish_delta([("store", store)], dest, chunk_rows=50, writer=write_then_compact)
    assert merged == [(15, 1)] and len(list((store / "log").glob("*.parquet"))) == 1
    assert report.rows == 600 and report.shards[0].commits == 12
    assert problems(dest, [("store", store)]) == []


def test_a_commit_that_fails_every_attempt_is_an_error_and_a_rerun_finishes(
    tmp_path: Path,
) -> None:
    store, dest = tmp_path / "store", tmp_path / "table"
    append_events(store, 300)

    def refused(uri: str, rows: pa.Table, app: str, version: int) -> None:
        if version > 100:
            raise OSError("No space left on device")
        from pipeline.cluster import publish

        publish.write_chunk(uri, rows, app, version)

    from pipeline.cluster.publish import PublishError

    with pytest.raises(PublishError, match="up to seq 200 was not committed"):
        publish_delta([("store", store)], dest, chunk_rows=100, writer=refused)
    assert DeltaTable(str(dest)).transaction_version(app_id("store")) == 100
    assert publish_delta([("store", store)], dest, chunk_rows=100).rows == 200
    assert problems(dest, [("store", store)]) == []


def test_optimize_compacts_checkpoints_and_vacuums_keeping_each_shards_position(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shards = _cluster(tmp_path, [250, 180])
    dest = tmp_path / "table"
    publish_delta(shards, dest, chunk_rows=30)
    assert len(DeltaTable(str(dest)).file_uris()) == 9 + 6
    code, out, err = _cli(
        capsys,
        "publish", "delta", str(dest), "--cluster", str(tmp_path / "cluster"),
        "--optimize", "--retention-hours", "0", "--json",
    )  # fmt: skip
    assert code == 0, err
    done = json.loads(out)["maintenance"]
    assert done["files_removed"] == 15 and done["files_added"] == 2
    assert done["vacuumed"] == 15
    table = DeltaTable(str(dest))
    assert len(table.file_uris()) == 2
    assert (dest / "_delta_log" / f"{done['checkpoint_version']:020d}.checkpoint.parquet").exists()
    assert table.transaction_version(app_id("shard-000")) == 250
    assert table.transaction_version(app_id("shard-001")) == 180
    assert problems(dest, shards) == []
    append_events(shards[1][1], 20, tag="later")
    assert publish_delta(shards, dest).rows == 20  # (positions survive the compaction)
    assert problems(dest, shards) == []


def test_a_purge_reaches_the_published_rows_and_a_vacuum_their_old_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store, dest = tmp_path / "store", tmp_path / "table"
    maildir = str(REPO / "fixtures/maildir")
    assert _cli(capsys, "--store", str(store), "import", "maildir", maildir)[0] == 0
    assert _cli(capsys, "--store", str(store), "publish", "delta", str(dest))[0] == 0
    subject = "a date nobody can read"
    assert subject in published_rows(dest)["store"].column("subject").to_pylist()
    assert _cli(capsys, "--store", str(store), "delete", "<undated-1@example.com>")[0] == 0
    assert _cli(capsys, "--store", str(store), "compact", "--purge")[0] == 0
    code, out, err = _cli(capsys, "--store", str(store), "publish", "delta", str(dest), "--json")
    assert code == 0, err
    [part] = json.loads(out)["shards"]
    assert part["purged"] == 1 and part["rows"] == 2  # (the delete and the purge's marker)
    assert problems(dest, [("store", store)]) == []  # (every column as the purged log has it)
    rows = published_rows(dest)["store"]
    assert subject not in rows.column("subject").to_pylist()
    assert "<undated-1@example.com>" not in str(rows.column("message_id").to_pylist())
    # again: the purge is already in the table, nothing rewritten
    code, out, _ = _cli(capsys, "--store", str(store), "publish", "delta", str(dest), "--json")
    assert code == 0 and json.loads(out)["shards"][0]["purged"] == 0
    # the files that held the erased rows stay on disk until vacuumed past the retention

    def on_disk() -> str:
        import pyarrow.parquet as pq

        files = sorted(dest.glob("shard=*/*.parquet"))
        return " ".join(str(pq.read_table(f).column("subject").to_pylist()) for f in files)

    assert subject in on_disk()
    argv = ["publish", "delta", str(dest), "--optimize", "--retention-hours", "0"]
    assert _cli(capsys, "--store", str(store), *argv)[0] == 0
    assert subject not in on_disk()
    assert problems(dest, [("store", store)]) == []


def test_publish_waits_for_an_interrupted_purge_to_be_finished(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store, dest = tmp_path / "store", tmp_path / "table"
    append_events(store, 20)
    (store / "purge-journal.json").write_text("{}")  # (what a killed purge leaves)
    code, _, err = _cli(capsys, "--store", str(store), "publish", "delta", str(dest))
    assert code == 1 and "compact --purge` finishes it" in err
    (store / "purge-journal.json").unlink()
    assert _cli(capsys, "--store", str(store), "publish", "delta", str(dest))[0] == 0


def test_a_directory_that_is_not_our_table_and_a_stranger_store_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    append_events(store, 50)
    other = tmp_path / "notes"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    code, _, err = _cli(capsys, "--store", str(store), "publish", "delta", str(other))
    assert code == 2 and "not empty and not a Delta table" in err
    assert (other / "notes.txt").read_text() == "mine"
    dest = tmp_path / "table"
    assert _cli(capsys, "--store", str(store), "publish", "delta", str(dest))[0] == 0
    smaller = tmp_path / "smaller"
    append_events(smaller, 10)
    code, _, err = _cli(capsys, "--store", str(smaller), "publish", "delta", str(dest))
    assert code == 2 and "holds shard store up to seq 50" in err and "ends at seq 10" in err
    code, _, err = _cli(capsys, "--store", str(tmp_path / "nothing"), "publish", "delta", str(dest))
    assert code == 2 and "not a mailledger store" in err
    code, _, err = _cli(capsys, "publish", "delta", str(dest), "--cluster", str(tmp_path / "no"))
    assert code == 1 and "no mailledger cluster here" in err
    code, _, err = _cli(capsys, "--store", str(store), "publish", "delta", str(tmp_path / "t\x1b"))
    assert code == 2 and "not a path delta-rs can use" in err
    assert not (tmp_path / "t\x1b").exists()  # (refused before anything is created)
    assert problems(dest, [("store", store)]) == []


def test_a_damaged_table_is_an_error_naming_it_without_a_backtrace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store, dest = tmp_path / "store", tmp_path / "table"
    append_events(store, 20)
    assert _cli(capsys, "--store", str(store), "publish", "delta", str(dest))[0] == 0
    (dest / "_delta_log" / f"{1:020d}.json").write_text("{garbage\n")
    code, _, err = _cli(capsys, "--store", str(store), "publish", "delta", str(dest))
    assert code == 1 and err.startswith(f"mailledger: error: {dest}: ")
    assert "Json error" in err and len(err.splitlines()) == 1
    assert (dest / "_delta_log" / f"{1:020d}.json").read_text() == "{garbage\n"


def test_a_second_publisher_to_the_same_table_is_refused_while_one_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store, dest = tmp_path / "store", tmp_path / "table"
    append_events(store, 20)
    dest.mkdir()
    fd = os.open(dest / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # (what a running publisher holds)
        code, _, err = _cli(capsys, "--store", str(store), "publish", "delta", str(dest))
        assert code == 1 and "another publish to this table is running" in err
    finally:
        os.close(fd)
    assert _cli(capsys, "--store", str(store), "publish", "delta", str(dest))[0] == 0


def _fresh(probe: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "HOME": str(cwd)}
    env = {k: v for k, v in env.items() if not k.startswith("MAILLEDGER_")}
    return subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=cwd, env=env, timeout=120
    )


def test_without_deltalake_publish_exits_2_naming_the_extra(tmp_path: Path) -> None:
    store = tmp_path / "store"
    append_events(store, 5)
    probe = (
        "import sys; sys.modules['deltalake'] = None  # (as if not installed)\n"
        "from pipeline.cli import main\n"
        f"sys.exit(main(['--store', {str(store)!r}, 'publish', 'delta', 'table']))\n"
    )
    done = _fresh(probe, tmp_path)
    assert done.returncode == 2, done.stderr
    assert "pip install 'mailledger[cluster]'" in done.stderr
    assert not (tmp_path / "table").exists()


def test_deltalake_is_loaded_by_publish_only_when_it_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    maildir = str(REPO / "fixtures/maildir")
    assert _cli(capsys, "--store", str(store), "import", "maildir", maildir)[0] == 0
    probe = (
        "import sys\n"
        "from pipeline.cli import build_parser, main\n"
        "loaded = lambda: sorted(m for m in sys.modules if m.split('.')[0] == 'deltalake')\n"
        f"codes = [main(['--store', {str(store)!r}, c]) for c in ('stats', 'verify')]\n"
        "build_parser({}).format_help()\n"
        "before = loaded()\n"
        f"codes.append(main(['--store', {str(store)!r}, 'publish', 'delta', 'table']))\n"
        "print(codes, before, 'deltalake' in loaded())\n"
    )
    done = _fresh(probe, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[0, 0, 0] [] True"


def test_the_command_exits_0_in_its_own_process_after_a_write(tmp_path: Path) -> None:
    """delta-rs runs a tokio runtime and pyarrow its thread pool: the process that
    wrote must still end, with status 0 (docs/delta-spike.md saw 134/139 at exit
    after a scan through deltalake's Python filesystem)."""
    store = tmp_path / "store"
    append_events(store, 400)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAILLEDGER_")}
    env["PYTHONPATH"] = str(REPO)
    for extra in ([], ["--optimize", "--retention-hours", "0"]):
        done = subprocess.run(
            [sys.executable, "-m", "pipeline", "--store", str(store), "publish", "delta",
             str(tmp_path / "table"), "--chunk-rows", "100", *extra],
            capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120,
        )  # fmt: skip
        assert (done.returncode, done.stderr) == (0, "")
    assert problems(tmp_path / "table", [("store", store)]) == []

"""Costs that follow the work: replay within a memory budget, folds and reads that
touch what they need (the scale figures themselves are ``make bench-scale``'s)."""

from __future__ import annotations

import hashlib
import os
import random
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import pytest

from pipeline.cli import main
from pipeline.store import MessageStore
from projections.fold import location_key, rebuild
from projections.tables import fingerprint
from stores.db import MIN_BUDGET, duckdb_share
from stores.errors import ConfigError
from stores.events import MessageSeen
from stores.log import EventLog

T0 = datetime(2025, 1, 1, tzinfo=UTC)
BUDGET = MIN_BUDGET  # the least ``--memory`` takes
BUDGET_DUCKDB = duckdb_share(BUDGET)
REPO = Path(__file__).resolve().parents[2]


def _events(n: int, seed: int = 7) -> list[MessageSeen]:
    """``n`` sightings with wide rows (references, recipients): threads of up to 20."""
    rng = random.Random(seed)
    out: list[MessageSeen] = []
    for i in range(n):
        mid = f"m{i:07d}.{rng.getrandbits(40):x}@scale.example.org"
        start = max(0, i - rng.randrange(1, 20))
        refs = tuple(out[j].message_id for j in range(start, i)) if i and rng.random() < 0.7 else ()
        out.append(
            MessageSeen(
                run_id="scale-test",
                recorded_at=T0 + timedelta(seconds=i),
                source="import:test",
                folder="INBOX",
                uidvalidity=1,
                uid=i + 1,
                message_id=mid,
                sha256=hashlib.sha256(mid.encode()).hexdigest(),
                size=1000 + i,
                date_utc=T0 + timedelta(minutes=i),
                date_offset_min=0,
                from_addr=f"sender{rng.randrange(300)}@example.com",
                to_addrs=tuple(f"rcpt{rng.randrange(5000)}@example.net" for _ in range(3)),
                in_reply_to=refs[-1] if refs else None,
                references=refs,
                list_id="big.lists.example.org" if i % 3 == 0 else None,
                subject=f"{'Re: ' if refs else ''}topic {i // 7} of the quarterly review",
            )
        )
    return out


@pytest.fixture(scope="module")
def big_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store of 60,000 sightings (log only, then replayed once)."""
    root = tmp_path_factory.mktemp("scale") / "store"
    MessageStore.open(root).close()
    log = EventLog(root / "log", durable=False)
    events = _events(60_000)
    for start in range(0, len(events), 5000):
        log.append(events[start : start + 5000])
    with MessageStore.open(root) as store:
        store.reindex()
    return root


def test_the_store_is_too_big_to_replay_in_its_budget_without_spilling(
    big_store: Path, tmp_path: Path
) -> None:
    """The premise of the next test: its events and tables do not fit in the DuckDB
    share of the least budget; with the events staged in memory (the copy a rebuild
    makes of them when DuckDB cannot read the log's files) and nowhere to spill, the
    rebuild fails. (Read where they lie, the files' events need no copy: a rebuild
    of this store then fits in the budget without spilling.)"""
    log = EventLog(big_store / "log")
    con = duckdb.connect(
        str(tmp_path / "p.duckdb"),
        config={"memory_limit": f"{BUDGET_DUCKDB >> 20}MiB", "max_temp_directory_size": "0KiB"},
    )
    # (out of memory in a statement, or in the commit that writes a table out)
    with pytest.raises((duckdb.OutOfMemoryException, duckdb.TransactionException)) as err:
        rebuild(con, [log.read()], scratch=None)
    assert "offload" in str(err.value) or isinstance(err.value, duckdb.OutOfMemoryException)
    con.close()


def test_a_rebuild_of_staged_events_within_a_small_budget_spills_and_completes(
    big_store: Path, tmp_path: Path
) -> None:
    """The events staged (the log's files unreadable by DuckDB) in the DuckDB share of
    the least budget: the rebuild spills to its scratch file and temp directory, and
    gives the tables a replay gave."""
    log = EventLog(big_store / "log")
    con = duckdb.connect(
        str(tmp_path / "p.duckdb"),
        config={
            "memory_limit": f"{BUDGET_DUCKDB >> 20}MiB",
            "temp_directory": str(tmp_path / "spill"),
        },
    )
    assert rebuild(con, [log.read()], scratch=tmp_path / "stage.duckdb", builders=1) == 60_000
    assert fingerprint(con) == fingerprint_of(big_store / "projections.duckdb")
    con.close()


def test_replay_within_a_small_budget_spills_completes_and_verifies(big_store: Path) -> None:
    with MessageStore.open(big_store) as store:
        before = fingerprint_of(store.projector.db_path)
        store.projector.memory_budget = BUDGET  # the least there is: it must spill
        assert store.reindex() == 60_000
        assert fingerprint_of(store.projector.db_path) == before
        assert store.verify(blobs=False) == []
        leftovers = sorted(p.name for p in big_store.iterdir() if "rebuild" in p.name)
    assert leftovers == []


def fingerprint_of(path: Path) -> dict[str, str]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return fingerprint(con)
    finally:
        con.close()


def test_kill_9_during_a_spilling_replay_leaves_the_old_projections_in_use(
    big_store: Path,
) -> None:
    db_path = big_store / "projections.duckdb"
    before = fingerprint_of(db_path)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline", "--store", str(big_store), "--memory", "256MiB",
         "replay"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    stage = big_store / "projections.duckdb.rebuild.stage"
    deadline = time.monotonic() + 60
    while not stage.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    time.sleep(0.3)  # well into the build
    assert proc.poll() is None, "the replay ended before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert any("rebuild" in p.name for p in big_store.iterdir())
    assert fingerprint_of(db_path) == before  # the old projections, untouched
    with MessageStore.open(big_store) as store:  # opening removes the dead rebuild's files
        assert store.find("list-id", "big.lists.example.org")[:1] == [_events(1)[0].message_id]
    left = sorted(p.name for p in big_store.iterdir() if "rebuild" in p.name)
    assert left == []


def test_location_keys_are_spelled_alike_in_python_and_sql(tmp_path: Path) -> None:
    from projections.fold.locations import LOC_KEY

    con = duckdb.connect()
    cases = [
        ("imap-a", "INBOX", 7, 42, None),
        ("pop", "", None, None, "UIDL-1"),
        ("import:maildir:/x", "cur", None, None, None),
        ("a\x1fb", "F/o'o", 0, 0, ""),
    ]
    for source, folder, uidvalidity, uid, uidl in cases:
        sql = con.execute(
            f"SELECT {LOC_KEY} FROM (SELECT ?::VARCHAR AS source, ?::VARCHAR AS folder,"
            " ?::BIGINT AS uidvalidity, ?::BIGINT AS uid, ?::VARCHAR AS uidl)",
            [source, folder, uidvalidity, uid, uidl],
        ).fetchall()[0][0]
        assert location_key(source, folder, uidvalidity, uid, uidl) == sql


def test_a_bad_memory_size_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["--store", str(tmp_path / "s"), "--memory", "lots", "replay"], env={})
    assert code == 2
    assert "--memory" in capsys.readouterr().err


def test_memory_from_the_config_file_is_read(tmp_path: Path) -> None:
    from pipeline.config import load_config

    conf = tmp_path / "c.toml"
    conf.write_text(
        '[accounts.a]\ntype = "imap"\nhost = "127.0.0.1"\nusername = "u"\n'
        'password_env = "P"\ntls = "none"\n[store]\nmemory = "768MiB"\n'
    )
    assert load_config(conf, {"HOME": str(tmp_path)}).store_memory == 768 << 20
    conf.write_text(conf.read_text().replace('"768MiB"', '"a lot"'))
    with pytest.raises(ConfigError, match=r"store\.memory"):
        load_config(conf, {"HOME": str(tmp_path)})


def test_find_and_thread_print_every_hit_from_one_read_of_the_projections(
    big_store: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Plain output reads the listed columns in one query, never the log per hit."""
    calls: list[object] = []
    real = EventLog.read_at

    def counting(self: EventLog, *a: object, **k: object) -> object:
        calls.append(a)
        return real(self, *a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(EventLog, "read_at", counting)
    assert (
        main(["--store", str(big_store), "find", "list-id", "big.lists.example.org"], env={}) == 0
    )
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 20_000
    assert all(line.count("\t") == 2 and "of the quarterly review" in line for line in lines)
    ev = _events(40)[-1]
    assert main(["--store", str(big_store), "thread", ev.message_id], env={}) == 0
    out = capsys.readouterr().out.splitlines()
    assert any(ev.message_id in line for line in out)
    assert calls == []


def test_builders_out_of_memory_are_retried_one_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Builders at once ran out of memory (DuckDB's own error, raised here on the
    first try: a real one needs a store larger than a test): the tables are built
    again one at a time, and they are the tables a plain rebuild gives."""
    from projections.fold import bulk

    log = EventLog(tmp_path / "log", durable=False)
    log.append(_events(3000))
    want = duckdb.connect()
    rebuild(want, [log.read()])
    real, calls = bulk.build_tables, []

    def failing_once(con: duckdb.DuckDBPyConnection, builders: int) -> None:
        calls.append(builders)
        real(con, builders)  # (half-built tables: the retry must start over)
        if len(calls) == 1:
            raise duckdb.OutOfMemoryException("could not allocate block")

    monkeypatch.setattr(bulk, "build_tables", failing_once)
    have = duckdb.connect()
    assert rebuild(have, [log.read()], builders=3) == 3000
    assert calls == [3, 1]
    assert fingerprint(have) == fingerprint(want)


def test_a_fold_deleting_more_than_the_probes_cover_equals_a_replay(tmp_path: Path) -> None:
    """1,200 deletes in one batch: the rows, entries and nodes they remove are
    found by joins rather than index probes; the tables still equal a replay."""
    from stores.events import MessageDeleted

    store = MessageStore.open(tmp_path / "store")
    store.log.durable = False
    events = _events(1500)
    store.commit(events)
    store.commit(
        [
            MessageDeleted(
                run_id="scale-test",
                recorded_at=T0,
                message_id=e.message_id,
                actor="test",
                reason="bulk",
            )
            for e in events[100:1300]
        ]
    )
    assert store.verify(blobs=False) == []
    assert len(store.message_ids()) == 300
    store.close()

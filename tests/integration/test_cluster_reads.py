"""``mailledger --cluster DIR search|thread|show|query|stats|verify``: a cluster of
shards read through their snapshots answers as one store holding all its mail.

The mail is real (the notmuch corpora, read in place), spread over three shards
by file order, every seventh message also in the next shard (the same mail in
two accounts), so that threads cross shards; the single store beside it holds
every copy, added in the same order with the same clock readings."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pipeline.cli import main
from pipeline.cluster import init_cluster, newest_snapshot, open_catalog, publish_snapshot
from pipeline.cluster.reads import open_reads
from pipeline.store import MessageStore
from tests.conftest import CORPORA, StepClock

_FOLDERS = ("default", "threading", "duplicate")


@dataclass(frozen=True)
class Pair:
    """A cluster of three shards and one store holding the same copies."""

    cluster: Path
    single: Path


def _spread(corpus: Path, cluster: Path, single: Path) -> None:
    """Every message of ``_FOLDERS`` to shard i % 3 (every seventh one to the next
    shard too), and each copy to the single store right after, so that both read
    their clocks alike (the same ``indexed_at``: the same first copy wins)."""
    catalog, _ = init_cluster(cluster, 3, [])
    files = sorted(p for d in _FOLDERS for p in (corpus / d).rglob("*") if p.is_file())
    shard_clock, single_clock = StepClock(), StepClock()
    shards = [
        MessageStore.open(catalog.shard_path(s), clock=shard_clock, run_id="r")
        for s in catalog.shards
    ]
    one = MessageStore.open(single, clock=single_clock, run_id="r")
    try:
        for i, path in enumerate(files):
            raw, uidl = path.read_bytes(), str(path.relative_to(corpus))
            for k in [i % 3] + ([(i + 1) % 3] if i % 7 == 0 else []):
                shards[k].add(uidl, raw, source=f"account-{k}", folder="INBOX")
                one.add(uidl, raw, source=f"account-{k}", folder="INBOX")
        for store in shards:
            publish_snapshot(store)
    finally:
        for store in [*shards, one]:
            store.close()


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Pair:
    corpus = CORPORA / "notmuch"
    if not corpus.is_dir():
        pytest.skip(f"corpus folder absent: {corpus} (CI always has it)")
    where = tmp_path_factory.mktemp("cluster-reads")
    made = Pair(where / "cluster", where / "single")
    _spread(corpus, made.cluster, made.single)
    return made


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv), env={"HOME": "/nonexistent"})
    out, err = capsys.readouterr()
    return code, out, err


def _both(capsys: pytest.CaptureFixture[str], pair: Pair, *argv: str) -> tuple[str, str]:
    """The output of ``argv`` on the single store, then on the cluster (both exit 0)."""
    code, one, err = _cli(capsys, "--store", str(pair.single), *argv)
    assert code == 0, err
    code, many, err = _cli(capsys, "--cluster", str(pair.cluster), *argv)
    assert code == 0, err
    return one, many


def _rows(capsys: pytest.CaptureFixture[str], where: list[str], sql: str) -> list[Any]:
    code, out, err = _cli(capsys, *where, "query", sql, "--json")
    assert code == 0, err
    rows: list[Any] = json.loads(out)
    return rows


def test_the_spread_puts_shared_mail_and_cross_shard_replies_in_the_cluster(
    pair: Pair, capsys: pytest.CaptureFixture[str]
) -> None:
    """(What the other tests lean on: the cluster really is split.)"""
    cluster = ["--cluster", str(pair.cluster)]
    shared = _rows(capsys, cluster, "SELECT message_id, shards FROM messages WHERE len(shards) > 1")
    assert len(shared) >= 5
    crossing = _rows(
        capsys,
        cluster,
        "SELECT DISTINCT e.child FROM thread_edges e JOIN messages p ON p.message_id = e.parent"
        " WHERE NOT list_contains(p.shards, e.shard)",
    )
    assert len(crossing) >= 5  # replies whose parent only another shard holds


def test_query_views_answer_as_one_store_holding_all_the_mail(
    pair: Pair, capsys: pytest.CaptureFixture[str]
) -> None:
    single, cluster = ["--store", str(pair.single)], ["--cluster", str(pair.cluster)]
    cols = "* EXCLUDE (seq)"
    messages = f"SELECT {cols} FROM messages ORDER BY message_id"
    one = _rows(capsys, single, messages)
    many = _rows(capsys, cluster, messages)
    assert len(one) > 50
    assert [{k: v for k, v in r.items() if k not in ("shard", "shards")} for r in many] == one
    # the index entries and edges of the winning copies, every place, every event
    for sql in (
        "SELECT DISTINCT header, value, message_id FROM header_index ORDER BY ALL",
        "SELECT DISTINCT child, parent, kind FROM thread_edges ORDER BY ALL",
        "SELECT DISTINCT source, folder, uidl, sha256, message_id, seen_at, vanished"
        " FROM locations ORDER BY ALL",
        "SELECT type, message_id, source, recorded_at FROM events ORDER BY recorded_at",
        "SELECT message_id, headers FROM message_headers ORDER BY message_id",
    ):
        assert _rows(capsys, cluster, sql) == _rows(capsys, single, sql), sql
    # thread(id) joins the shards: the same members for every message's thread
    ids = [r["message_id"] for r in one]
    macro = "SELECT list(message_id ORDER BY message_id) AS ids FROM thread({})"
    for mid in ids[::3]:
        sql = macro.format("'<" + mid.replace("'", "''") + ">'")
        assert _rows(capsys, cluster, sql) == _rows(capsys, single, sql), mid
    # each shard's own tables by name
    per_shard = _rows(
        capsys,
        cluster,
        "SELECT (SELECT count(*) FROM shard_000.messages) + (SELECT count(*) FROM"
        " shard_001.messages) + (SELECT count(*) FROM shard_002.messages) AS n",
    )
    held = _rows(capsys, cluster, "SELECT sum(len(shards))::BIGINT AS n FROM messages")
    assert per_shard == held


@pytest.mark.parametrize(
    "query",
    ["*", "notmuch", "from:cworth", "subject:notmuch", "date:2009-11..2009-12", "thread OR reply"],
)
def test_search_counts_and_pages_equal_one_store(
    pair: Pair, capsys: pytest.CaptureFixture[str], query: str
) -> None:
    one, many = _both(capsys, pair, "search", query, "--output=count")
    assert int(one) > 0 and many == one
    for sort in ("newest", "oldest"):
        for page in (["--limit", "7"], ["--limit", "5", "--offset", "3"], []):
            one, many = _both(capsys, pair, "search", query, f"--sort={sort}", *page)
            assert many == one, (sort, page)
    # relevance: bm25 per shard (each shard's term statistics): the same matches, and
    # each shard's own order kept within the merge
    one, many = _both(capsys, pair, "search", query, "--sort=relevance", "--format=ids")
    assert sorted(many.split()) == sorted(one.split())


def test_thread_trees_equal_one_store_for_every_message(
    pair: Pair, capsys: pytest.CaptureFixture[str]
) -> None:
    with MessageStore.open(pair.single, create=False) as one, open_reads(pair.cluster) as many:
        ids = one.message_ids()
        for mid in ids:
            assert many.walk_thread(mid) == one.walk_thread(mid), mid
            assert [n.as_dict() for n in many.thread_tree(mid)] == [
                n.as_dict() for n in one.thread_tree(mid)
            ], mid
    one_out, many_out = _both(capsys, pair, "thread", f"<{ids[0]}>")
    assert many_out == one_out


def test_show_gives_the_winning_copy_from_its_shard(
    pair: Pair, capsys: pytest.CaptureFixture[str]
) -> None:
    shared = _rows(
        capsys,
        ["--cluster", str(pair.cluster)],
        "SELECT message_id, shard, shards FROM messages WHERE len(shards) > 1 ORDER BY 1",
    )
    for row in shared[:4]:
        one, many = _both(capsys, pair, "show", f"<{row['message_id']}>")
        assert many == one
        one, many = _both(capsys, pair, "show", row["message_id"], "--raw")
        assert many == one
        _, out, _ = _cli(
            capsys, "--cluster", str(pair.cluster), "show", row["message_id"], "--json"
        )
        assert json.loads(out)["shard"] == row["shard"] == row["shards"][0]
    code, _, err = _cli(capsys, "--cluster", str(pair.cluster), "show", "<no-such@id>")
    assert code == 1 and "no message" in err and "cluster" in err


def test_stats_sum_the_shards_and_count_each_message_once(
    pair: Pair, capsys: pytest.CaptureFixture[str]
) -> None:
    one, many = _both(capsys, pair, "stats", "--json")
    single, cluster = json.loads(one), json.loads(many)
    assert cluster["distinct_messages"] == single["messages"]
    assert cluster["events"] == single["events"]
    held = _rows(
        capsys,
        ["--cluster", str(pair.cluster)],
        "SELECT sum(len(shards))::BIGINT AS n FROM messages",
    )
    assert cluster["messages"] == held[0]["n"] > single["messages"]
    assert sorted(cluster["snapshots"]) == ["shard-000", "shard-001", "shard-002"]


def test_verify_checks_every_shard_and_names_the_damaged_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "cluster"
    catalog, _ = init_cluster(root, 2, [])
    for shard in catalog.shards:
        with MessageStore.open(catalog.shard_path(shard), clock=StepClock()) as store:
            store.add("u", f"Message-ID: <{shard}@x>\r\nSubject: s\r\n\r\nbody\r\n".encode())
    code, out, _ = _cli(capsys, "--cluster", str(root), "verify")
    assert code == 0 and out.startswith("ok: 2 events")
    blob = next((catalog.shard_path("shard-001") / "blobs").rglob("[0-9a-f]" * 2 + "/*"))
    blob.write_bytes(b"not the message")
    code, out, _ = _cli(capsys, "--cluster", str(root), "verify", "--json")
    report = json.loads(out)
    assert code == 1 and not report["ok"]
    assert report["problems"] and all(p.startswith("shard-001: ") for p in report["problems"])


def test_snapshots_carry_epoch_and_seq_and_the_newest_two_are_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "cluster"
    catalog, _ = init_cluster(root, 1, [])
    path = catalog.shard_path("shard-000")
    with MessageStore.open(path, clock=StepClock()) as store:
        store.take_epoch("the test's committer")
        made = []
        for n in range(4):
            store.add(f"u{n}", f"Message-ID: <m{n}@x>\r\nSubject: s{n}\r\n\r\nb\r\n".encode())
            made.append(publish_snapshot(store))
        again = publish_snapshot(store)  # (nothing new: nothing copied)
        assert again == made[-1]
        held = made[-1]
        with open_reads(root) as reads:  # a reader holds the newest one ...
            store.add("u9", b"Message-ID: <m9@x>\r\nSubject: s9\r\n\r\nb\r\n")
            publish_snapshot(store)
            store.add("u10", b"Message-ID: <m10@x>\r\nSubject: s10\r\n\r\nb\r\n")
            publish_snapshot(store)
            assert held.path.exists()  # ... kept while it reads, though two are newer
            assert reads.query("SELECT count(*) AS n FROM messages").to_pylist() == [{"n": 4}]
        publish_snapshot(store)  # (nothing new; the old one, let go, is removed now)
        store.add("u11", b"Message-ID: <m11@x>\r\nSubject: s11\r\n\r\nb\r\n")
        # a publish at most every hour: the newest is not an hour old, nothing copied
        assert publish_snapshot(store, min_interval=3600).seq == 6
    assert [(s.epoch, s.seq) for s in made] == [(1, 1), (1, 2), (1, 3), (1, 4)]
    left = sorted(p.name for p in (path / "snapshots").iterdir())
    assert left == ["1-5", "1-6"]
    code, out, _ = _cli(capsys, "cluster", "status", str(root), "--json")
    shard = json.loads(out)["shards"][0]
    assert code == 0 and shard["seq"] == 7 and shard["snapshot"]["seq"] == 6
    assert shard["snapshot"]["epoch"] == 1
    code, out, _ = _cli(capsys, "cluster", "status", str(root))
    assert out.splitlines()[0].split()[:5] == [
        "shard",
        "accounts",
        "messages",
        "events",
        "snapshot",
    ]


def test_cluster_snapshot_publishes_every_shard_and_reads_wait_for_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "cluster"
    catalog, _ = init_cluster(root, 2, [])
    with MessageStore.open(catalog.shard_path("shard-001"), clock=StepClock()) as store:
        store.add("u", b"Message-ID: <a@x>\r\nSubject: hello\r\n\r\nbody words\r\n")
    code, _, err = _cli(capsys, "--cluster", str(root), "search", "hello")
    assert code == 1 and "no snapshot yet" in err and "cluster snapshot" in err
    code, out, _ = _cli(capsys, "cluster", "snapshot", str(root), "--json")
    assert code == 0 and [s["seq"] for s in json.loads(out)] == [0, 1]
    assert newest_snapshot(catalog.shard_path("shard-001")) is not None
    # a writer holds the live projection file of shard-001 (as a fold does, in another
    # process): a cluster read still answers at once, from the snapshots
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from pipeline.store import MessageStore;"
            f" s = MessageStore.open({str(catalog.shard_path('shard-001'))!r}, create=False);"
            " h = s.projector.hold(); h.__enter__(); s.projector.writer();"
            " print('held', flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        reads = subprocess.run(
            [sys.executable, "-m", "pipeline.cli", "--cluster", str(root), "search", "words",
             "--format=ids"],
            capture_output=True, text=True, timeout=20,
            cwd=Path(__file__).resolve().parents[2],
        )  # fmt: skip
        assert reads.returncode == 0, reads.stderr
        assert reads.stdout == "a@x\n"
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)


def test_commands_a_cluster_does_not_serve_yet_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "cluster"
    init_cluster(root, 2, [])  # (one shard is read as the store it is: see test_cluster_sync)
    for argv in (["import", "maildir", str(tmp_path)], ["find", "subject", "x"], ["replay"]):
        code, _, err = _cli(capsys, "--cluster", str(root), *argv)
        assert code == 2 and "not supported with --cluster yet" in err, argv
    code, _, err = _cli(capsys, "--cluster", str(root), "query", "select 1", "--as-of", "1")
    assert code == 2 and "--as-of" in err
    assert _cli(capsys, "cluster", "snapshot", str(root))[0] == 0
    code, _, err = _cli(capsys, "--cluster", str(root), "search", "*", "--output=threads")
    assert code == 2 and "--output=threads" in err
    assert open_catalog(root).shards == ("shard-000", "shard-001")  # (nothing was written)

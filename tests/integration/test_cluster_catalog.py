"""``mailledger cluster init|status``: a directory of shards and the catalog that
puts each configured account on one of them, statically."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.cli import main
from pipeline.cluster import open_catalog
from pipeline.store import MessageStore
from tests.conftest import StepClock


def _config(tmp_path: Path, names: list[str]) -> Path:
    text = "".join(
        f'[accounts.{n}]\ntype = "imap"\nhost = "127.0.0.1"\nusername = "{n}"\n'
        f'password_env = "PW_{n.upper()}"\n\n'
        for n in names
    )
    path = tmp_path / f"config-{len(names)}.toml"
    path.write_text(text)
    return path


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv), env={"HOME": "/nonexistent"})
    out, err = capsys.readouterr()
    return code, out, err


def test_init_makes_each_shard_a_store_and_spreads_the_accounts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "cluster"
    cfg = _config(tmp_path, ["a1", "a2", "a3", "a4", "a5"])
    code, out, _ = _cli(capsys, "cluster", "init", str(root), "--shards", "3", "--config", str(cfg))
    assert code == 0, out
    catalog = open_catalog(root)
    assert catalog.shards == ("shard-000", "shard-001", "shard-002")
    assert [len(catalog.accounts_of(s)) for s in catalog.shards] == [2, 2, 1]
    assert "a5 -> shard-001" in out and "5 accounts (5 added)" in out
    for shard in catalog.shards:  # a complete store each, opened as any other
        with MessageStore.open(catalog.shard_path(shard), create=False, clock=StepClock()) as s:
            assert s.message_ids() == []


def test_new_accounts_go_to_the_lightest_shard_and_nobody_moves(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "cluster"
    first = _config(tmp_path, ["a1", "a2", "a3"])
    assert (
        _cli(capsys, "cluster", "init", str(root), "--shards", "4", "--config", str(first))[0] == 0
    )
    before = open_catalog(root)
    more = _config(tmp_path, ["a1", "a2", "a3", "b1", "b2"])
    assert _cli(capsys, "cluster", "init", str(root), "--config", str(more))[0] == 0
    after = open_catalog(root)
    assert {a: after.accounts[a] for a in before.accounts} == before.accounts
    assert after.accounts["b1"] == "shard-003"  # the one shard with none
    assert after.generation == before.generation + 1
    # again: nothing new, nothing changes (not even the generation)
    assert _cli(capsys, "cluster", "init", str(root), "--config", str(more))[0] == 0
    assert open_catalog(root) == after


def test_a_cluster_is_not_resharded_and_a_plain_directory_is_not_taken(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "cluster"
    assert _cli(capsys, "cluster", "init", str(root), "--shards", "2")[0] == 0
    code, _, err = _cli(capsys, "cluster", "init", str(root), "--shards", "3")
    assert code == 2 and "not split or merged" in err
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    code, _, err = _cli(capsys, "cluster", "init", str(other), "--shards", "2")
    assert code == 2 and "is not a mailledger cluster" in err
    code, _, err = _cli(capsys, "cluster", "status", str(tmp_path / "nothing"))
    assert code == 1 and "no mailledger cluster here" in err


def test_status_shows_each_shards_events_and_writer_epoch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "cluster"
    cfg = _config(tmp_path, ["a1", "a2"])
    assert _cli(capsys, "cluster", "init", str(root), "--shards", "2", "--config", str(cfg))[0] == 0
    shard = open_catalog(root).shard_path("shard-001")
    with MessageStore.open(shard, create=False, clock=StepClock()) as store:
        store.take_epoch("the committer of shard-001")
        store.add("u1", b"Message-ID: <x@y>\r\nSubject: s\r\n\r\nbody\r\n")
    code, out, _ = _cli(capsys, "cluster", "status", str(root), "--json")
    assert code == 0
    shards = {s["shard"]: s for s in json.loads(out)["shards"]}
    assert shards["shard-000"] == {
        "shard": "shard-000", "accounts": 1, "epoch": 0, "holder": "", "seq": 0, "messages": 0,
        "snapshot": None,
    }  # fmt: skip
    assert shards["shard-001"]["epoch"] == 1 and shards["shard-001"]["seq"] == 1
    assert shards["shard-001"]["holder"] == "the committer of shard-001"
    code, out, _ = _cli(capsys, "cluster", "status", str(root))
    assert code == 0 and "the committer of shard-001" in out
    assert out.splitlines()[0].split()[:4] == ["shard", "accounts", "messages", "events"]


def test_the_single_store_commands_never_load_the_cluster(tmp_path: Path) -> None:
    """The embedded store path pays nothing for clusters (nor for Dask, deltalake)."""
    store, maildir = tmp_path / "s", Path(__file__).resolve().parents[2] / "fixtures/maildir"
    probe = (
        "import sys; from pipeline.cli import main;"
        f" codes = [main(['--store', {str(store)!r}, *a]) for a in"
        f" (['import', 'maildir', {str(maildir)!r}], ['search', 'plan'], ['stats'])];"
        " print(codes, sorted(m for m in sys.modules"
        " if m.split('.')[0] in ('dask', 'distributed', 'deltalake')"
        " or m.startswith('pipeline.cluster')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=tmp_path
    )
    assert done.stdout.splitlines()[-1] == "[0, 0, 0] []"

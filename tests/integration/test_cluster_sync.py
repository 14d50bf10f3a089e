"""``mailledger --cluster DIR sync``: one Dask task per account into its shard, on
a real embedded Dask cluster against the real Dovecot; the shards together hold
what one store syncing the same accounts holds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pipeline.cluster import open_catalog
from pipeline.store import MessageStore
from tests.conftest import StepClock

pytest.importorskip("distributed", reason="the cluster extra (pip install '.[cluster]')")

REPO = Path(__file__).resolve().parents[2]


def _mail(i: int, *, to: str = "me@example.org") -> bytes:
    return (
        f"From: sender{i}@example.org\r\nTo: {to}\r\nSubject: cluster {i}\r\n"
        f"Date: Mon, 0{1 + i % 9} Jun 2026 10:00:00 +0000\r\n"
        f"Message-ID: <c{i}@example.org>\r\n\r\nbody {i}\r\n"
    ).encode()


def _ml(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pipeline", *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=600,
        check=False,
    )


@pytest.fixture
def accounts(dovecot: Any, tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """Four accounts on three servers' users: two of them the same mailbox (the same
    mail in two accounts: duplicates across shards)."""
    for user, first in (("gmail", 0), ("fastmail", 100), ("plain", 200)):
        dovecot.reset_user(user)
        dovecot.user(user).bulk_maildir("INBOX", [_mail(first + i) for i in range(30)])
    dovecot.user("plain").save("INBOX", _mail(0))  # gmail's first message, here too
    config = tmp_path / "config.toml"
    config.write_text(
        dovecot.account_toml("gmail", name="a-gmail")
        + dovecot.account_toml("fastmail", name="b-fastmail")
        + dovecot.account_toml("plain", name="c-plain")
        + dovecot.account_toml("gmail", name="d-gmail-again")
    )
    env = {**os.environ, **dovecot.password_env(), "HOME": str(tmp_path)}
    env.pop("MAILLEDGER_STORE", None)
    return config, env


def _ids(root: Path) -> set[str]:
    with MessageStore.open(root, create=False, clock=StepClock()) as store:
        return set(store.message_ids())


def _seen_events(root: Path) -> list[tuple[Any, ...]]:
    with MessageStore.open(root, create=False, clock=StepClock()) as store:
        rows = store.query(
            "SELECT source, folder, uidvalidity, uid FROM events WHERE type = 'message-seen'"
        ).to_pylist()
    return sorted(tuple(r.values()) for r in rows)


def test_a_cluster_sync_puts_each_account_in_its_shard_once(
    accounts: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    config, env = accounts
    root = tmp_path / "cluster"
    assert _ml(env, "cluster", "init", str(root), "--shards", "2").returncode == 0
    done = _ml(
        env, "--cluster", str(root), "sync", "--config", str(config), "--apply",
        "--local-workers", "2", "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert sorted(report["accounts"]) == ["a-gmail", "b-fastmail", "c-plain", "d-gmail-again"]
    assert report["balanced"] and report["exit_code"] == 0
    catalog = open_catalog(root)  # the accounts the catalog had not seen: on the lightest
    assert [len(catalog.accounts_of(s)) for s in catalog.shards] == [2, 2]
    assert "new account a-gmail -> shard-000" in done.stderr

    # each shard holds its accounts' mail, each location once
    by_shard = {s: _seen_events(catalog.shard_path(s)) for s in catalog.shards}
    for shard, events in by_shard.items():
        assert len(events) == len(set(events))
        assert {e[0] for e in events} == set(catalog.accounts_of(shard))
    held = set().union(*(_ids(catalog.shard_path(s)) for s in catalog.shards))

    # the run published each shard's snapshot: --cluster reads answer as one store
    assert sorted(report["snapshots"]) == ["shard-000", "shard-001"]

    # one store that synced the same accounts holds the same messages
    single = tmp_path / "single"
    alone = _ml(env, "--store", str(single), "sync", "--config", str(config), "--apply")
    assert alone.returncode == 0, alone.stderr
    assert held == _ids(single) and len(held) == 90
    count = _ml(env, "--cluster", str(root), "search", "*", "--output=count")
    assert count.returncode == 0 and count.stdout.strip() == "90", count.stderr

    # a second run finds nothing new and writes nothing but what a plain idle sync does
    before = {s: len(by_shard[s]) for s in catalog.shards}
    again = _ml(env, "--cluster", str(root), "sync", "--config", str(config), "--apply")
    assert again.returncode == 0, again.stderr
    assert {s: len(_seen_events(catalog.shard_path(s))) for s in catalog.shards} == before
    assert "new=0" in again.stdout
    assert again.stderr == ""  # (Dask's own log lines: only under --debug)


def test_each_task_commits_under_its_accounts_writer_epoch(
    accounts: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    """A task takes its account's epoch (a second attempt fences the first); the
    shard's own epoch is not touched, so tasks of one shard never fence each other."""
    config, env = accounts
    root = tmp_path / "cluster"
    assert _ml(env, "cluster", "init", str(root), "--shards", "1").returncode == 0
    for _ in range(2):  # (--local-workers 0: the tasks in this process, no Dask)
        done = _ml(
            env, "--cluster", str(root), "sync", "--config", str(config), "--apply",
            "--local-workers", "0",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    shard = open_catalog(root).shard_path("shard-000")
    with MessageStore.open(shard, create=False, clock=StepClock()) as store:
        fence = store.log.fence
        assert fence.current().epoch == 0
        for account in ("a-gmail", "b-fastmail", "c-plain", "d-gmail-again"):
            taken = fence.current(account)
            assert taken.epoch == 2 and f"of {account}" in taken.holder


def test_a_one_shard_cluster_is_synced_and_read_as_the_store_it_is(
    accounts: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    """One shard costs nothing: its sync is a plain sync of the shard (no Dask, no
    epochs, the idle fast path), its reads the store's own (no snapshot)."""
    config, env = accounts
    root = tmp_path / "cluster"
    assert _ml(env, "cluster", "init", str(root), "--shards", "1").returncode == 0
    done = _ml(env, "--cluster", str(root), "sync", "--config", str(config), "--apply")
    assert done.returncode == 0, done.stderr
    assert "new account a-gmail -> shard-000" in done.stdout
    shard = open_catalog(root).shard_path("shard-000")
    assert not (shard / "snapshots").exists() and not (shard / "fence" / "epochs").exists()
    assert len(open_catalog(root).accounts) == 4
    count = _ml(env, "--cluster", str(root), "search", "*", "--output=count")
    assert count.returncode == 0 and count.stdout.strip() == "90", count.stderr
    idle = _ml(env, "--cluster", str(root), "sync", "--config", str(config), "--apply")
    assert idle.returncode == 0 and "new=0" in idle.stdout

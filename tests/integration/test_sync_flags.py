"""IMAP flags against a real Dovecot on loopback: the sync records the FLAGS it
fetches with each message (read only: it sets none), a delta looks only above the
cursor, and a reconcile records a ``flags-changed`` for each known message whose
flags changed on the server, which search and ``--as-of`` then follow."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pipeline.cli import main
from testkit.cli import SyncEnv

pytestmark = pytest.mark.usefixtures("dovecot")


def _msg(i: int) -> bytes:
    return (
        f"From: sender@flags.example\r\nTo: me@flags.example\r\nSubject: message {i}\r\n"
        f"Date: Mon, 0{1 + i} Jun 2026 10:00:00 +0200\r\n"
        f"Message-ID: <m{i}@flags.example>\r\n\r\nbody {i}\r\n"
    ).encode()


@pytest.fixture
def account(imap_user: Callable[[str], Any], dovecot: Any, tmp_path: Path) -> tuple[Any, SyncEnv]:
    user = imap_user("fastmail")
    return user, SyncEnv(tmp_path, dovecot, {"fastmail": {"folders": ["INBOX"]}})


def ids(capsys: pytest.CaptureFixture[str], store: Path, query: str, *opts: str) -> set[str]:
    code = main(["--store", str(store), "search", query, "--format=ids", *opts], env={})
    out, err = capsys.readouterr()
    assert code == 0, err
    return {line.split("@")[0] for line in out.split()}


def flags_on_record(env: SyncEnv, kind: str) -> dict[str, list[str]]:
    with env.open() as s:
        rows = s.query(
            "SELECT message_id, flags FROM events WHERE type = ? ORDER BY seq", [kind]
        ).to_pylist()
    return {r["message_id"].split("@")[0]: r["flags"] for r in rows}


def test_sync_records_the_flags_it_fetches_and_sets_none(
    account: tuple[Any, SyncEnv], capsys: pytest.CaptureFixture[str]
) -> None:
    user, env = account
    user.save("INBOX", _msg(0), flags=["\\Seen"])
    user.save("INBOX", _msg(1), flags=["\\Flagged", "$label1"])
    user.save("INBOX", _msg(2))
    before = user.flags("INBOX")
    # the first sync into an empty store: bodies at once, their flags fetched beside
    code, report = env.sync("--apply", capsys=capsys)
    assert code == 0, report
    assert flags_on_record(env, "message-seen") == {
        "m0": ["\\Seen"],
        "m1": ["$label1", "\\Flagged"],
        "m2": [],
    }
    # a delta into a store holding mail: the flags come with the envelope
    user.save("INBOX", _msg(3), flags=["\\Answered", "\\Seen"])
    code, report = env.sync("--apply", capsys=capsys)
    assert code == 0, report
    assert flags_on_record(env, "message-seen")["m3"] == ["\\Answered", "\\Seen"]
    after = user.flags("INBOX")
    assert {uid: after[uid] for uid in before} == before  # the sync set no flag

    assert ids(capsys, env.store, "is:unread") == {"m1", "m2"}
    assert ids(capsys, env.store, "is:flagged") == {"m1"}
    assert ids(capsys, env.store, "flag:replied") == {"m3"}


def test_a_flag_change_on_the_server_is_recorded_by_a_reconcile_not_by_a_delta(
    account: tuple[Any, SyncEnv], capsys: pytest.CaptureFixture[str]
) -> None:
    user, env = account
    for i in range(3):
        user.save("INBOX", _msg(i))
    assert env.sync("--apply", capsys=capsys)[0] == 0
    with env.open() as s:
        last = s.log.last_seq()

    client = user.imap()
    try:
        client.select_folder("INBOX")
        client.add_flags([2], ["\\Seen"])
        client.add_flags([3], ["\\Flagged"])
    finally:
        client.logout()

    code, report = env.sync("--apply", capsys=capsys)  # a delta: above the cursor only
    assert code == 0 and flags_on_record(env, "flags-changed") == {}

    code, report = env.sync("--apply", "--reconcile", capsys=capsys)
    inbox = report["accounts"]["fastmail"]["folders"]["INBOX"]
    assert code == 0 and inbox["flags_changed"] == 2, report
    assert flags_on_record(env, "flags-changed") == {"m1": ["\\Seen"], "m2": ["\\Flagged"]}
    assert ids(capsys, env.store, "is:unread") == {"m0", "m2"}
    assert ids(capsys, env.store, "is:flagged") == {"m2"}
    # as the store stood before the reconcile: every message unread
    assert ids(capsys, env.store, "is:unread", f"--as-of={last}") == {"m0", "m1", "m2"}

    code, report = env.sync("--apply", "--reconcile", capsys=capsys)  # nothing changed since
    assert code == 0 and report["accounts"]["fastmail"]["folders"]["INBOX"]["flags_changed"] == 0

    # expunged on the server: the archive keeps it, with the flags it last had there
    user.expunge("INBOX", 3)
    code, report = env.sync("--apply", "--reconcile", capsys=capsys)
    assert code == 0 and report["accounts"]["fastmail"]["folders"]["INBOX"]["vanished"] == 1
    assert ids(capsys, env.store, "is:flagged") == {"m2"}
    assert ids(capsys, env.store, "is:flagged is:vanished") == {"m2"}
    code = main(["--store", str(env.store), "verify", "--json"], env={})
    out, _ = capsys.readouterr()
    assert code == 0, json.loads(out)


def test_flags_come_along_when_the_workers_fetch_the_bodies(
    account: tuple[Any, SyncEnv], capsys: pytest.CaptureFixture[str]
) -> None:
    """Above ``WORKER_FETCH_MIN`` bodies, worker processes fetch them on their own
    connections: the flags still go with each message, on a first sync into an
    empty store (no envelopes) and on a later one (envelopes first)."""
    from pipeline.sync.fetch import WORKER_FETCH_MIN

    user, env = account
    many = WORKER_FETCH_MIN + 20
    user.bulk_maildir("INBOX", [_msg(i) for i in range(many)], flags="FS")
    code, report = env.sync("--apply", "--workers", "2", capsys=capsys)
    assert code == 0 and report["accounts"]["fastmail"]["folders"]["INBOX"]["new"] == many
    user.bulk_maildir("INBOX", [_msg(many + i) for i in range(many)], flags="R")
    code, report = env.sync("--apply", "--workers", "2", capsys=capsys)
    assert code == 0 and report["accounts"]["fastmail"]["folders"]["INBOX"]["new"] == many
    with env.open() as s:
        rows = s.query(
            "SELECT flags, count(*) AS n FROM events WHERE type = 'message-seen' GROUP BY flags"
        ).to_pylist()
    shown = {tuple(r["flags"]): r["n"] for r in rows}
    assert shown == {("\\Flagged", "\\Seen"): many, ("\\Answered",): many}
    assert len(ids(capsys, env.store, "is:unread")) == many

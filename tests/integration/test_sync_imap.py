"""`mailledger sync` against a real Dovecot on loopback (IMAP issue, behaviours 1-12).

What crossed the wire is read from Dovecot's own per-session logout lines
(`body_count`, `body_bytes`) and its mail_log events, never from mailledger's
counters.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from pipeline.cli import main
from pipeline.store import MessageStore
from projections.snapshot import SNAPSHOT_NAME
from testkit.cli import SyncEnv

pytestmark = pytest.mark.usefixtures("dovecot")


def _msg(i: int, *, domain: str = "sync.example", body: str = "", subject: str = "") -> bytes:
    return (
        f"From: sender{i % 5}@{domain}\r\nTo: me@{domain}\r\n"
        f"Subject: {subject or f'message {i}'}\r\n"
        f"Date: Mon, 0{1 + i % 9} Jun 2026 10:00:00 +0200\r\n"
        f"Message-ID: <m{i}@{domain}>\r\n\r\n{body or f'body of message {i}'}\r\n"
    ).encode()


@pytest.fixture
def fastmail(imap_user: Callable[[str], Any], dovecot: Any, tmp_path: Path) -> tuple[Any, SyncEnv]:
    user = imap_user("fastmail")
    return user, SyncEnv(
        tmp_path, dovecot, {"fastmail": {"folders": ["INBOX", "\\Archive", "\\Sent"]}}
    )


def _folder(report: dict[str, Any], account: str, folder: str) -> dict[str, Any]:
    return report["accounts"][account]["folders"][folder]


def test_dry_run_is_the_default_and_writes_nothing(
    fastmail: tuple[Any, SyncEnv], capsys: pytest.CaptureFixture[str]
) -> None:
    user, env = fastmail
    for i in range(3):
        user.save("INBOX", _msg(i))
    mark = env.dv.log_mark()
    code, report = env.sync(capsys=capsys)
    assert code == 0 and report["applied"] is False
    assert _folder(report, "fastmail", "INBOX")["would_fetch"] == 3
    assert not env.store.exists()
    [session] = user.sessions_since(mark)
    assert session.body_count == 0


def test_measure_prints_status_and_touches_no_store(
    fastmail: tuple[Any, SyncEnv], capsys: pytest.CaptureFixture[str]
) -> None:
    user, env = fastmail
    user.save("INBOX", _msg(1))
    code, report = env.sync("--measure", capsys=capsys)
    assert code == 0
    assert _folder(report, "fastmail", "INBOX")["would_fetch"] == 1
    assert not env.store.exists()


def test_full_then_idle_second_run_fetches_no_body_on_the_wire(
    fastmail: tuple[Any, SyncEnv], capsys: pytest.CaptureFixture[str]
) -> None:
    user, env = fastmail
    for i in range(5):
        user.save("INBOX", _msg(i))
    user.save("Archive", _msg(10))
    code, report = env.sync("--apply", capsys=capsys)
    inbox = _folder(report, "fastmail", "INBOX")
    assert code == 0, report
    assert (inbox["mode"], inbox["new"], inbox["bodies"], inbox["cursor_to"]) == ("full", 5, 5, 5)
    with env.open() as s:
        assert len(s.message_ids()) == 6

    mark = env.dv.log_mark()
    code, report = env.sync("--apply", capsys=capsys)
    inbox = _folder(report, "fastmail", "INBOX")
    assert code == 0
    assert (inbox["mode"], inbox["new"], inbox["bodies"]) == ("delta", 0, 0)
    assert (inbox["cursor_from"], inbox["cursor_to"]) == (5, 5)
    [session] = user.sessions_since(mark)
    assert session.body_count == 0 and session.body_bytes == 0


def _count_holds(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Every hold of the projection file from now on, True for a read-only one."""
    from stores import db

    holds: list[bool] = []
    connect = db.connect

    def counting(path: Path, *, read_only: bool, timeout: float = 30.0) -> Any:
        holds.append(read_only)
        return connect(path, read_only=read_only, timeout=timeout)

    monkeypatch.setattr(db, "connect", counting)
    return holds


def _count_holds_messages(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Each time a sync asks the store whether it holds any mail, from now on."""
    asked: list[str] = []
    holds_messages = MessageStore.holds_messages

    def asking(store: MessageStore) -> bool:
        asked.append("holds_messages")
        return holds_messages(store)

    monkeypatch.setattr(MessageStore, "holds_messages", asking)
    return asked


def test_an_idle_sync_reads_the_projections_only_as_it_must_and_never_writes_them(
    fastmail: tuple[Any, SyncEnv],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a cron job's idle sync holds the projection file per question it asks: it
    # takes no write hold (that waits for every other reader) and does not ask
    # whether the store holds mail when there is no UID to take
    user, env = fastmail
    for i in range(3):
        user.save("INBOX", _msg(i))
    assert env.sync("--apply", capsys=capsys)[0] == 0
    (env.store / SNAPSHOT_NAME).unlink()  # the full path (with it, no hold at all)
    holds, asked = _count_holds(monkeypatch), _count_holds_messages(monkeypatch)
    code, report = env.sync("--apply", capsys=capsys)
    assert code == 0 and _folder(report, "fastmail", "INBOX")["new"] == 0
    assert holds and all(holds)  # read-only, every one
    assert asked == []


def test_an_idle_sync_holds_the_projections_once_a_folder(
    fastmail: tuple[Any, SyncEnv],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # each folder's cursor and the sample of held UIDs checked for reassignment are
    # read in one hold: each hold attaches the file, checks it is current and detaches it
    user, env = fastmail
    for i in range(12):
        user.save("INBOX", _msg(i))
    assert env.sync("--apply", capsys=capsys)[0] == 0
    (env.store / SNAPSHOT_NAME).unlink()  # the full path (with it, no hold at all)
    holds = _count_holds(monkeypatch)
    code, report = env.sync("--apply", capsys=capsys)
    inbox = _folder(report, "fastmail", "INBOX")
    assert code == 0 and (inbox["mode"], inbox["new"]) == ("delta", 0)
    assert inbox["bodies"] == 0  # the sample matched its envelopes: no body fetched
    folders = report["accounts"]["fastmail"]["folders"]
    assert len(folders) >= 2 and holds == [True] * len(folders)  # one read hold a folder


def test_a_delta_of_a_synced_folder_takes_envelopes_without_asking_if_the_store_is_empty(
    fastmail: tuple[Any, SyncEnv],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # only a folder's first sync (no cursor) may skip the envelopes for an empty
    # store; a delta reads them anyway, and the question would cost a hold
    user, env = fastmail
    for i in range(3):
        user.save("INBOX", _msg(i))
    assert env.sync("--apply", capsys=capsys)[0] == 0
    user.save("INBOX", _msg(3))
    asked = _count_holds_messages(monkeypatch)
    code, report = env.sync("--apply", capsys=capsys)
    inbox = _folder(report, "fastmail", "INBOX")
    assert code == 0 and (inbox["mode"], inbox["new"], inbox["bodies"]) == ("delta", 1, 1)
    assert asked == []
    with env.open() as s:
        assert len(s.message_ids()) == 4


def test_uid_star_trap_cursor_at_highest_uid_reports_zero_new(
    fastmail: tuple[Any, SyncEnv], capsys: pytest.CaptureFixture[str]
) -> None:
    user, env = fastmail
    for i in range(3):
        user.save("INBOX", _msg(i))
    env.sync("--apply", capsys=capsys)
    # Dovecot answers `UID SEARCH UID 4:*` with UID 3: the client must filter it out.
    with env.dv.imap("fastmail") as c:
        c.select_folder("INBOX", readonly=True)
        assert c.search(["UID", "4:*"]) == [3]
    mark = env.dv.log_mark()
    code, report = env.sync("--apply", "--reconcile", capsys=capsys)
    assert code == 0 and _folder(report, "fastmail", "INBOX")["new"] == 0
    code, report = env.sync("--apply", capsys=capsys)
    assert _folder(report, "fastmail", "INBOX")["new"] == 0
    assert all(s.body_count == 0 for s in user.sessions_since(mark, 2))


def test_one_delivered_message_costs_exactly_one_body(
    fastmail: tuple[Any, SyncEnv], capsys: pytest.CaptureFixture[str]
) -> None:
    user, env = fastmail
    for i in range(4):
        user.save("INBOX", _msg(i))
    env.sync("--apply", capsys=capsys)
    raw = _msg(99)
    user.save("INBOX", raw)
    mark = env.dv.log_mark()
    code, report = env.sync("--apply", capsys=capsys)
    inbox = _folder(report, "fastmail", "INBOX")
    assert code == 0 and (inbox["new"], inbox["bodies"], inbox["cursor_to"]) == (1, 1, 5)
    # (this run's session only: the first sync's logout may be logged after the mark)
    [session] = user.sessions_since(mark)
    assert session.body_count == 1
    assert session.body_bytes == len(raw)


def test_initial_new_only_records_uidnext_and_fetches_nothing(
    imap_user: Callable[[str], Any],
    dovecot: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    user = imap_user("fastmail")
    env = SyncEnv(tmp_path, dovecot, {"fastmail": {"folders": ["INBOX"], "initial": "new-only"}})
    for i in range(3):
        user.save("INBOX", _msg(i))
    mark = dovecot.log_mark()
    code, report = env.sync("--apply", capsys=capsys)
    inbox = _folder(report, "fastmail", "INBOX")
    assert code == 0 and (inbox["mode"], inbox["new"], inbox["cursor_to"]) == ("new-only", 0, 3)
    assert user.sessions_since(mark)[0].body_count == 0
    user.save("INBOX", _msg(7))
    code, report = env.sync("--apply", capsys=capsys)
    assert _folder(report, "fastmail", "INBOX")["bodies"] == 1
    with env.open() as s:
        assert s.message_ids() == ["m7@sync.example"]


def test_initial_since_uses_server_internaldate(
    imap_user: Callable[[str], Any],
    dovecot: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    user = imap_user("fastmail")
    env = SyncEnv(
        tmp_path, dovecot, {"fastmail": {"folders": ["INBOX"], "initial": "since:2026-06-01"}}
    )
    user.save("INBOX", _msg(1), when=datetime(2026, 5, 1, tzinfo=UTC))
    user.save("INBOX", _msg(2), when=datetime(2026, 6, 2, tzinfo=UTC))
    user.save("INBOX", _msg(3), when=datetime(2026, 7, 1, tzinfo=UTC))
    code, report = env.sync("--apply", capsys=capsys)
    inbox = _folder(report, "fastmail", "INBOX")
    assert code == 0 and (inbox["mode"], inbox["new"], inbox["cursor_to"]) == ("since", 2, 3)
    with env.open() as s:
        assert s.message_ids() == ["m2@sync.example", "m3@sync.example"]


def test_uidvalidity_change_alarms_rescans_and_downloads_no_known_body(
    fastmail: tuple[Any, SyncEnv], capsys: pytest.CaptureFixture[str]
) -> None:
    user, env = fastmail
    for i in range(4):
        user.save("INBOX", _msg(i))
    env.sync("--apply", capsys=capsys)
    old = user.status("INBOX")["uidvalidity"]
    new = env.dv.lose_state("fastmail", "INBOX")
    assert new != old
    mark = env.dv.log_mark()
    code, report = env.sync("--apply", capsys=capsys)
    inbox = _folder(report, "fastmail", "INBOX")
    assert code == 3
    assert any("UIDVALIDITY" in a for a in report["alarms"])
    assert (inbox["mode"], inbox["bodies"], inbox["known"]) == ("full", 0, 4)
    assert user.sessions_since(mark)[0].body_count == 0
    with env.open() as s:
        moves = s.cursor_log("fastmail", "INBOX")
        assert [m["type"] for m in moves] == ["cursor-moved", "uidvalidity-changed", "cursor-moved"]
        assert (moves[1]["old_uidvalidity"], moves[1]["new_uidvalidity"]) == (old, new)
        assert s.cursor("fastmail", "INBOX")["uidvalidity"] == new
        assert len(s.message_ids()) == 4
    code, _ = env.sync("--apply", capsys=capsys)
    assert code == 0  # the alarm was for that run; the next one is quiet


def test_uidnext_below_cursor_is_a_folder_error_and_the_cursor_stays(
    imap_user: Callable[[str], Any],
    dovecot: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    user = imap_user("fastmail")
    env = SyncEnv(tmp_path, dovecot, {"fastmail": {"folders": ["INBOX", "\\Archive"]}})
    for i in range(3):
        user.save("INBOX", _msg(i))
    env.sync("--apply", capsys=capsys)
    # A broken server: same UIDVALIDITY, but UIDNEXT went backwards (state lost, old number
    # forced back). The cursor says 3; the server now says UIDNEXT 2.
    uv = user.status("INBOX")["uidvalidity"]
    md = env.dv.maildir("fastmail", "INBOX")
    for p in [*(md / "cur").iterdir(), *(md / "new").iterdir()]:
        if b"<m0@sync.example>" not in p.read_bytes():
            p.unlink()
    env.dv.lose_state("fastmail", "INBOX")  # renumbered: one message, UIDNEXT 2
    env.dv.set_uidvalidity("fastmail", "INBOX", uv)
    assert user.status("INBOX")["uidnext"] == 2
    user.save("Archive", _msg(50))
    code, report = env.sync("--apply", capsys=capsys)
    inbox = _folder(report, "fastmail", "INBOX")
    assert code == 1
    assert inbox["error"] and "UIDNEXT" in inbox["error"]
    assert any("UIDNEXT" in a for a in report["alarms"])
    assert _folder(report, "fastmail", "Archive")["bodies"] == 1
    with env.open() as s:
        assert s.cursor("fastmail", "INBOX")["last_uid"] == 3


def test_moved_message_and_same_message_in_two_accounts_cost_an_envelope(
    imap_user: Callable[[str], Any],
    dovecot: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fm = imap_user("fastmail")
    gm = imap_user("gmail")
    env = SyncEnv(
        tmp_path,
        dovecot,
        {
            "fastmail": {"folders": ["INBOX", "\\Archive"]},
            "gmail": {"folders": ["\\All"]},
        },
    )
    raw = _msg(1, body="x" * 3000)
    fm.save("INBOX", raw)
    env.sync("--apply", "--account", "fastmail", capsys=capsys)
    with fm.imap() as c:
        c.select_folder("INBOX")
        c.move([1], "Archive")
    gm.save("[Gmail]/Wszystkie", raw)
    mark = env.dv.log_mark()
    code, report = env.sync("--apply", capsys=capsys)
    assert code == 0, report
    assert _folder(report, "fastmail", "Archive")["known"] == 1
    assert _folder(report, "gmail", "[Gmail]/Wszystkie")["known"] == 1
    sessions = env.dv.sessions_since(mark, 2)
    assert sum(s.body_count for s in sessions) == 0
    counts = report["accounts"]["gmail"]["counts"]
    assert counts["conflicts_other_source"] == 1 and counts["bodies_fetched"] == 0
    with env.open() as s:
        assert s.message_ids() == ["m1@sync.example"]
        locs = s.query("select source, folder from locations order by all").to_pylist()
        assert [(r["source"], r["folder"]) for r in locs] == [
            ("fastmail", "Archive"),
            ("fastmail", "INBOX"),
            ("gmail", "[Gmail]/Wszystkie"),
        ]


@contextlib.contextmanager
def _unreadable_on_server(env: SyncEnv, message_id: str) -> Iterator[None]:
    """Within the block, Dovecot fails the FETCH of the fastmail INBOX message
    ``message_id``: its file is unreadable to the server."""
    md = env.dv.maildir("fastmail", "INBOX")
    files = sorted(p for p in (md / "cur").iterdir()) + sorted((md / "new").iterdir())
    victim = next(p for p in files if f"<{message_id}>".encode() in p.read_bytes())
    victim.chmod(0)
    try:
        yield
    finally:
        victim.chmod(0o600)


def test_failing_message_stalls_the_cursor_but_later_ones_are_stored(
    fastmail: tuple[Any, SyncEnv], capsys: pytest.CaptureFixture[str]
) -> None:
    user, env = fastmail
    for i in range(5):
        user.save("INBOX", _msg(i))
    with _unreadable_on_server(env, "m2@sync.example"):  # UID 3
        code, report = env.sync("--apply", capsys=capsys)
    inbox = _folder(report, "fastmail", "INBOX")
    assert code == 1
    assert inbox["failed_uids"] == [3] and inbox["errors"] == 1
    assert inbox["cursor_to"] == 2
    with env.open() as s:
        assert "m4@sync.example" in s.message_ids() and "m2@sync.example" not in s.message_ids()
    code, report = env.sync("--apply", capsys=capsys)
    inbox = _folder(report, "fastmail", "INBOX")
    assert code == 0 and inbox["cursor_to"] == 5 and inbox["bodies"] == 1


# A folder with this many bodies to fetch (above pipeline.sync.fetch.WORKER_FETCH_MIN)
# is fetched by the worker processes, each on an IMAP connection of its own.
_MANY = 450


def _bodies_logged(dv: Any, text: str, name: str) -> int:
    """Bodies the ended sessions of user ``name`` in log ``text`` fetched."""
    return sum(s.body_count for s in dv.session_bytes(text) if s.user == name)


def test_a_large_folder_is_fetched_by_the_workers_each_body_once(
    fastmail: tuple[Any, SyncEnv], capsys: pytest.CaptureFixture[str]
) -> None:
    user, env = fastmail
    user.bulk_maildir("INBOX", [_msg(i, body="x" * (i % 700)) for i in range(_MANY)])
    mark = env.dv.log_mark()
    code, report = env.sync("--apply", capsys=capsys)
    inbox = _folder(report, "fastmail", "INBOX")
    assert code == 0, report
    assert (inbox["new"], inbox["bodies"], inbox["errors"]) == (_MANY, _MANY, 0)
    assert inbox["cursor_to"] == _MANY
    assert inbox["bytes_fetched"] == sum(len(_msg(i, body="x" * (i % 700))) for i in range(_MANY))
    # every body crossed the wire once, on the workers' connections: the syncing
    # one fetched none. (How many workers took a chunk is the scheduler's: on a
    # loaded machine the first one started may take all five before the second
    # has, so the sessions are waited for by the bodies they logged, not by count.)
    env.dv.log_since(
        mark,
        until=lambda text: _bodies_logged(env.dv, text, user.name) >= _MANY,
        timeout=30,
    )
    sessions = user.sessions_since(mark, 2)
    assert sum(s.body_count for s in sessions) == _MANY
    assert any(s.body_count == 0 for s in sessions)  # the syncing connection's
    assert env.dv.mail_events(mark) == []  # read-only: no flag changed
    with env.open() as s:
        ids = s.message_ids()
        assert len(ids) == _MANY and "m449@sync.example" in ids
        assert s.raw("m7@sync.example") == _msg(7, body="x" * 7)
        dates = s.query("select count(*) AS n from locations where seen_at is null")
        assert dates.column("n").to_pylist() == [0]  # each INTERNALDATE came back too
    code, report = env.sync("--apply", capsys=capsys)
    inbox = _folder(report, "fastmail", "INBOX")
    assert code == 0 and (inbox["new"], inbox["bodies"]) == (0, 0)


def test_a_failing_message_fetched_by_a_worker_stalls_the_cursor_before_it(
    fastmail: tuple[Any, SyncEnv], capsys: pytest.CaptureFixture[str]
) -> None:
    user, env = fastmail
    user.bulk_maildir("INBOX", [_msg(i) for i in range(_MANY)])
    with env.dv.imap("fastmail") as c:
        c.select_folder("INBOX", readonly=True)
        [uid] = c.search(["HEADER", "Message-ID", "<m299@sync.example>"])
    assert uid > 1  # the cursor has somewhere to stall
    with _unreadable_on_server(env, "m299@sync.example"):
        code, report = env.sync("--apply", capsys=capsys)
    inbox = _folder(report, "fastmail", "INBOX")
    assert code == 1
    assert inbox["failed_uids"] == [uid] and inbox["errors"] == 1
    assert inbox["cursor_to"] == uid - 1
    with env.open() as s:
        ids = set(s.message_ids())
        assert "m449@sync.example" in ids and "m299@sync.example" not in ids
        assert len(ids) == _MANY - 1
    mark = env.dv.log_mark()
    code, report = env.sync("--apply", capsys=capsys)
    inbox = _folder(report, "fastmail", "INBOX")
    assert code == 0 and inbox["cursor_to"] == _MANY and inbox["bodies"] == 1
    assert sum(s.body_count for s in user.sessions_since(mark)) == 1


def test_wrong_password_fails_that_account_only(
    imap_user: Callable[[str], Any],
    dovecot: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fm = imap_user("fastmail")
    imap_user("gmail")
    env = SyncEnv(
        tmp_path, dovecot, {"fastmail": {"folders": ["INBOX"]}, "gmail": {"folders": ["\\All"]}}
    )
    env.env["MAILLEDGER_TEST_GMAIL_PASSWORD"] = "wrong"
    fm.save("INBOX", _msg(1))
    code, report = env.sync("--apply", capsys=capsys)
    assert code == 1
    assert report["accounts"]["gmail"]["error"]
    assert "wrong" not in json.dumps(report)
    assert _folder(report, "fastmail", "INBOX")["bodies"] == 1


def test_limit_takes_n_per_folder_and_the_rest_next_run(
    fastmail: tuple[Any, SyncEnv], capsys: pytest.CaptureFixture[str]
) -> None:
    user, env = fastmail
    for i in range(7):
        user.save("INBOX", _msg(i))
    code, report = env.sync("--apply", "--limit", "3", capsys=capsys)
    assert _folder(report, "fastmail", "INBOX")["cursor_to"] == 3
    code, report = env.sync("--apply", "--limit", "3", capsys=capsys)
    assert _folder(report, "fastmail", "INBOX")["cursor_to"] == 6
    code, report = env.sync("--apply", capsys=capsys)
    assert code == 0 and _folder(report, "fastmail", "INBOX")["cursor_to"] == 7


def test_reconcile_records_vanished_and_keeps_the_message(
    fastmail: tuple[Any, SyncEnv], capsys: pytest.CaptureFixture[str]
) -> None:
    user, env = fastmail
    for i in range(3):
        user.save("INBOX", _msg(i))
    env.sync("--apply", capsys=capsys)
    user.expunge("INBOX", 2)
    code, report = env.sync("--apply", "--reconcile", capsys=capsys)
    inbox = _folder(report, "fastmail", "INBOX")
    assert code == 0 and inbox["mode"] == "reconcile" and inbox["vanished"] == 1
    with env.open() as s:
        assert "m1@sync.example" in s.message_ids()
        gone = s.query("select uid from locations where vanished").column("uid").to_pylist()
        assert gone == [2]


def test_sync_never_sets_seen_on_the_server(
    fastmail: tuple[Any, SyncEnv], capsys: pytest.CaptureFixture[str]
) -> None:
    user, env = fastmail
    for i in range(3):
        user.save("INBOX", _msg(i))
    user.save("Archive", _msg(5))
    mark = env.dv.log_mark()
    env.sync("--apply", capsys=capsys)
    env.sync("--apply", "--reconcile", capsys=capsys)
    assert all("\\Seen" not in flags for flags in user.flags("INBOX").values())
    assert [e for e in env.dv.mail_events(mark) if e.kind == "flag_change"] == []


def test_cursor_log_explains_every_move(
    fastmail: tuple[Any, SyncEnv], capsys: pytest.CaptureFixture[str]
) -> None:
    user, env = fastmail
    user.save("INBOX", _msg(1))
    env.sync("--apply", capsys=capsys)
    user.save("INBOX", _msg(2))
    env.sync("--apply", capsys=capsys)
    code = main(["--store", str(env.store), "cursor", "log", "fastmail", "INBOX"], env={})
    out, _ = capsys.readouterr()
    lines = out.strip().splitlines()
    assert code == 0 and len(lines) == 2
    assert "mode=full" in lines[0] and "cursor=-->1" in lines[0]  # (no Python None)
    assert "mode=delta" in lines[1] and "cursor=1->2" in lines[1]


def test_metrics_textfile_carries_last_success_across_a_failure(
    fastmail: tuple[Any, SyncEnv], capsys: pytest.CaptureFixture[str]
) -> None:
    user, env = fastmail
    user.save("INBOX", _msg(1))
    env.sync("--apply", capsys=capsys)
    text = env.metrics.read_text()
    assert "mailledger_sync_last_exit_code 0.0" in text
    ok = next(ln for ln in text.splitlines() if ln.startswith("mailledger_sync_last_success"))
    env.env["MAILLEDGER_TEST_FASTMAIL_PASSWORD"] = "wrong"
    code, _ = env.sync("--apply", capsys=capsys)
    text = env.metrics.read_text()
    assert code == 1 and "mailledger_sync_last_exit_code 1.0" in text
    assert ok in text.splitlines()
    assert 'mailledger_sync_account_errors{account="fastmail"} 1.0' in text


def test_kill_9_mid_folder_leaves_cursor_behind_data_and_rerun_stores_each_once(
    fastmail: tuple[Any, SyncEnv], tmp_path: Path
) -> None:
    user, env = fastmail
    big = "lorem ipsum dolor sit amet " * 400
    n = user.bulk_maildir("INBOX", (_msg(i, body=big) for i in range(400)))
    assert n == 400
    cmd = [
        sys.executable,
        "-m",
        "pipeline",
        "--store",
        str(env.store),
        "sync",
        "--apply",
        "--config",
        str(env.config),
    ]
    proc = subprocess.Popen(
        cmd, env={**os.environ, **env.env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # wait until some messages are durable, then kill
        logs = list((env.store / "log").glob("*.parquet")) if env.store.exists() else []
        if logs:
            break
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    with env.open() as s:
        cur = s.cursor("fastmail", "INBOX")
        stored = len(s.message_ids())
        assert cur is None or cur["last_uid"] <= stored
    done = subprocess.run(cmd, env={**os.environ, **env.env}, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    with env.open() as s:
        assert len(s.message_ids()) == 400
        assert s.cursor("fastmail", "INBOX")["last_uid"] == 400
        assert s.verify() == []


def test_watch_wakes_on_idle_and_stops_cleanly_on_sigterm(
    fastmail: tuple[Any, SyncEnv], tmp_path: Path
) -> None:
    user, env = fastmail
    user.save("INBOX", _msg(1))
    cmd = [
        sys.executable,
        "-u",
        "-m",
        "pipeline",
        "--store",
        str(env.store),
        "sync",
        "--apply",
        "--watch",
        "--interval",
        "60s",
        "--config",
        str(env.config),
    ]
    out = tmp_path / "watch.out"
    with open(out, "w") as fh:
        proc = subprocess.Popen(cmd, env={**os.environ, **env.env}, stdout=fh, stderr=fh)

    def wait_for(text: str, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while text not in out.read_text():
            assert time.monotonic() < deadline, f"no {text!r} in:\n{out.read_text()}"
            assert proc.poll() is None, out.read_text()
            time.sleep(0.05)

    try:
        wait_for("sync run=")
        time.sleep(0.5)  # let it settle into IDLE
        user.save("INBOX", _msg(2))
        wait_for("woke up (IDLE")
        wait_for("new=1 bodies=1")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0, out.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
    with env.open() as s:
        assert s.message_ids() == ["m1@sync.example", "m2@sync.example"]
        modes = [m["mode"] for m in s.cursor_log("fastmail", "INBOX")]
        assert modes == ["full", "watch"]


@pytest.mark.parametrize("many", [False, True], ids=["in-process", "workers"])
def test_internaldate_is_recorded_as_the_same_instant_whatever_the_local_timezone(
    fastmail: tuple[Any, SyncEnv],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    many: bool,
) -> None:
    """A sync run from cron on a machine in another timezone records the server's
    INTERNALDATE as the same instant (it was once read as local time and labelled UTC)."""
    user, env = fastmail
    when = datetime(2024, 3, 9, 23, 30, 5, tzinfo=UTC)
    n = _MANY if many else 3
    user.bulk_maildir("INBOX", [(when, _msg(i)) for i in range(n)])
    monkeypatch.setenv("TZ", "Asia/Kolkata")  # +05:30 all year
    time.tzset()
    try:
        code, report = env.sync("--apply", capsys=capsys)
    finally:
        monkeypatch.undo()
        time.tzset()
    assert code == 0 and _folder(report, "fastmail", "INBOX")["bodies"] == n
    with env.open() as s:
        dates = s.log.read(columns=["type", "internal_date"]).to_pylist()
    seen = [d["internal_date"] for d in dates if d["type"] == "message-seen"]
    assert len(seen) == n and set(seen) == {when}


def test_watch_wakes_at_once_for_mail_delivered_before_its_idle_began(
    fastmail: tuple[Any, SyncEnv], capsys: pytest.CaptureFixture[str]
) -> None:
    """IDLE reports changes from when it starts: mail delivered between the run's
    scan and the IDLE is found by asking for UIDs above the run's cursor (but not
    a UID the run failed to take: that would wake every wait at once)."""
    import threading

    from pipeline.bootstrap import App
    from pipeline.config import load_config
    from pipeline.reports import AccountReport, FolderReport, RunReport
    from pipeline.sync.watch import seen_in, wait_for_change

    user, env = fastmail
    user.save("INBOX", _msg(1))
    code, report = env.sync("--apply", capsys=capsys)
    assert code == 0
    inbox = _folder(report, "fastmail", "INBOX")
    folder = FolderReport(
        folder="INBOX", uidvalidity=inbox["uidvalidity"], cursor_to=inbox["cursor_to"]
    )
    run = RunReport(run_id="r", applied=True)
    run.accounts["fastmail"] = AccountReport(name="fastmail", folders={"INBOX": folder})
    config = load_config(env.config, env.env)
    sources, stop = App(env.env).sources, threading.Event()

    def wait(seen: Any, seconds: float = 30.0) -> tuple[str, float]:
        t0 = time.monotonic()
        why = wait_for_change(config, env.env, seconds, stop, sources=sources, seen=seen)
        return why, time.monotonic() - t0

    assert wait(seen_in(run), 1.0)[0] == "interval"  # nothing new: the whole wait
    user.save("INBOX", _msg(2))  # (in the gap: after the run looked, before any IDLE)
    why, took = wait(seen_in(run))
    assert why == "fastmail INBOX: mail since the run looked" and took < 10, (why, took)
    top = inbox["cursor_to"] + 1  # the new UID, as if the run had failed to take it
    folder.failed_uids = [top]
    assert wait(seen_in(run), 1.0)[0] == "interval"

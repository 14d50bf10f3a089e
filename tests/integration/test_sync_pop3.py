"""`mailledger sync` of POP3 accounts against the real Dovecot POP3 on loopback.

What crossed the wire is read from Dovecot's own logout lines (`retr=n/bytes`,
`del=n/messages`) and its mail_log, never from mailledger's counters.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from pipeline.cli import main
from pipeline.sources.pop3 import Pop3Entry, Pop3Source, plan_pop3, trim_terminator
from pipeline.store import MessageStore

pytestmark = pytest.mark.usefixtures("dovecot")

ACCOUNT = "pop"


def _msg(i: int, *, body: str = "", domain: str = "pop.example") -> bytes:
    return (
        f"From: sender{i % 3}@{domain}\r\nTo: me@{domain}\r\nSubject: pop message {i}\r\n"
        f"Date: Tue, 0{1 + i % 9} Sep 2026 08:00:00 +0000\r\n"
        f"Message-ID: <p{i}@{domain}>\r\n\r\n{body or f'body {i}'}\r\n"
    ).encode()


class Env:
    """A config with one POP3 account for Dovecot user `plain`, a store, the CLI."""

    def __init__(self, tmp: Path, dovecot: Any, **account: object) -> None:
        self.dv = dovecot
        self.tmp = tmp
        self.store = tmp / "store"
        self.config = tmp / "config.toml"
        self.env = {**dovecot.password_env(), "HOME": str(tmp)}
        self.write_config(**account)

    def write_config(self, **account: object) -> None:
        self.config.write_text(self.dv.account_toml("plain", name=ACCOUNT, type="pop3", **account))

    def sync(
        self, *args: str, capsys: pytest.CaptureFixture[str], settle: bool = True
    ) -> tuple[int, dict[str, Any]]:
        """Run `mailledger sync --json ARGS`; with ``settle``, return only once Dovecot
        has logged the run's logout, so that a log_mark() taken next sees nothing of it."""
        mark = self.dv.log_mark()
        code = main(
            ["--store", str(self.store), "sync", "--config", str(self.config), "--json", *args],
            env=self.env,
        )
        out, err = capsys.readouterr()
        assert out.strip(), f"exit {code}, no JSON report; stderr:\n{err}"
        self.last_err = err
        if settle:
            self.dv.sessions_since(mark, user="plain", protocol="pop3")
        return code, json.loads(out)

    def cli(self) -> list[str]:
        return [
            sys.executable, "-m", "pipeline", "--store", str(self.store),
            "sync", "--apply", "--config", str(self.config),
        ]  # fmt: skip

    def open(self) -> MessageStore:
        return MessageStore.open(self.store, create=False)


def _inbox(report: dict[str, Any]) -> dict[str, Any]:
    return report["accounts"][ACCOUNT]["folders"]["INBOX"]


def _counts(report: dict[str, Any]) -> dict[str, Any]:
    return report["accounts"][ACCOUNT]["counts"]


def _pop3_session(user: Any, mark: int) -> Any:
    [s] = user.sessions_since(mark, protocol="pop3")
    return s


@pytest.fixture
def plain(imap_user: Callable[[str], Any]) -> Any:
    return imap_user("plain")


@pytest.fixture
def env(plain: Any, dovecot: Any, tmp_path: Path) -> Env:
    return Env(tmp_path, dovecot)


def _server_uidls(user: Any) -> dict[str, int]:
    mark = user.dv.log_mark()
    conn = user.pop3()
    try:
        _, lines, _ = conn.uidl()
    finally:
        conn.quit()
    # Dovecot logs the logout just after QUIT is answered: wait for it, so that a
    # log_mark() taken after this sees only the code under test
    user.sessions_since(mark, protocol="pop3")
    return {line.split()[1].decode(): int(line.split()[0]) for line in lines}


# -- the protocol -----------------------------------------------------------------


def test_dry_run_is_the_default_retrieves_nothing_and_writes_nothing(
    plain: Any, env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    for i in range(3):
        plain.save("INBOX", _msg(i))
    mark = env.dv.log_mark()
    code, report = env.sync(capsys=capsys)
    assert code == 0 and report["applied"] is False
    inbox = _inbox(report)
    assert (inbox["mode"], inbox["would_fetch"], inbox["server_messages"]) == ("full", 3, 3)
    assert not env.store.exists()
    s = _pop3_session(plain, mark)
    assert (s.retr_count, s["del_count"]) == (0, 0)


def test_first_run_takes_everything_second_run_retrieves_nothing(
    plain: Any, env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    raws = [_msg(i) for i in range(5)]
    for raw in raws:
        plain.save("INBOX", raw)
    mark = env.dv.log_mark()
    code, report = env.sync("--apply", capsys=capsys)
    inbox = _inbox(report)
    assert code == 0, report
    assert (inbox["mode"], inbox["new"], inbox["bodies"], inbox["skipped"]) == ("full", 5, 5, 0)
    assert inbox["cursor_from"] is None and inbox["cursor_to"] is None
    assert _counts(report)["new_messages"] == 5 and report["balanced"]
    s = _pop3_session(plain, mark)
    assert s.retr_count == 5 and s["size"] == sum(len(r) for r in raws)
    assert "cursor=- uidls=5 skipped=0 new=5 bodies=5" in env.last_err

    uidls = _server_uidls(plain)
    with env.open() as st:
        assert st.message_ids() == [f"p{i}@pop.example" for i in range(5)]
        assert st.uidls() == sorted(uidls)
        assert all(st.contains_uidl(u) for u in uidls)
        assert st.raw("p0@pop.example") == raws[0]  # the bytes exactly as delivered
        locs = st.query("select source, folder, uidl from locations order by uidl").to_pylist()
        assert {(r["source"], r["folder"]) for r in locs} == {(ACCOUNT, "INBOX")}
        types = st.query("select distinct type from events").column("type").to_pylist()
        assert types == ["message-seen"]  # POP3 has no cursor: no cursor-moved events

    mark = env.dv.log_mark()
    code, report = env.sync("--apply", capsys=capsys)
    inbox = _inbox(report)
    assert code == 0
    assert (inbox["mode"], inbox["new"], inbox["bodies"], inbox["skipped"]) == ("delta", 0, 0, 5)
    s = _pop3_session(plain, mark)
    assert s.retr_count == 0 and s.retr_bytes == 0 and s.logged_out


def test_one_new_message_costs_exactly_one_retr(
    plain: Any, env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    for i in range(4):
        plain.save("INBOX", _msg(i))
    env.sync("--apply", capsys=capsys)
    raw = _msg(42, body="the new one " * 50)
    plain.save("INBOX", raw)
    mark = env.dv.log_mark()
    code, report = env.sync("--apply", capsys=capsys)
    inbox = _inbox(report)
    assert code == 0 and (inbox["new"], inbox["bodies"], inbox["skipped"]) == (1, 1, 4)
    s = _pop3_session(plain, mark)
    # Dovecot counts the "+OK n octets" line too
    assert s.retr_count == 1 and len(raw) <= s.retr_bytes <= len(raw) + 32
    with env.open() as st:
        assert "p42@pop.example" in st.message_ids()


def test_message_without_final_newline_is_not_downloaded_again(
    plain: Any, env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    # The server adds CRLF before the final "." (RETR: 2 bytes more than LIST);
    # stored without it, the size on record is the listed one.
    raw = b"From: a@pop.example\r\nMessage-ID: <nonl@pop.example>\r\n\r\nno newline at the end"
    plain.bulk_maildir("INBOX", [raw])
    code, _ = env.sync("--apply", capsys=capsys)
    assert code == 0
    with env.open() as st:
        assert st.raw("nonl@pop.example") == raw
    mark = env.dv.log_mark()
    code, report = env.sync("--apply", capsys=capsys)
    assert code == 0 and _inbox(report)["skipped"] == 1
    assert _pop3_session(plain, mark).retr_count == 0


def test_long_lines_and_dot_lines_arrive_byte_for_byte(
    plain: Any, env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    # poplib's own RETR refuses lines over 2048 bytes; a line starting with "." is
    # dot-stuffed on the wire ("..") and must come back as it was.
    raw = (
        b"From: a@pop.example\r\nMessage-ID: <long@pop.example>\r\n\r\n"
        + b"x" * 100_000
        + b"\r\n.leading dot\r\n..two dots\r\n.\r\nend\r\n"
    )
    plain.save("INBOX", raw)
    code, _ = env.sync("--apply", capsys=capsys)
    assert code == 0
    with env.open() as st:
        assert st.raw("long@pop.example") == raw


def test_limit_takes_n_per_run_and_the_rest_later(
    plain: Any, env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    for i in range(7):
        plain.save("INBOX", _msg(i))
    code, report = env.sync("--apply", "--limit", "3", capsys=capsys)
    assert code == 0 and _inbox(report)["bodies"] == 3
    code, report = env.sync("--apply", "--limit", "3", capsys=capsys)
    assert code == 0 and (_inbox(report)["bodies"], _inbox(report)["skipped"]) == (3, 3)
    mark = env.dv.log_mark()
    code, report = env.sync("--apply", capsys=capsys)
    assert code == 0 and _inbox(report)["bodies"] == 1
    assert _pop3_session(plain, mark).retr_count == 1
    with env.open() as st:
        assert len(st.message_ids()) == 7


@pytest.mark.parametrize("tls", ["implicit", "starttls"])
def test_tls_modes_check_the_certificate_and_sync(
    plain: Any, dovecot: Any, tmp_path: Path, tls: str, capsys: pytest.CaptureFixture[str]
) -> None:
    plain.save("INBOX", _msg(1))
    env = Env(tmp_path, dovecot, tls=tls)
    code, report = env.sync("--apply", capsys=capsys)
    assert code == 0, report
    assert _inbox(report)["bodies"] == 1
    # without the test CA the certificate is refused: an account error, exit 1
    text = env.config.read_text()
    env.config.write_text("\n".join(ln for ln in text.splitlines() if "ca_file" not in ln))
    code, report = env.sync("--apply", capsys=capsys, settle=False)
    assert code == 1 and "certificate" in report["accounts"][ACCOUNT]["error"].lower()


def test_wrong_password_fails_that_account_only_and_never_shows_it(
    plain: Any, dovecot: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    imap = dovecot.account_toml("plain", name="imap-plain", folders=["INBOX"])
    env = Env(tmp_path, dovecot)
    env.config.write_text(env.config.read_text() + imap)
    plain.save("INBOX", _msg(1))
    env.env["MAILLEDGER_TEST_PLAIN_PASSWORD"] = "pw-wrong-secret"
    code, report = env.sync("--apply", capsys=capsys, settle=False)
    assert code == 1
    assert "login failed" in report["accounts"][ACCOUNT]["error"]
    assert report["accounts"]["imap-plain"]["error"]  # same password, same user
    assert "pw-wrong-secret" not in json.dumps(report) + env.last_err


def test_measure_counts_the_maildrop_and_touches_no_store(
    plain: Any, env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    plain.save("INBOX", _msg(1))
    plain.save("INBOX", _msg(2))
    code, report = env.sync("--measure", capsys=capsys)
    assert code == 0 and _inbox(report)["would_fetch"] == 2
    assert not env.store.exists()


def test_retr_failure_is_an_error_the_rest_is_stored_and_the_next_run_retries(
    plain: Any, env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    for i in range(4):
        plain.save("INBOX", _msg(i))
    env.sync("--apply", "--limit", "0", capsys=capsys)  # the server has computed sizes
    md = env.dv.maildir("plain", "INBOX")
    files = [*(md / "cur").iterdir(), *(md / "new").iterdir()]
    victim = next(p for p in files if b"<p2@pop.example>" in p.read_bytes())
    victim.chmod(0)
    try:
        code, report = env.sync("--apply", capsys=capsys)
    finally:
        victim.chmod(0o600)
    assert code == 1
    with env.open() as st:
        ids = st.message_ids()
    assert "p2@pop.example" not in ids and "p3@pop.example" in ids
    assert report["balanced"]
    mark = env.dv.log_mark()
    code, report = env.sync("--apply", capsys=capsys)
    assert code == 0 and _inbox(report)["bodies"] == 1
    assert _pop3_session(plain, mark).retr_count == 1
    with env.open() as st:
        assert len(st.message_ids()) == 4 and st.verify() == []


# -- crash safety ---------------------------------------------------------------------


def test_kill_9_mid_run_loses_nothing_and_doubles_nothing(plain: Any, env: Env) -> None:
    big = "lorem ipsum dolor sit amet " * 400
    assert plain.bulk_maildir("INBOX", (_msg(i, body=big) for i in range(400))) == 400
    killed_mark = env.dv.log_mark()
    proc = subprocess.Popen(
        env.cli(), env={**os.environ, **env.env},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # the first batch is durable: kill it now
        if env.store.exists() and list((env.store / "log").glob("*.parquet")):
            break
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    [killed] = plain.sessions_since(killed_mark, protocol="pop3")  # logged, so not later
    assert not killed.logged_out and killed["del_count"] == 0
    with env.open() as st:
        before = len(st.message_ids())
    assert 0 < before < 400, "the kill came too late to test anything"
    mark = env.dv.log_mark()
    done = subprocess.run(env.cli(), env={**os.environ, **env.env}, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    s = _pop3_session(plain, mark)
    assert s.retr_count == 400 - before  # only what the killed run had not committed
    with env.open() as st:
        assert len(st.message_ids()) == 400
        seen = st.query(
            "select uidl, count(*) as n from events where type = 'message-seen' group by uidl"
        ).to_pylist()
        assert len(seen) == 400 and all(r["n"] == 1 for r in seen)
        assert st.verify() == []


# -- delete_after = "stored" --------------------------------------------------------------


def _log_has_uidl(store: Path, uidl: str) -> bool:
    files = sorted((store / "log").glob("*.parquet"))
    return any(uidl in pq.read_table(f, columns=["uidl"]).column("uidl").to_pylist() for f in files)


def test_delete_after_stored_deletes_only_after_the_commit(
    plain: Any,
    dovecot: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    env = Env(tmp_path, dovecot, delete_after="stored")
    for i in range(3):
        plain.save("INBOX", _msg(i))
    uidls = _server_uidls(plain)

    # 1. The commit fails (a full disk): nothing may be deleted on the server.
    def disk_full(self: MessageStore, events: Any, **kw: Any) -> Any:
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr(MessageStore, "commit", disk_full)
        mark = dovecot.log_mark()
        code, report = env.sync("--apply", capsys=capsys)
    assert code == 1 and "No space left" in _inbox(report)["error"]
    s = _pop3_session(plain, mark)
    assert s.retr_count == 3 and s["del_count"] == 0
    assert not s.logged_out  # dropped without QUIT: the server deletes nothing
    assert [e for e in dovecot.mail_events(mark) if e.event in ("delete", "expunge")] == []
    assert plain.status("INBOX")["messages"] == 3

    # 2. A good run: every DELE comes after the message is in a committed log file.
    checked: list[str] = []
    real_dele = Pop3Source.dele
    number_to_uidl = {n: u for u, n in uidls.items()}

    def dele_after_durable(self: Pop3Source, number: int) -> None:
        uidl = number_to_uidl[number]
        assert _log_has_uidl(env.store, uidl), f"DELE of {uidl} before it was durable"
        checked.append(uidl)
        real_dele(self, number)

    with monkeypatch.context() as m:
        m.setattr(Pop3Source, "dele", dele_after_durable)
        mark = dovecot.log_mark()
        code, report = env.sync("--apply", capsys=capsys)
    assert code == 0, report
    assert _inbox(report)["deleted"] == 3 and sorted(checked) == sorted(uidls)
    s = _pop3_session(plain, mark)
    assert (s.retr_count, s["del_count"]) == (3, 3) and s.logged_out
    # the session that deleted (rawlogs of sessions in the same second may sort either way)
    [lines] = [
        r.client_lines()
        for r in dovecot.rawlogs("plain")
        if any(ln.upper().startswith("DELE") for ln in r.client_lines())
    ]
    last_retr = max(i for i, ln in enumerate(lines) if ln.upper().startswith("RETR"))
    first_dele = min(i for i, ln in enumerate(lines) if ln.upper().startswith("DELE"))
    assert last_retr < first_dele
    assert plain.status("INBOX")["messages"] == 0
    with env.open() as st:
        assert len(st.message_ids()) == 3  # the archive outlives the server


def test_delete_after_stored_deletes_what_an_earlier_run_stored_without_retr(
    plain: Any, env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    for i in range(3):
        plain.save("INBOX", _msg(i))
    env.sync("--apply", capsys=capsys)  # delete_after = "never"
    assert plain.status("INBOX")["messages"] == 3
    env.write_config(delete_after="stored")
    plain.save("INBOX", _msg(9))
    code, report = env.sync(capsys=capsys)  # dry run: says what it would delete
    assert code == 0 and (_inbox(report)["would_fetch"], _inbox(report)["would_delete"]) == (1, 4)
    assert plain.status("INBOX")["messages"] == 4
    mark = env.dv.log_mark()
    code, report = env.sync("--apply", capsys=capsys)
    assert code == 0 and _inbox(report)["deleted"] == 4
    s = _pop3_session(plain, mark)
    assert (s.retr_count, s["del_count"]) == (1, 4)
    assert plain.status("INBOX")["messages"] == 0


# -- UIDLs that change or repeat ----------------------------------------------------------


def test_lost_server_state_means_new_uidls_downloaded_but_no_new_message(
    plain: Any, env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    for i in range(3):
        plain.save("INBOX", _msg(i))
    env.sync("--apply", capsys=capsys)
    before = set(_server_uidls(plain))
    plain.lose_state("INBOX")  # Dovecot's UIDL is %08Xu%08Xv: a new UIDVALIDITY, new UIDLs
    assert not before & set(_server_uidls(plain))
    code, report = env.sync("--apply", capsys=capsys)
    c = _counts(report)
    assert code == 0 and report["balanced"]
    assert (c["bodies_fetched"], c["new_messages"], c["duplicates"]) == (3, 0, 3)
    with env.open() as st:
        assert len(st.message_ids()) == 3
        assert len(st.uidls()) == 6  # old and new UIDLs both on record


def test_reused_uidl_with_other_content_is_a_new_location_never_skipped(
    plain: Any, env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    # A true reuse on the real server: UIDL = UID + UIDVALIDITY. Replace the only
    # message, rebuild the index (renumbered from 1) and force the old UIDVALIDITY
    # back: UID 1 again, same UIDL, other content (and another size).
    plain.save("INBOX", _msg(0))
    env.sync("--apply", capsys=capsys)
    [(uidl, _)] = _server_uidls(plain).items()
    uv = plain.status("INBOX")["uidvalidity"]
    md = env.dv.maildir("plain", "INBOX")
    for p in [*(md / "cur").iterdir(), *(md / "new").iterdir()]:
        p.unlink()
    other = _msg(77, body="quite different content, and longer than the first one")
    plain.bulk_maildir("INBOX", [other])
    plain.lose_state("INBOX")
    plain.set_uidvalidity("INBOX", uv)
    assert _server_uidls(plain) == {uidl: 1}

    mark = env.dv.log_mark()
    code, report = env.sync("--apply", capsys=capsys)
    inbox = _inbox(report)
    assert code == 0 and report["balanced"]
    assert (inbox["uidl_reused"], inbox["bodies"], inbox["skipped"]) == (1, 1, 0)
    assert "uidl_reused=1" in env.last_err and "WARNING" in env.last_err
    assert _pop3_session(plain, mark).retr_count == 1
    with env.open() as st:
        assert st.message_ids() == ["p0@pop.example", "p77@pop.example"]
        rows = st.query(
            "select message_id from locations where uidl = ? order by first_seq", [uidl]
        ).to_pylist()
        assert [r["message_id"] for r in rows] == ["p0@pop.example", "p77@pop.example"]
    mark = env.dv.log_mark()
    code, report = env.sync("--apply", capsys=capsys)  # now both contents are on record
    assert code == 0 and _inbox(report)["skipped"] == 1
    assert _pop3_session(plain, mark).retr_count == 0


def test_reconcile_records_uidls_gone_from_the_server(
    plain: Any, env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    for i in range(3):
        plain.save("INBOX", _msg(i))
    env.sync("--apply", capsys=capsys)
    plain.expunge("INBOX", 2)
    code, report = env.sync("--apply", "--reconcile", capsys=capsys)
    assert code == 0 and (_inbox(report)["mode"], _inbox(report)["vanished"]) == ("reconcile", 1)
    with env.open() as st:
        assert len(st.message_ids()) == 3
        gone = st.query("select message_id from locations where vanished").to_pylist()
        assert gone == [{"message_id": "p1@pop.example"}]


# -- the pure parts -------------------------------------------------------------------------


def test_plan_decides_per_uidl_from_what_is_on_record() -> None:
    def rec(source: str, size: int | None, sha: str = "s1") -> dict[str, Any]:
        return {"source": source, "size": size, "sha256": sha, "message_id": "m"}

    entries = [
        Pop3Entry(1, "new", 10),
        Pop3Entry(2, "same", 20),
        Pop3Entry(3, "reused", 31),
        Pop3Entry(4, "legacy", 44),
        Pop3Entry(5, "legacy-same", 50),
        Pop3Entry(6, "purged", 60),
    ]
    known = {
        "same": [rec(ACCOUNT, 20)],
        "reused": [rec(ACCOUNT, 30, "old")],
        "legacy": [rec("import:gdbm:/x.gdbm", 40)],
        "legacy-same": [rec("import:gdbm:/x.gdbm", 50)],
        "purged": [rec(ACCOUNT, None)],
    }
    plan = plan_pop3(entries, known)
    assert [e.uidl for e in plan.take] == ["new", "reused"]
    assert plan.suspect == {"reused": {"old"}}
    assert [e.uidl for e in plan.skip] == ["same", "legacy", "legacy-same", "purged"]
    assert [e.uidl for e in plan.deletable] == ["same", "legacy-same"]


def test_trim_terminator_only_when_the_sizes_say_so() -> None:
    assert trim_terminator(b"abc\r\n", 3) == b"abc"
    assert trim_terminator(b"abc\r\n", 5) == b"abc\r\n"
    assert trim_terminator(b"abcde", 3) == b"abcde"

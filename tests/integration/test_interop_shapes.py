"""The core sync behaviours against the answer shapes of servers other than Dovecot.

Cyrus and Courier answer in ways RFC 3501 allows and Dovecot never uses:
Courier echoes ``BODY[HEADER.FIELDS ("MESSAGE-ID")]`` with the field name
quoted, sends INTERNALDATE after the body literal, and says no UIDNEXT on
EXAMINE. The fault proxy (``testkit/faultproxy.py``) rewrites the real Dovecot's
answers into those shapes, one at a time and all together ("courier"); the
bodies that crossed the wire are counted at the proxy and compared with what
the run reports (the line, ``--json`` and the metrics).
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from pipeline.cli import main
from pipeline.config import load_config, resolve_secret
from pipeline.sources.imap import ImapSource, fetch_item_key, fetch_items
from pipeline.store import MessageStore
from testkit.faultproxy import Fault, FaultProxy, quote_fields

ACCOUNT = "fastmail"

SHAPES: dict[str, tuple[Fault, ...]] = {
    "quoted-fields": (Fault("quote-fields", conn=None),),
    "date-after-body": (Fault("date-after-body", conn=None),),
    "no-uidnext-on-examine": (Fault("strip-uidnext", conn=None, status_too=False),),
}
SHAPES["courier"] = tuple(f for faults in SHAPES.values() for f in faults)

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def _msg(i: int, tag: str = "m") -> tuple[datetime, bytes]:
    """Message ``i``: its INTERNALDATE (which also sets its UID order in the
    Maildir after a lost index) and its bytes."""
    when = T0 + timedelta(minutes=i)
    raw = (
        f"From: sender{i % 5}@shapes.example\r\nTo: me@shapes.example\r\n"
        f"Subject: {tag} {i}\r\nDate: {when.strftime('%a, %d %b %Y %H:%M:%S +0000')}\r\n"
        f"Message-ID: <{tag}{i}@shapes.example>\r\n\r\nbody of {tag} {i}\r\n"
    ).encode()
    return when, raw


@dataclass
class Run:
    code: int
    report: dict[str, Any]
    lines: list[str]  # what the run printed besides the JSON (on stderr with --json)

    def folder(self, name: str) -> dict[str, Any]:
        return self.report["accounts"][ACCOUNT]["folders"][name]

    def line_bodies(self, name: str) -> int:
        """``bodies=`` of the folder's report line."""
        [line] = [ln for ln in self.lines if f" {ACCOUNT} {name}: uidvalidity=" in ln]
        m = re.search(r" bodies=(\d+) ", line)
        assert m, line
        return int(m[1])


@dataclass
class Shaped:
    """A Dovecot user seen through the proxy in one shape, and a store to sync into."""

    dv: Any
    user: Any
    proxy: FaultProxy
    faults: tuple[Fault, ...]
    work: Path
    capsys: pytest.CaptureFixture[str]
    env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.store = self.work / "store"
        self.config = self.work / "config.toml"
        self.metrics = self.work / "metrics.prom"
        self.config.write_text(
            self.dv.account_toml(
                ACCOUNT, port=self.proxy.port, folders=["INBOX", "\\Archive"], timeout=20
            )
        )
        self.env = {**self.dv.password_env(), "HOME": str(self.work)}

    def sync(self) -> Run:
        """``sync --apply --json`` through the proxy; its counters start from zero."""
        self.proxy.schedule(self.faults)
        code = main(
            ["--store", str(self.store), "sync", "--apply", "--json", "--config",
             str(self.config), "--metrics-file", str(self.metrics)],
            env=self.env,
        )  # fmt: skip
        out, err = self.capsys.readouterr()
        assert out.strip(), f"exit {code}, no JSON report; stderr:\n{err}"
        assert self.proxy.idle(), "the run left a connection open"
        return Run(code, json.loads(out), err.splitlines())

    def fired(self) -> set[str]:
        return {f.fault.kind for f in self.proxy.fired}

    def metric(self, name: str) -> float:
        pattern = rf'^mailledger_sync_{name}{{account="{ACCOUNT}"}} (\S+)$'
        m = re.search(pattern, self.metrics.read_text(), re.MULTILINE)
        assert m, f"no {name} in the metrics"
        return float(m[1])

    def open(self) -> MessageStore:
        return MessageStore.open(self.store, create=False)


@pytest.fixture(params=list(SHAPES))
def shaped(
    request: pytest.FixtureRequest,
    dovecot: Any,
    imap_user: Callable[[str], Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> Iterator[Shaped]:
    user = imap_user(ACCOUNT)
    with FaultProxy(("127.0.0.1", dovecot.imap_port)) as proxy:
        yield Shaped(dovecot, user, proxy, SHAPES[request.param], tmp_path, capsys)


def _wire_equals_report(sh: Shaped, run: Run, *folders: str) -> None:
    """Every body that crossed the proxy is counted: in each folder's line and
    JSON, and in the account's counters and metrics."""
    counts = run.report["accounts"][ACCOUNT]["counts"]
    assert sum(run.folder(f)["bodies"] for f in folders) == sh.proxy.bodies
    assert sum(run.line_bodies(f) for f in folders) == sh.proxy.bodies
    assert counts["bodies_fetched"] + counts["bodies_checked"] == sh.proxy.bodies
    assert sh.metric("bodies_fetched") + sh.metric("bodies_checked") == sh.proxy.bodies


# -- the behaviours, in every shape ------------------------------------------------


def test_first_sync_stores_every_message_with_its_internaldate(shaped: Shaped) -> None:
    msgs = [_msg(i) for i in range(5)]
    shaped.user.bulk_maildir("INBOX", msgs)
    run = shaped.sync()
    inbox = run.folder("INBOX")
    assert run.code == 0, run.lines
    assert (inbox["mode"], inbox["new"], inbox["bodies"], inbox["cursor_to"]) == ("full", 5, 5, 5)
    assert shaped.proxy.bodies == 5
    _wire_equals_report(shaped, run, "INBOX", "Archive")
    with shaped.open() as s:
        assert sorted(s.message_ids()) == [f"m{i}@shapes.example" for i in range(5)]
        seen = [
            e["internal_date"]
            for e in s.log.read(columns=["type", "internal_date"]).to_pylist()
            if e["type"] == "message-seen"
        ]
    assert sorted(seen) == [when for when, _ in msgs]


def test_idle_sync_downloads_no_body(shaped: Shaped) -> None:
    shaped.user.bulk_maildir("INBOX", [_msg(i) for i in range(8)])
    shaped.user.bulk_maildir("Archive", [_msg(i, "a") for i in range(3)])
    assert shaped.sync().code == 0
    run = shaped.sync()
    assert run.code == 0, run.lines
    # the sample of known UIDs was checked (envelopes, in the shape under test)
    assert shaped.fired() == {f.kind for f in shaped.faults}
    for name in ("INBOX", "Archive"):
        folder = run.folder(name)
        assert (folder["mode"], folder["new"], folder["bodies"]) == ("delta", 0, 0)
    assert shaped.proxy.bodies == 0
    _wire_equals_report(shaped, run, "INBOX", "Archive")


def test_a_move_by_copy_and_expunge_costs_no_body(shaped: Shaped) -> None:
    shaped.user.bulk_maildir("INBOX", [_msg(i) for i in range(4)])
    assert shaped.sync().code == 0
    with shaped.user.imap() as c:
        c.select_folder("INBOX")
        c.copy([2, 3], "Archive")
        c.delete_messages([2, 3])
        c.expunge()
    run = shaped.sync()
    archive = run.folder("Archive")
    assert run.code == 0, run.lines
    assert (archive["new"], archive["bodies"], archive["known"]) == (2, 0, 2)
    assert shaped.proxy.bodies == 0
    _wire_equals_report(shaped, run, "INBOX", "Archive")
    with shaped.open() as s:
        assert len(s.message_ids()) == 4
        rows = s.query("select folder, count(*) AS n from locations group by folder order by 1")
        assert rows.to_pylist() == [{"folder": "Archive", "n": 2}, {"folder": "INBOX", "n": 4}]


def test_a_uidvalidity_change_rescans_without_downloading_stored_bodies(shaped: Shaped) -> None:
    shaped.user.bulk_maildir("INBOX", [_msg(i) for i in range(6)])
    assert shaped.sync().code == 0
    shaped.user.lose_state("INBOX")
    run = shaped.sync()
    inbox = run.folder("INBOX")
    assert run.code == 3, run.lines
    assert any("UIDVALIDITY changed" in a for a in run.report["alarms"])
    assert (inbox["mode"], inbox["new"], inbox["bodies"], inbox["known"]) == ("full", 6, 0, 6)
    assert shaped.proxy.bodies == 0
    _wire_equals_report(shaped, run, "INBOX", "Archive")


def test_bodies_downloaded_to_confirm_known_uids_are_counted(shaped: Shaped) -> None:
    """A server that lost its index and forced the old UIDVALIDITY back gives known
    UIDs to other messages: the bodies fetched to confirm that, and those of the
    rescan, are all in ``bodies=`` (they once said 0 while bodies crossed)."""
    user = shaped.user
    user.bulk_maildir("INBOX", [_msg(i) for i in range(10)])
    assert shaped.sync().code == 0
    uidvalidity = user.status("INBOX")["uidvalidity"]
    box = shaped.dv.maildir(ACCOUNT, "INBOX")
    for p in [*(box / "cur").iterdir(), *(box / "new").iterdir()]:
        if b"<m3@shapes.example>" in p.read_bytes():
            p.unlink()  # behind the server's back: UIDs from 4 on shift down at renumbering
    user.bulk_maildir("INBOX", [_msg(20 + i, "late") for i in range(3)])
    user.lose_state("INBOX")
    user.set_uidvalidity("INBOX", uidvalidity)
    mark = shaped.dv.log_mark()
    run = shaped.sync()
    inbox = run.folder("INBOX")
    assert run.code == 3, run.lines
    assert any("UIDs reassigned" in a for a in run.report["alarms"])
    assert inbox["bodies_checked"] >= 1 and inbox["mode"] == "full"
    assert inbox["bodies"] == inbox["bodies_checked"] + 3  # the 3 late ones, nothing known
    assert f" checked={inbox['bodies_checked']}" in " ".join(run.lines)
    # the proxy's count is what Dovecot says it sent
    sessions = user.sessions_since(mark, shaped.proxy.connections)
    assert sum(s.body_count for s in sessions) == shaped.proxy.bodies
    _wire_equals_report(shaped, run, "INBOX", "Archive")
    assert shaped.metric("bodies_checked") == inbox["bodies_checked"]


# -- the ALARM, printed once -----------------------------------------------------


def test_a_uidvalidity_change_prints_its_alarm_once(
    imap_user: Callable[[str], Any], dovecot: Any, tmp_path: Path
) -> None:
    user = imap_user(ACCOUNT)
    user.bulk_maildir("INBOX", [_msg(i) for i in range(3)])
    config = tmp_path / "config.toml"
    config.write_text(dovecot.account_toml(ACCOUNT, folders=["INBOX"]))
    cmd = [sys.executable, "-m", "pipeline", "--store", str(tmp_path / "store"), "sync",
           "--apply", "--config", str(config)]  # fmt: skip
    env = {**os.environ, **dovecot.password_env()}
    first = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stdout + first.stderr
    user.lose_state("INBOX")
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 3, run.stdout + run.stderr
    printed = [ln for ln in (run.stdout + run.stderr).splitlines() if "ALARM" in ln]
    assert len(printed) == 1, printed
    assert printed[0].startswith(f"ALARM {ACCOUNT} INBOX: UIDVALIDITY changed")
    assert printed[0] in run.stdout.splitlines()  # with the folder lines (stderr under --json)
    assert "alarms=1 " in run.stdout


# -- the item names, and the proxy's shapes ----------------------------------------


@pytest.mark.parametrize(
    "echoed",
    [
        b"BODY[HEADER.FIELDS (MESSAGE-ID)]",  # Dovecot, Cyrus
        b'BODY[HEADER.FIELDS ("MESSAGE-ID")]',  # Courier
        b'body[header.fields ("Message-ID")]',
        b"BODY[HEADER.FIELDS  ( MESSAGE-ID )]",
        b"BODY[HEADER.FIELDS (\r\n\tMESSAGE-ID)]",
        b'BODY[HEADER.FIELDS ("MESS\\AGE-ID")]',  # a quoted-string escape
    ],
)
def test_a_header_field_item_is_found_however_the_server_spells_it(echoed: bytes) -> None:
    asked = "BODY.PEEK[HEADER.FIELDS (MESSAGE-ID)]"
    assert fetch_item_key(echoed) == fetch_item_key(asked)
    data = fetch_items({echoed: b"Message-ID: <x@y>\r\n\r\n", b"RFC822.SIZE": 10})
    assert data[fetch_item_key(asked)] == b"Message-ID: <x@y>\r\n\r\n"


def test_whole_body_items_are_one_item_and_a_part_is_another() -> None:
    whole = fetch_item_key("BODY.PEEK[]")
    assert {fetch_item_key(k) for k in (b"BODY[]", b"body[]", b"BODY[]<0>", b"RFC822")} == {whole}
    assert fetch_item_key(b"BODY[]<512>") != whole  # a body from octet 512 on: not the message
    assert fetch_item_key(b"BODY[HEADER]") == fetch_item_key(b"RFC822.HEADER") != whole
    assert fetch_item_key(b"BODY[HEADER.FIELDS.NOT (MESSAGE-ID)]") != fetch_item_key(
        b"BODY[HEADER.FIELDS (MESSAGE-ID)]"
    )
    assert fetch_item_key(b"rfc822.size") == b"RFC822.SIZE"


@pytest.mark.parametrize("shape", ["quoted-fields", "date-after-body", "no-uidnext-on-examine"])
def test_bodies_and_envelopes_read_the_same_in_every_shape(
    shape: str, imap_user: Callable[[str], Any], dovecot: Any, tmp_path: Path
) -> None:
    user = imap_user(ACCOUNT)
    msgs = [_msg(i) for i in range(3)]
    user.bulk_maildir("INBOX", msgs)
    with FaultProxy(("127.0.0.1", dovecot.imap_port)) as proxy:
        proxy.schedule(SHAPES[shape])
        cfg = tmp_path / "config.toml"
        cfg.write_text(dovecot.account_toml(ACCOUNT, port=proxy.port))
        env = dovecot.password_env()
        account = load_config(cfg, env).accounts[ACCOUNT]
        with ImapSource(account, resolve_secret(account, env)) as src:
            state = src.examine("INBOX")
            envs = list(src.envelopes([1, 2, 3]))
            bodies = src.bodies([1, 2, 3], dates=True)
            uidnext = src.status("INBOX")["uidnext"]
        assert {f.fault.kind for f in proxy.fired} == {SHAPES[shape][0].kind}
    assert [e.message_id for e in envs] == [f"m{i}@shapes.example" for i in range(3)]
    assert [e.internal_date for e in envs] == [when for when, _ in msgs]
    assert [e.size for e in envs] == [len(raw) for _, raw in msgs]
    assert bodies == {i + 1: raw for i, (_, raw) in enumerate(msgs)}
    assert [src.internal_dates[u] for u in (1, 2, 3)] == [when for when, _ in msgs]
    # EXAMINE without UIDNEXT in that shape; STATUS still says it
    assert state.uidnext == (None if shape == "no-uidnext-on-examine" else 4)
    assert uidnext == 4


def test_the_proxy_rewrites_answers_into_the_other_servers_shapes() -> None:
    assert (
        quote_fields(b"* 1 FETCH (UID 4 BODY[HEADER.FIELDS (MESSAGE-ID DATE)] {20}\r\n")
        == b'* 1 FETCH (UID 4 BODY[HEADER.FIELDS ("MESSAGE-ID" "DATE")] {20}\r\n'
    )
    sent = (
        b'* 1 FETCH (UID 4 INTERNALDATE "09-Mar-2024 23:30:05 +0000" BODY[] {5}\r\nab\r\nc)\r\n'
        b"* 2 FETCH (UID 5 BODY[] {2}\r\nhi)\r\n"
    )
    want = (
        b'* 1 FETCH (UID 4 BODY[] {5}\r\nab\r\nc INTERNALDATE "09-Mar-2024 23:30:05 +0000")\r\n'
        b"* 2 FETCH (UID 5 BODY[] {2}\r\nhi)\r\n"
    )
    with (
        socket.create_server(("127.0.0.1", 0)) as server,
        FaultProxy(server.getsockname()) as proxy,
    ):
        proxy.schedule([Fault("date-after-body", conn=None)])
        client = socket.create_connection(("127.0.0.1", proxy.port))
        conn, _ = server.accept()
        conn.sendall(sent)
        got = b""
        client.settimeout(5)
        while len(got) < len(want):
            got += client.recv(65536)
        client.close()
        conn.close()
    assert got == want
    assert (proxy.bodies, proxy.body_bytes) == (2, 7)

"""Network faults between `mailledger sync` and a real Dovecot (the make-test slice).

A TCP proxy of our own (`testkit/faultproxy.py`) cuts, stalls, resets and
corrupts the line; `torture/network.py` runs the full randomized campaign
(`make torture`). Here: one schedule per fault kind, each judged by the same
rules (exit 0 and complete, or exit 1 with the reason shown; never a
traceback; no cursor ahead of durable data; the next clean run completes,
downloads exactly the missing bodies, holds every message once, verify clean).
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

from pipeline.config import load_config
from pipeline.store import MessageStore
from stores.errors import ConfigError
from testkit.faultproxy import Fault, FaultProxy, strip_uidnext
from torture.network import (
    ACCOUNT,
    FOLDERS,
    SyncDriver,
    one_of_each,
    run_campaign,
    seed_mailbox,
    server_truth,
    store_problems,
)

KINDS = ["drop", "stall", "rst", "truncate", "inject"]


@pytest.mark.parametrize("kind", KINDS)
def test_each_fault_ends_clean_and_the_next_run_completes(
    kind: str, dovecot: Any, tmp_path: Path
) -> None:
    [schedule] = [s for s in one_of_each() if s.faults[0].kind == kind]
    figs = run_campaign(dovecot, tmp_path, [schedule], keep=True)
    assert figs.violations == []
    assert figs.fired[kind] >= 1, f"the {kind} fault never fired"
    assert sum(figs.outcomes.values()) == 1


def test_a_stalled_server_fails_the_folder_within_the_timeout(
    dovecot: Any, imap_user: Any, tmp_path: Path
) -> None:
    imap_user("fastmail")
    seed_mailbox(dovecot, inbox=6, archive=2)
    with FaultProxy(("127.0.0.1", dovecot.imap_port)) as proxy:
        drv = SyncDriver(dovecot, tmp_path, proxy.port, timeout=1.0)
        # every connection stalls for 30 s right after its first FETCH command
        proxy.schedule([Fault("stall", conn=None, on_command="FETCH", after=0, seconds=30)])
        run = drv.sync("--apply")
        assert run.traceback is None and run.code == 1
        assert run.seconds < 10, f"a 1 s timeout took {run.seconds:.1f}s"
        errors = [f.get("error") or "" for f in run.report["accounts"][ACCOUNT]["folders"].values()]
        assert any("timed out" in e for e in errors), errors
        proxy.schedule([])
        assert drv.sync("--apply").code == 0
    with drv.open() as s:
        assert store_problems(s, ACCOUNT, server_truth(dovecot, "fastmail", FOLDERS)) == []


def test_a_server_stalling_every_body_fetch_costs_two_timeouts_per_folder_not_one_each(
    dovecot: Any, imap_user: Any, tmp_path: Path
) -> None:
    imap_user("fastmail")
    seed_mailbox(dovecot, inbox=36, archive=8)
    with FaultProxy(("127.0.0.1", dovecot.imap_port)) as proxy:
        drv = SyncDriver(dovecot, tmp_path, proxy.port, timeout=1.0)
        proxy.schedule([Fault("stall", conn=None, on_command="BODY.PEEK[]", seconds=30)])
        run = drv.sync("--apply")
        assert run.traceback is None and run.code == 1
        # one timeout per message would be 44 s; two per folder (+ reconnects) is ~5 s
        assert run.seconds < 15, f"{run.seconds:.1f}s"
        errors = [f["error"] for f in run.report["accounts"][ACCOUNT]["folders"].values()]
        assert all(e and "timed out" in e for e in errors), errors
        proxy.schedule([])
        assert drv.sync("--apply").code == 0
    with drv.open() as s:
        assert store_problems(s, ACCOUNT, server_truth(dovecot, "fastmail", FOLDERS)) == []


# Above pipeline.sync._WORKER_FETCH_MIN: the workers fetch this INBOX's bodies,
# each on a connection of its own (through the proxy too).
_WORKER_INBOX = 320


def test_workers_stalled_on_every_body_fetch_fail_the_folder_within_the_timeout(
    dovecot: Any, imap_user: Any, tmp_path: Path
) -> None:
    imap_user("fastmail")
    seed_mailbox(dovecot, inbox=_WORKER_INBOX, archive=2)
    with FaultProxy(("127.0.0.1", dovecot.imap_port)) as proxy:
        drv = SyncDriver(dovecot, tmp_path, proxy.port, timeout=1.0)
        proxy.schedule([Fault("stall", conn=None, on_command="BODY.PEEK[]", seconds=30)])
        run = drv.sync("--apply", workers=2)
        assert run.traceback is None and run.code == 1
        # two timeouts per worker chunk under way and per folder, not one per message
        assert run.seconds < 25, f"{run.seconds:.1f}s"
        inbox = run.report["accounts"][ACCOUNT]["folders"]["INBOX"]
        assert "timed out" in (inbox["error"] or ""), inbox
        assert inbox["cursor_to"] is None  # nothing durable: the cursor never moved
        proxy.schedule([])
        again = drv.sync("--apply", workers=2)
        assert again.code == 0, again.report
    with drv.open() as s:
        assert store_problems(s, ACCOUNT, server_truth(dovecot, "fastmail", FOLDERS)) == []


def test_a_worker_connection_cut_mid_body_fetch_reconnects_and_stores_each_once(
    dovecot: Any, imap_user: Any, tmp_path: Path
) -> None:
    imap_user("fastmail")
    seed_mailbox(dovecot, inbox=_WORKER_INBOX, archive=2)
    with FaultProxy(("127.0.0.1", dovecot.imap_port)) as proxy:
        drv = SyncDriver(dovecot, tmp_path, proxy.port)
        # connection 0 is the syncing process's; 1 is the first worker's: it dies
        # inside its first body FETCH, 20 kB into the answer
        proxy.schedule([Fault("drop", conn=1, on_command="BODY.PEEK[]", after=20_000)])
        run = drv.sync("--apply", workers=2)
        assert run.traceback is None and run.code == 0, run.report
        inbox = run.report["accounts"][ACCOUNT]["folders"]["INBOX"]
        assert (inbox["new"], inbox["bodies"], inbox["errors"]) == (_WORKER_INBOX,) * 2 + (0,)
        assert [(f.conn, f.fault.kind) for f in proxy.fired] == [(1, "drop")]  # it happened
    with drv.open() as s:
        assert store_problems(s, ACCOUNT, server_truth(dovecot, "fastmail", FOLDERS)) == []


def test_a_cut_in_one_folder_does_not_fail_the_next_folder(
    dovecot: Any, imap_user: Any, tmp_path: Path
) -> None:
    imap_user("fastmail")
    seed_mailbox(dovecot, inbox=6, archive=2)
    with FaultProxy(("127.0.0.1", dovecot.imap_port)) as proxy:
        drv = SyncDriver(dovecot, tmp_path, proxy.port)
        # a store holding a message fetches envelopes before bodies (an empty one
        # goes straight to the bodies)
        with MessageStore.open(drv.store) as st:
            st.add(None, b"Message-ID: <elsewhere@x>\r\nSubject: not on the server\r\n\r\nhi\r\n")
        # the first connection dies in the first folder's envelope FETCH; the
        # second folder gets a new connection in the same run
        proxy.schedule([Fault("drop", on_command="FETCH", nth=1, after=10)])
        run = drv.sync("--apply")
        assert run.code == 1 and run.traceback is None
        folders = run.report["accounts"][ACCOUNT]["folders"]
        assert sum(1 for f in folders.values() if f["error"]) == 1
        assert sum(f["bodies"] for f in folders.values()) in (2, 6)
        assert proxy.connections == 2


def test_the_proxy_strips_uidnext_from_examine_and_status() -> None:
    assert strip_uidnext(b"* OK [UIDNEXT 7] Predicted next UID\r\n", status=True) == b""
    line = b"* STATUS INBOX (MESSAGES 3 UIDNEXT 4 UIDVALIDITY 1)\r\n"
    assert strip_uidnext(line, status=True) == b"* STATUS INBOX (MESSAGES 3 UIDVALIDITY 1)\r\n"
    assert strip_uidnext(line, status=False) == line


def test_the_proxy_forwards_bytes_unchanged_without_faults() -> None:
    with (
        socket.create_server(("127.0.0.1", 0)) as server,
        FaultProxy(server.getsockname()) as proxy,
    ):
        client = socket.create_connection(("127.0.0.1", proxy.port))
        conn, _ = server.accept()
        payload = b"* 1 FETCH (BODY[] {5}\r\nab\r\nc)\r\n" * 1000
        conn.sendall(payload)
        got = b""
        while len(got) < len(payload):
            got += client.recv(65536)
        assert got == payload
        client.close()
        conn.close()


def test_account_timeout_is_read_and_checked(tmp_path: Path) -> None:
    base = (
        '[accounts.a]\ntype = "imap"\nhost = "127.0.0.1"\ntls = "none"\n'
        'username = "u"\npassword_env = "P"\n'
    )
    path = tmp_path / "c.toml"
    path.write_text(base)
    assert load_config(path, {}).accounts["a"].timeout == 60.0
    path.write_text(base + "timeout = 2.5\n")
    assert load_config(path, {}).accounts["a"].timeout == 2.5
    for bad in ("0", '"10"', "-1", "true", "100000"):
        path.write_text(base + f"timeout = {bad}\n")
        with pytest.raises(ConfigError, match=r"accounts\.a\.timeout"):
            load_config(path, {})

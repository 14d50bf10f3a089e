"""``mailledger serve --sync``: the configured sync run by a supervised child of a
real server process against a real Dovecot (testkit), as the store's one writer,
while forwarded reads keep answering: mail delivered to the IMAP server shows in
a forwarded ``search`` with no ``sync`` run by hand."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_serve import Place, Server, make_place, ml
from tests.integration.test_serve_http import alive, parent_of, wait_until


def deliver(user: Any, *numbers: int) -> None:
    for i in numbers:
        user.save(
            "INBOX",
            f"From: carol@sync.example\r\nSubject: synced {i}\r\n"
            f"Message-ID: <synced-{i}@sync.example>\r\n\r\nhello {i}\r\n".encode(),
        )


@pytest.fixture
def synced(
    tmp_path: Path, dovecot: Any, imap_user: Callable[[str], Any]
) -> Iterator[tuple[Place, Any]]:
    """A store and a config of one IMAP account (Dovecot's), its password in the
    environment ``serve`` runs in."""
    place = make_place(tmp_path)
    user = imap_user("fastmail")
    config = tmp_path / "config.toml"
    config.write_text(dovecot.account_toml("fastmail", folders=["INBOX"]))
    place.env.update(dovecot.password_env())
    place.env["XDG_CONFIG_HOME"] = str(tmp_path / "nowhere")
    yield place, (user, config)


def count(place: Place, query: str) -> int:
    done = ml(place, "search", query, "--output", "count")
    assert done.returncode == 0, done.stderr.decode()
    return int(done.stdout)


def test_mail_delivered_to_the_imap_server_is_found_by_a_served_search_with_no_manual_sync(
    synced: tuple[Place, Any],
) -> None:
    place, (user, config) = synced
    deliver(user, 1, 2)
    server = Server(place, "--sync", "--config", str(config), "--interval", "2s")
    try:
        assert wait_until(lambda: count(place, "from:carol@sync.example") == 2), server.log()
        info = server.status()
        sync = info["sync"]
        assert parent_of(sync["pid"]) == server.proc.pid  # (the server's child)
        assert sync["runs"] >= 1 and sync["last_run_exit"] == 0
        assert info["commands"] >= 1  # (the searches were the server's: forwarded)
        deliver(user, 3)  # while it serves: the next run (IDLE, or the interval) takes it
        assert wait_until(lambda: count(place, "from:carol@sync.example") == 3), server.log()
        text = ml(place, "serve", "status").stdout.decode()
        assert "sync: every 0m02s and on change (pid" in text and "exit 0" in text
        assert "sync run=" in server.log()  # (its lines are in the server's log)
    finally:
        server.stop()
    assert ml(place, "verify").returncode == 0


def test_a_killed_sync_child_is_started_again_and_stop_ends_it(
    synced: tuple[Place, Any],
) -> None:
    place, (user, config) = synced
    server = Server(place, "--sync", "--config", str(config), "--interval", "1m")
    try:
        first = wait_until(lambda: server.status()["sync"]["pid"])
        os.kill(first, signal.SIGKILL)
        again = wait_until(lambda: server.status()["sync"]["pid"] not in (None, first))
        assert again, server.log()
        info = server.status()["sync"]
        assert info["starts"] == 2 and info["last_exit"] == -9
        deliver(user, 7)  # (the new child syncs: IDLE, or its first run)
        assert wait_until(lambda: count(place, "id:synced-7@sync.example") == 1), server.log()
        second = info["pid"]
        stop = ml(place, "serve", "stop")
        assert stop.returncode == 0, stop.stderr.decode()
        assert server.proc.wait(timeout=60) == 0
        assert not alive(second)
    finally:
        server.stop()


def test_serve_sync_with_a_bad_config_is_a_usage_error_before_it_serves(tmp_path: Path) -> None:
    place = make_place(tmp_path)
    bad = tmp_path / "bad.toml"
    bad.write_text("[accounts.x]\ntype = 7\n")
    done = ml(place, "serve", "--sync", "--config", str(bad))
    assert done.returncode == 2 and str(bad) in done.stderr.decode()
    assert ml(place, "serve", "status").returncode == 1

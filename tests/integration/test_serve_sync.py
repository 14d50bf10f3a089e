"""``mailledger serve --sync``: the configured sync run by a supervised child of a
real server process against a real Dovecot (testkit), as the store's one writer,
while forwarded reads keep answering: mail delivered to the IMAP server shows in
a forwarded ``search`` with no ``sync`` run by hand."""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_serve import Place, Server, make_place, ml
from tests.integration.test_serve_http import WebServer, alive, get, parent_of, wait_until


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


def test_sync_now_over_http_runs_the_sync_at_once_and_only_a_post_with_its_token_does(
    tmp_path: Path, dovecot: Any, imap_user: Callable[[str], Any]
) -> None:
    place = make_place(tmp_path)
    user = imap_user("fastmail")
    config = tmp_path / "config.toml"
    # IDLE watches INBOX: mail put in Archive waits for the interval (an hour), or for
    # "sync now"
    config.write_text(dovecot.account_toml("fastmail", folders=["INBOX", "Archive"]))
    place.env.update(dovecot.password_env())
    web = WebServer(place, "--sync", "--config", str(config), "--interval", "1h")
    try:
        assert wait_until(lambda: web.status()["sync"]["runs"] >= 1), web.log()
        user.save("Archive", b"From: dan@sync.example\r\nSubject: archived\r\n"
                  b"Message-ID: <archived@sync.example>\r\n\r\nkept\r\n")  # fmt: skip
        assert post(web.base, "/api/v1/sync") == 403  # (no CSRF token)
        status, body = get(web.base, "/api/v1/sync")
        assert status == 200
        token = json.loads(body)["csrf"]
        time.sleep(3)  # (time for a run that should not happen)
        assert count(place, "id:archived@sync.example") == 0
        assert web.status()["sync"]["runs"] == 1 and "asked to run now" not in web.log()
        assert post(web.base, "/api/v1/sync", {"x-csrf-token": token}) == 202
        assert wait_until(lambda: count(place, "id:archived@sync.example") == 1), web.log()
        assert "watch: woke up (asked to sync now)" in web.log()
    finally:
        web.stop()


def post(base: str, path: str, headers: dict[str, str] | None = None) -> int:
    request = urllib.request.Request(base + path, data=b"", headers=headers or {}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return exc.code

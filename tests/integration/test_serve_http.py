"""``mailledger serve --listen``: the web app in a supervised child of a real server
process, over a real store in ``tmp_path``, reached over real HTTP on a free
loopback port: it answers as ``mailledger web`` does, is started again when it
dies, stops with the server, and keeps an ``--idle-exit`` server alive while
requests come."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_serve import MAILLEDGER, Place, Server, make_place, ml


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def get(base: str, path: str, timeout: float = 10) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(base + path, timeout=timeout) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def wait_until(what: Any, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = what()
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def answers(base: str) -> bool:
    try:
        return get(base, "/api/v1/stats", timeout=2)[0] == 200
    except OSError:
        return False


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # (a zombie is dead: its parent has not reaped it yet)
    return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().split(") ")[1].split()[1])


class WebServer(Server):
    """``mailledger serve --listen 127.0.0.1:PORT ...``, once its web app answers."""

    def __init__(self, place: Place, *args: str) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        super().__init__(place, "--listen", f"127.0.0.1:{self.port}", *args)
        assert wait_until(lambda: answers(self.base)), self.log()


@pytest.fixture
def place(tmp_path: Path) -> Place:
    return make_place(tmp_path)


@pytest.fixture
def web(place: Place) -> Iterator[WebServer]:
    s = WebServer(place)
    yield s
    s.stop()


def test_serve_listen_answers_http_as_web_does_and_commands_as_before(
    place: Place, web: WebServer
) -> None:
    assert f"http://127.0.0.1:{web.port}/" in web.banner
    status, body = get(web.base, "/api/v1/search?q=live&output=count")
    assert status == 200
    count = ml(place, "--no-serve", "search", "live", "--output", "count")
    assert json.loads(body) == {"count": int(count.stdout)}  # (search --output count)
    status, page = get(web.base, "/search?q=live")
    assert status == 200 and b'a class="hit"' in page
    served = ml(place, "search", "live")  # (the socket side works beside it)
    assert served.returncode == 0 and served.stdout
    info = web.status()
    assert info["listen"] == f"127.0.0.1:{web.port}"
    child = info["http"]["pid"]
    assert parent_of(child) == web.proc.pid  # (the web app runs in the server's child)
    text = ml(place, "serve", "status").stdout.decode()
    assert f"listen: http://127.0.0.1:{web.port}/ (pid {child})" in text


def test_the_host_check_and_the_security_headers_are_web_s(web: WebServer) -> None:
    def status(host: str) -> tuple[int, dict[str, str]]:
        con = http.client.HTTPConnection("127.0.0.1", web.port, timeout=10)
        try:
            con.request("GET", "/api/v1/stats", headers={"Host": host})
            answer = con.getresponse()
            return answer.status, {k.lower(): v for k, v in answer.getheaders()}
        finally:
            con.close()

    ok, headers = status(f"localhost:{web.port}")
    assert ok == 200 and headers["x-content-type-options"] == "nosniff"
    assert status(f"evil.example:{web.port}")[0] == 400
    assert status(f"127.0.0.1:{web.port + 1}")[0] == 400


def test_a_non_loopback_listen_needs_a_token_file_before_anything_starts(place: Place) -> None:
    done = ml(place, "serve", "--listen", "0.0.0.0:8025")
    assert done.returncode == 2
    assert b"not a loopback address" in done.stderr and b"--token-file" in done.stderr
    done = ml(place, "serve", "--token-file", "/nowhere")
    assert done.returncode == 2 and b"go with --listen" in done.stderr
    assert ml(place, "serve", "status").returncode == 1  # (no server was left behind)


def test_an_address_in_use_is_an_error_at_start(place: Place) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        done = ml(place, "serve", "--listen", f"127.0.0.1:{port}")
    assert done.returncode == 1
    assert f"--listen 127.0.0.1:{port}: Address already in use" in done.stderr.decode()


def test_a_killed_web_child_is_started_again_and_stop_ends_it(place: Place, web: WebServer) -> None:
    first = web.status()["http"]["pid"]
    os.kill(first, signal.SIGKILL)
    info = wait_until(lambda: (s := web.status())["http"]["pid"] not in (None, first) and s)
    assert info, web.log()
    assert info["http"]["starts"] == 2 and info["http"]["last_exit"] == -9
    assert wait_until(lambda: answers(web.base))
    second = info["http"]["pid"]
    assert "http: exit -9; starting again in 1 s" in web.log()
    stop = ml(place, "serve", "stop")
    assert stop.returncode == 0, stop.stderr.decode()
    assert web.proc.wait(timeout=30) == 0
    assert not alive(second) and not answers(web.base)


def test_sigterm_to_the_server_ends_its_web_child_cleanly(web: WebServer) -> None:
    child = web.status()["http"]["pid"]
    log = web.log
    text_before = log()
    web.proc.send_signal(signal.SIGTERM)
    assert web.proc.wait(timeout=30) == 0
    assert not alive(child)
    assert f"http: pid {child} started" in text_before


def test_http_requests_keep_an_idle_exit_server_alive_then_it_stops(place: Place) -> None:
    # --idle-exit counts HTTP requests as activity, as it counts commands
    web = WebServer(place, "--idle-exit", "3s")
    try:
        child = web.status()["http"]["pid"]
        for _ in range(10):  # 5 s of requests: more than the idle time
            assert get(web.base, "/api/v1/stats")[0] == 200
            time.sleep(0.5)
        assert web.proc.poll() is None
        assert web.proc.wait(timeout=30) == 0  # (no request since: it stops)
        assert not alive(child)
    finally:
        web.stop()


def test_a_server_killed_with_sigkill_takes_its_web_child_with_it(place: Place) -> None:
    web = WebServer(place)
    try:
        child = web.status()["http"]["pid"]
        port = web.port
        os.kill(web.proc.pid, signal.SIGKILL)
        assert web.proc.wait(timeout=30) == -signal.SIGKILL
        assert wait_until(lambda: not alive(child)), "the web child outlived its server"
    finally:
        web.stop()
    again = subprocess.Popen(
        [*MAILLEDGER, "--store", str(place.store), "serve", "--listen", f"127.0.0.1:{port}"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=place.tmp,
        env=place.env,
    )  # (the address is free again: a new server takes it)
    try:
        assert again.stderr is not None
        assert "serving" in again.stderr.readline().decode()
        assert wait_until(lambda: answers(f"http://127.0.0.1:{port}"))
    finally:
        again.terminate()
        assert again.wait(timeout=60) == 0
        again.stderr.close()  # type: ignore[union-attr]

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
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
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
    children = info["http"]["pids"]
    assert len(children) == info["http"]["children"] == min(os.cpu_count() or 1, 4)
    assert all(parent_of(c) == web.proc.pid for c in children)  # (the server's children)
    text = ml(place, "serve", "status").stdout.decode()
    pids = ", ".join(str(c) for c in children)
    plural = "s" if len(children) > 1 else ""
    assert f"listen: http://127.0.0.1:{web.port}/ (pid{plural} {pids})" in text


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


def test_a_killed_web_child_is_started_again_and_stop_ends_it(place: Place) -> None:
    web = WebServer(place, "--http-children", "2")
    try:
        before = web.status()["http"]
        assert before["children"] == 2 and len(before["pids"]) == 2 and before["starts"] == 2
        first, other = before["pids"]
        os.kill(first, signal.SIGKILL)

        def restarted() -> Any:
            info = web.status()["http"]
            return len(info["pids"]) == 2 and first not in info["pids"] and info

        info = wait_until(restarted)
        assert info, web.log()
        assert info["starts"] == 3 and info["last_exit"] == -9
        assert other in info["pids"]  # (the other child answered on meanwhile)
        assert wait_until(lambda: answers(web.base))
        assert "http-1: exit -9; starting again in 1 s" in web.log()
        stop = ml(place, "serve", "stop")
        assert stop.returncode == 0, stop.stderr.decode()
        assert web.proc.wait(timeout=30) == 0
        assert not any(alive(pid) for pid in info["pids"]) and not answers(web.base)
    finally:
        web.stop()


def connections(web: WebServer, count: int) -> list[http.client.HTTPConnection]:
    """``count`` keep-alive connections, each having had one answer."""
    made = []
    for _ in range(count):
        con = http.client.HTTPConnection("127.0.0.1", web.port, timeout=30)
        con.request("GET", "/api/v1/stats")
        answer = con.getresponse()
        answer.read()
        assert answer.status == 200
        made.append(con)
    return made


def holders(web: WebServer, pids: list[int]) -> dict[int, int]:
    """How many of the connections to the address each of ``pids`` holds."""
    held = {}
    for pid in pids:
        mine = psutil.Process(pid).net_connections(kind="tcp")
        held[pid] = sum(1 for c in mine if c.laddr and c.laddr.port == web.port and c.raddr)
    return held


def count_all(base: str) -> int:
    status, body = get(base, "/api/v1/search?q=*&output=count")
    assert status == 200, body
    found: int = json.loads(body)["count"]
    return found


def test_every_web_child_answers_on_the_one_address_and_sees_a_commit_at_its_next_request(
    place: Place,
) -> None:
    web = WebServer(place, "--http-children", "3")
    try:
        info = web.status()["http"]
        assert info["children"] == 3 and len(set(info["pids"])) == 3
        assert all(parent_of(pid) == web.proc.pid for pid in info["pids"])
        text = ml(place, "serve", "status").stdout.decode()
        pids = ", ".join(str(p) for p in info["pids"])
        assert f"listen: http://127.0.0.1:{web.port}/ (pids {pids})" in text
        before = count_all(web.base)
        # the kernel spreads connections across the children's sockets: each holds
        # some of 40 (a child left with none: about 3 chances in 10 million)
        kept = connections(web, 40)
        held = holders(web, info["pids"])
        assert all(held.values()) and sum(held.values()) == 40, held
        # a writer commits while the children answer (none holds the projection
        # file between requests), and each one's next request sees it
        mbox = place.tmp / "late.mbox"
        mbox.write_bytes(
            b"From ada Mon Jul  1 09:00:00 2024\nFrom: ada@example.org\n"
            b"Subject: late\nMessage-ID: <late@example.org>\n\nlater\n"
        )
        stop = threading.Event()
        asked: list[int] = []

        def hammer() -> None:
            while not stop.is_set():
                asked.append(count_all(web.base))

        readers = [threading.Thread(target=hammer) for _ in range(4)]
        for t in readers:
            t.start()
        try:
            done = ml(place, "import", "mbox", str(mbox))  # (forwarded to the server)
        finally:
            stop.set()
            for t in readers:
                t.join()
        assert done.returncode == 0, done.stderr.decode()
        assert asked and set(asked) <= {before, before + 1}
        # no request under way: no child holds the projection file (a plain DuckDB
        # opens it for writing at once)
        probe = f"import duckdb; duckdb.connect({str(place.store / 'projections.duckdb')!r})"
        opened = subprocess.run([sys.executable, "-c", probe], capture_output=True, timeout=60)
        assert opened.returncode == 0, opened.stderr.decode()
        for con in kept:  # each child's next request sees it
            con.request("GET", "/api/v1/search?q=*&output=count")
            answer = con.getresponse()
            assert answer.status == 200
            assert json.loads(answer.read()) == {"count": before + 1}
            con.request("GET", "/m/late@example.org")
            answer = con.getresponse()
            answer.read()
            assert answer.status == 200
            con.close()
    finally:
        web.stop()


def test_sigterm_to_the_server_ends_its_web_child_cleanly(web: WebServer) -> None:
    children = web.status()["http"]["pids"]
    log = web.log
    text_before = log()
    web.proc.send_signal(signal.SIGTERM)
    assert web.proc.wait(timeout=30) == 0
    assert children and not any(alive(c) for c in children)
    for k, child in enumerate(children, 1):
        assert f"http-{k}: pid {child} started" in text_before


def test_http_requests_keep_an_idle_exit_server_alive_then_it_stops(place: Place) -> None:
    # --idle-exit counts HTTP requests as activity, as it counts commands
    web = WebServer(place, "--idle-exit", "3s")
    try:
        children = web.status()["http"]["pids"]
        for _ in range(10):  # 5 s of requests: more than the idle time
            assert get(web.base, "/api/v1/stats")[0] == 200
            time.sleep(0.5)
        assert web.proc.poll() is None
        assert web.proc.wait(timeout=30) == 0  # (no request since: it stops)
        assert children and not any(alive(c) for c in children)
    finally:
        web.stop()


def test_a_server_killed_with_sigkill_takes_its_web_child_with_it(place: Place) -> None:
    web = WebServer(place)
    try:
        children = web.status()["http"]["pids"]
        port = web.port
        os.kill(web.proc.pid, signal.SIGKILL)
        assert web.proc.wait(timeout=30) == -signal.SIGKILL
        gone = wait_until(lambda: not any(alive(c) for c in children))
        assert children and gone, "a web child outlived its server"
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


@pytest.mark.parametrize("count", [1, 3])
def test_connections_accepted_on_the_bound_sockets_send_at_once_tcp_nodelay(count: int) -> None:
    """asyncio (uvicorn) sets TCP_NODELAY only on connections accepted from a socket
    made with IPPROTO_TCP: without it a keep-alive answer written as a head and a
    body waited for the client's delayed ACK (40 ms a request)."""
    import asyncio

    from pipeline.web.running import Listen, bind

    port = free_port()
    sockets = bind(Listen("127.0.0.1", port, None, ()), count)
    seen: list[int] = []

    async def main() -> None:
        def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            sock = writer.get_extra_info("socket")
            seen.append(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        servers = [await asyncio.start_server(accepted, sock=s) for s in sockets]
        for _ in range(4 * count):
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
        while len(seen) < 4 * count:
            await asyncio.sleep(0.01)
        for server in servers:
            server.close()

    try:
        asyncio.run(asyncio.wait_for(main(), 30))
    finally:
        for s in sockets:
            s.close()
    assert len(seen) == 4 * count and all(seen)
    assert all(s.proto == socket.IPPROTO_TCP for s in sockets)


def test_a_web_child_idle_after_requests_is_replaced_by_a_fresh_one(place: Place) -> None:
    # (--keep-warm: after a load a child kept the memory its allocators held; a
    # fresh one starts at once, no backoff, and one that answered nothing stays)
    web = WebServer(place, "--http-children", "1", "--keep-warm", "1s")
    try:
        first = web.status()["http"]["pids"]  # (it answered the start's request)

        def replaced() -> Any:
            info = web.status()["http"]
            return info["starts"] == 2 and info["pids"] and info["pids"] != first and info

        info = wait_until(replaced)
        assert info, web.log()
        time.sleep(3.0)  # the fresh child answered nothing: it is kept
        assert web.status()["http"]["pids"] == info["pids"]
        log = web.log()
        assert "http-1: idle for --keep-warm: replaced by a fresh one" in log
        assert "starting again" not in log  # (no backoff, no warning)
        code, body = get(web.base, "/api/v1/search?q=live&output=count")
        assert code == 200 and json.loads(body)["count"] > 0
    finally:
        web.stop()

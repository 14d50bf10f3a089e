"""``mailledger serve``: a real server process on a store in ``tmp_path``, and the
command line run as a real subprocess beside it, answering as it does without it."""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pipeline.serve import client, protocol

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "fixtures"
MAILLEDGER = [sys.executable, "-m", "pipeline"]
# a query that runs until it is interrupted (DuckDB counts plain ranges too fast)
ENDLESS = "select sum(hash(i)) from range(1000000000000) t(i)"


@dataclass
class Place:
    """A store made by a real import, and the environment every command runs in."""

    tmp: Path
    store: Path
    env: dict[str, str]


def make_place(tmp: Path) -> Place:
    run = tmp / "run"
    run.mkdir(mode=0o700, parents=True)
    env = {
        **os.environ,
        "XDG_RUNTIME_DIR": str(run),
        "XDG_STATE_HOME": str(tmp / "state"),
        "HOME": str(tmp),
    }
    env.pop("MAILLEDGER_STORE", None)
    place = Place(tmp, tmp / "store", env)
    done = ml(place, "import", "maildir", str(FIXTURES / "maildir"))
    assert done.returncode == 0, done.stderr.decode()
    return place


def ml(place: Place, *argv: str, **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [*MAILLEDGER, "--store", str(place.store), *argv],
        capture_output=True,
        cwd=place.tmp,
        env=place.env,
        timeout=120,
        check=False,
        **kwargs,
    )


def _sigint_as_python_sets_it() -> None:
    # (a test run from a shell's background job inherits SIGINT ignored, and Python
    # then leaves it ignored: a Ctrl-C must reach the client as at a terminal)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Server:
    """``mailledger serve`` as a subprocess, once it says it serves."""

    def __init__(self, place: Place, *args: str) -> None:
        self.place = place
        self.proc = subprocess.Popen(
            [*MAILLEDGER, "--store", str(place.store), "serve", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            cwd=place.tmp,
            env=place.env,
        )
        assert self.proc.stderr is not None
        self.banner = self.proc.stderr.readline().decode()
        assert "serving" in self.banner, self.banner + self.proc.stderr.read().decode()
        self.point = protocol.endpoint(place.store, place.env)

    def status(self) -> dict[str, Any]:
        done = ml(self.place, "serve", "status", "--json")
        assert done.returncode == 0, done.stderr.decode()
        info: dict[str, Any] = json.loads(done.stdout)
        return info

    def log(self) -> str:
        return Path(self.status()["log"]).read_text()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=60)
        assert self.proc.stderr is not None
        self.proc.stderr.close()


@pytest.fixture
def place(tmp_path: Path) -> Place:
    return make_place(tmp_path)


@pytest.fixture
def server(place: Place) -> Iterator[Server]:
    s = Server(place)
    yield s
    s.stop()


READS = [
    ("search", "live"),
    ("search", "from:ada", "--json"),
    ("find", "subject", "Fwd: Re: LIVE  wire"),
    ("show", "<plan-1@example.org>"),
    ("show", "<plan-1@example.org>", "--raw"),
    ("thread", "<plan-4@example.pl>"),
    ("thread", "<plan-4@example.pl>", "--json"),
    ("query", "select count(*) as n, min(subject) as first from messages"),
    ("query", "select nope"),  # a usage error: exit 2, the reason on stderr
    ("show", "<nowhere@example.org>"),  # not found: exit 1
    ("cursor", "log", "none", "INBOX"),
]


def assert_answered_as_in_process(place: Place, argv: tuple[str, ...]) -> None:
    """``argv`` served (the test's server) printed and ended as it does in-process."""
    served, here = ml(place, *argv), ml(place, "--no-serve", *argv)
    assert (served.returncode, served.stdout, served.stderr) == (
        here.returncode,
        here.stdout,
        here.stderr,
    ), argv


def test_a_served_command_answers_exactly_as_the_command_run_in_process(
    place: Place, server: Server
) -> None:
    for argv in READS:
        assert_answered_as_in_process(place, argv)
    assert server.status()["commands"] == len(READS)  # (each one the server's, none here)
    codes = {ml(place, *argv).returncode for argv in READS}
    assert codes == {0, 1, 2}  # (the table holds failures, with their stderr, too)


# what the thin path may import beyond what the interpreter's start did: the
# interpreter's own C modules, not ``socket``, ``json``, ``hashlib`` or ``contextlib``
# (25 ms of CPU together on a loaded two-core machine; docs/serve.md, "Figures")
THIN_IMPORTS = {
    "__future__",
    "pipeline",
    "pipeline.serve",
    "pipeline.serve.client",
    "pipeline.serve.protocol",
    "_socket",
    "_sha256",  # (Python 3.11; _sha2 from 3.12)
    "_sha2",
    "_json",
    "fcntl",
    "struct",
    "_struct",
}


def test_the_thin_client_imports_neither_duckdb_nor_pyarrow(place: Place, server: Server) -> None:
    seen = place.tmp / "modules.txt"
    # (the modules the command added, written as it ends: the client leaves by
    # os._exit once the server has answered, so nothing after main() would run)
    script = (
        "import sys, os\n"
        "before = set(sys.modules)\n"
        f"sys.argv = ['mailledger', '--store', {str(place.store)!r}, 'search', 'live']\n"
        "leave = os._exit\n"
        "def record(code):\n"
        f"    with open({str(seen)!r}, 'w') as f:\n"
        "        f.write('\\n'.join(sorted(set(sys.modules) - before)))\n"
        "    leave(code)\n"
        "os._exit = record\n"
        "from pipeline.serve.client import main\n"
        "main()\n"
        "raise SystemExit('main() returned')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, env=place.env, timeout=120
    )
    assert done.returncode == 0, done.stderr.decode()
    assert b"<plan-1@example.org>" in done.stdout
    added = set(seen.read_text().split())
    assert "pipeline.serve.client" in added
    assert added - THIN_IMPORTS == set()
    assert server.status()["commands"] == 1


def test_without_a_config_file_the_thin_client_finds_the_default_store_as_the_cli_does(
    tmp_path: Path,
) -> None:
    from pipeline.cli.common import resolve_store

    home = tmp_path / "home"
    envs = [
        {"HOME": str(home)},
        {"HOME": str(home), "XDG_DATA_HOME": str(tmp_path / "data")},
        {"HOME": str(home), "XDG_CONFIG_HOME": str(tmp_path / "nothing")},
    ]
    for env in envs:
        args = argparse.Namespace(store=None, config=None, env=env)
        resolve_store(args)
        assert client._store({}, env) == str(args.store), env
    # a config file naming the store: the CLI's own resolution
    config = home / ".config" / "mailledger" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(f'[store]\npath = "{tmp_path / "named"}"\n')
    assert client._store({}, envs[0]) == str(tmp_path / "named")


def test_a_client_of_another_version_is_never_answered(place: Place, server: Server) -> None:
    point = server.point
    # another version names another socket: the two never meet...
    assert protocol.endpoint(place.store, place.env, version="0.0.0+other").socket != point.socket
    # ...and one that reaches this socket all the same is refused at the handshake
    assert client.connect(point, version="0.0.0+other") is None
    for field, value in (("protocol", protocol.PROTOCOL + 1), ("store_format", 99)):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(point.socket)
            protocol.send_msg(sock, {**protocol.hello(), field: value})
            reply, _ = protocol.recv_msg(sock)
            assert reply["ok"] is False and reply["reason"].startswith(field), reply
            assert sock.recv(1) == b""  # (closed: nothing more is heard)
    assert server.status()["commands"] == 0
    assert server.log().count("refused a client") == 3


def test_a_command_for_another_store_is_handed_back_to_the_client(
    tmp_path: Path, place: Place, server: Server
) -> None:
    other = make_place(tmp_path / "other")
    out_r, out_w = os.pipe()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(server.point.socket)
        protocol.send_msg(sock, protocol.hello())
        assert protocol.recv_msg(sock)[0]["ok"] is True
        request = {
            "op": "run",
            "argv": ["--store", str(other.store), "search", "live"],
            "cwd": str(tmp_path),
            "env": place.env,
            "umask": 0o022,
        }
        protocol.send_msg(sock, request, fds=[out_w, out_w, out_w])
        os.close(out_w)
        reply, _ = protocol.recv_msg(sock)
    assert reply == {"fallback": "another store"}
    with os.fdopen(out_r, "rb") as printed:
        assert printed.read() == b""  # (nothing ran)


def test_a_stale_socket_of_a_killed_server_is_removed_and_the_command_runs_here(
    place: Place,
) -> None:
    server = Server(place)
    os.kill(server.proc.pid, signal.SIGKILL)
    server.stop()
    assert os.path.exists(server.point.socket)  # (left behind by kill -9)
    here = ml(place, "--no-serve", "search", "live")
    done = ml(place, "search", "live")
    assert (done.returncode, done.stdout, done.stderr) == (0, here.stdout, b"")
    assert not os.path.exists(server.point.socket)
    assert not os.path.exists(server.point.info)


def _interrupted(
    place: Place, *argv: str, log: Server | None, again: bool
) -> subprocess.CompletedProcess[bytes]:
    """Run ``argv`` and Ctrl-C it once it is under way (``again``: once more each
    second until it ends); what it printed and its code."""
    proc = subprocess.Popen(
        [*MAILLEDGER, "--store", str(place.store), *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=place.tmp,
        env=place.env,
        preexec_fn=_sigint_as_python_sets_it,
    )
    deadline = time.monotonic() + 60
    if log is not None:  # under way: the server has handed it to a worker
        while "range(" not in log.log() and time.monotonic() < deadline:
            time.sleep(0.1)
    time.sleep(2.0)  # (the query itself started)
    proc.send_signal(signal.SIGINT)
    while again and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_ctrl_c_cancels_a_served_command(place: Place, server: Server) -> None:
    # One Ctrl-C is enough: the server repeats SIGINT to the worker and kills it after
    # 3 s (a worker that would not end).
    served = _interrupted(place, "query", ENDLESS, log=server, again=False)
    assert (served.returncode, served.stdout, served.stderr) == (
        130,
        b"",
        b"mailledger: interrupted\n",
    )
    status = server.status()
    assert (status["commands"], status["running"]) == (1, 0)  # (its worker is gone)
    assert "cancelled" in server.log()


def test_one_ctrl_c_ends_a_long_query_in_process_and_in_a_served_worker(
    place: Place, server: Server
) -> None:
    # DuckDB's client alone saw a SIGINT only at some points of a query: about one
    # run in two ran on through it (db.interruptible). One Ctrl-C each, no repeat.
    for argv in [("--no-serve", "query", ENDLESS)] * 3 + [("query", ENDLESS)] * 2:
        done = _interrupted(place, *argv, log=None, again=False)
        assert (done.returncode, done.stderr) == (130, b"mailledger: interrupted\n"), argv
    log = server.log()
    assert log.count("cancelled") == 2 and "killed" not in log  # (it ended by itself)


def test_a_client_gone_mid_command_has_its_command_cancelled(place: Place, server: Server) -> None:
    # (the worker answers the client itself, and the server no longer takes a client
    # closing its end for one gone unless the worker has not answered: a killed
    # client's command is still cancelled)
    proc = subprocess.Popen(
        [*MAILLEDGER, "--store", str(place.store), "query", ENDLESS],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=place.tmp,
        env=place.env,
    )
    deadline = time.monotonic() + 60
    while "range(" not in server.log() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.0)
    proc.kill()
    proc.wait(timeout=30)
    while server.status()["running"] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert server.status()["running"] == 0
    assert "cancelled" in server.log()
    done = ml(place, "search", "--output", "count", "*")  # (the server answers on)
    assert done.returncode == 0 and int(done.stdout) > 0


def test_writes_are_carried_out_by_the_server_with_the_output_and_code_of_in_process(
    tmp_path: Path,
) -> None:
    served, alone = make_place(tmp_path / "a"), make_place(tmp_path / "b")
    server = Server(served)
    try:
        steps = [
            ("import", "mbox", str(FIXTURES / "lists.mbox")),
            ("import", "mbox", str(FIXTURES / "lists.mbox")),  # (all known now)
            ("delete", "<plan-1@example.org>", "--reason", "handled"),
            ("delete", "<plan-1@example.org>"),  # gone already: exit 1
            ("search", "live"),
        ]
        for argv in steps:
            a, b = ml(served, *argv), ml(alone, *argv)
            assert (a.returncode, a.stdout, a.stderr) == (b.returncode, b.stdout, b.stderr), argv
        assert server.status()["commands"] == len(steps)
        assert {ml(alone, *argv).returncode for argv in steps[3:4]} == {1}
    finally:
        server.stop()
    assert ml(served, "verify").returncode == 0


def test_a_write_is_seen_by_the_next_served_search(tmp_path: Path) -> None:
    # The spare worker waits with nothing of the store open (its DuckDB instance
    # started, no file attached): a write, forwarded or run beside the server, takes
    # the projection file for writing at once, and the next served search sees it.
    place = make_place(tmp_path)
    server = Server(place)
    try:

        def count() -> int:
            done = ml(place, "search", "--output", "count", "*")
            assert done.returncode == 0, done.stderr.decode()
            return int(done.stdout)

        before = count()  # (a spare is forked for the next command meanwhile)
        forwarded = ml(place, "import", "mbox", str(FIXTURES / "lists.mbox"))
        assert forwarded.returncode == 0, forwarded.stderr.decode()
        assert count() == before + 2
        assert server.status()["commands"] == 3
        # a writer that is not the server's (a cron job with --no-serve): not kept
        # waiting by the server's idle spare, and seen by the next served search
        time.sleep(1.0)  # (the spare forked after the last command is warm by now)
        here = ml(place, "--no-serve", "delete", "<plan-1@example.org>", "--reason", "test")
        assert here.returncode == 0, here.stderr.decode()
        assert b"not updated now" not in here.stderr  # (a LockTimeout after 30 s)
        assert count() == before + 1
        assert server.status()["commands"] == 4
    finally:
        server.stop()


def test_replay_is_refused_by_name_while_a_server_holds_the_store(
    place: Place, server: Server
) -> None:
    for argv in (("replay",), ("--no-serve", "replay")):
        done = ml(place, *argv)
        assert done.returncode == 1, argv
        assert done.stderr.decode().startswith(
            f"mailledger: error: store is served by pid {server.proc.pid}:"
        )
        assert b"Traceback" not in done.stderr and done.stdout == b""
    assert ml(place, "serve", "stop").returncode == 0
    assert ml(place, "replay").returncode == 0


def test_status_describes_the_server_and_stop_ends_it(place: Place, server: Server) -> None:
    done = ml(place, "serve", "status")
    assert done.returncode == 0, done.stderr.decode()
    lines = done.stdout.decode().splitlines()
    assert [ln.split(":")[0] for ln in lines] == [
        "pid",
        "version",
        "store",
        "socket",
        "log",
        "uptime",
        "worker",
    ]
    assert lines[0] == f"pid: {server.proc.pid}"
    assert lines[-1].endswith("holds nothing of the store (--keep-warm 0m30s)")  # (cold)
    info = server.status()
    assert info["pid"] == server.proc.pid
    assert info["store"] == os.path.realpath(place.store)
    assert info["socket"] == server.point.socket and os.path.exists(info["socket"])
    assert info["version"] == protocol.package_version()
    assert Path(info["log"]).is_file()

    stop = ml(place, "serve", "stop")
    assert stop.returncode == 0, stop.stderr.decode()
    assert f"(pid {server.proc.pid})" in stop.stdout.decode()
    assert server.proc.wait(timeout=30) == 0
    assert not os.path.exists(server.point.socket)
    gone = ml(place, "serve", "status")
    assert (gone.returncode, gone.stdout) == (1, b"")
    assert gone.stderr.decode() == f"mailledger: no server for {os.path.realpath(place.store)}\n"
    assert ml(place, "serve", "stop").returncode == 0  # (nothing to stop: fine)


def test_an_idle_server_stops_by_itself(place: Place) -> None:
    server = Server(place, "--idle-exit", "1s")
    try:
        assert server.proc.wait(timeout=60) == 0
    finally:
        server.stop()
    assert not os.path.exists(server.point.socket)


def test_a_second_server_of_a_served_store_is_refused(place: Place, server: Server) -> None:
    done = ml(place, "serve")
    assert done.returncode == 1
    assert f"is served already by pid {server.proc.pid}" in done.stderr.decode()
    assert server.proc.poll() is None


def test_a_bad_idle_exit_is_a_usage_error(place: Place) -> None:
    done = ml(place, "serve", "--idle-exit", "soon")
    assert done.returncode == 2
    assert b"not an interval: 'soon'" in done.stderr

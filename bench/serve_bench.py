"""``make bench``: ``mailledger serve`` answering the command line, beside ``notmuch
count`` of the same queries on the same mail (issue 37's targets).

A server is started on the bench store (its socket in a runtime directory of its
own), then, every figure from this one run:

- **whole command**: ``mailledger search --output count Q`` and the first page,
  ``mailledger search --limit 50 Q`` (the console script of this environment, as a
  user types it), beside ``notmuch count Q`` and ``notmuch search --limit=50 Q``, each a process
  started and waited for here, alternated (A B A B: a drift of the machine's speed
  moves both), a pause between runs; p50, p95 and their ratio, and the counts,
  which must agree. The same command in-process (``--no-serve``) for reference.
- **thin client alone**: the same console script against a stub server in this
  process that answers at once (the client's start, imports, handshake, exit),
  beside the interpreter's bare start (``python -I -S``) and this environment's
  (``python -c pass``: ``site`` and whatever ``.pth`` files it runs, such as an
  editable install's finder).
- **server side**: the socket round trip of a served command from a warm client
  (connect, handshake, the command in the server's worker, its answer): the first
  page of each query (``search --limit 50 Q``, 50 summary lines), its count, and
  ``show ID`` of sampled messages.
- **idle memory**: RSS of the server (and its anonymous part) and of its spare
  worker after a second idle, and their PSS (shared pages divided among the
  processes sharing them).

Nothing here gates; it prints, and returns the figures for ``bench.run``'s JSON line.

    python -m bench.serve_bench --store STORE [--notmuch DIR] [--runs 30] [--serve-arg=ARG]
        [--mailledger PATH]  (another install's console script: a normal install's,
                              an older version's)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pipeline.serve import protocol

__all__ = ["QUERIES", "TARGETS", "main", "serve_figures"]

QUERIES = (
    "from:alex@home.example.net",  # an address
    'subject:"meeting notes"',  # a phrase of the full-text index
    "date:2024-01-01..2024-06-30",  # a range
    "subject:release and from:example.org",  # two conditions
)
"""Queries that notmuch counts as mailledger does on the bench corpus (bench.peers)."""

TARGETS = {
    "serve_count_p50_ms": 50.0,
    "serve_whole_page_p50_ms": 60.0,
    "thin_client_p50_ms": 35.0,
    "serve_page_p50_ms": 15.0,
    "serve_show_p50_ms": 30.0,
    "serve_idle_rss_mib": 150.0,
}
"""Issue 37's targets (the count's is for 100,000 messages; the pages' for 1,000,000)."""

_PAUSE = 0.1  # seconds between two timed whole commands


def _percentiles(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return statistics.median(ordered), ordered[max(0, round(0.95 * len(ordered)) - 1)]


def _timed(cmd: list[str], env: dict[str, str]) -> tuple[float, str]:
    """Wall ms of one whole process, and what it printed."""
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, env=env, check=False)
    ms = (time.perf_counter() - t0) * 1000
    if done.returncode not in (0, 1):
        sys.exit(f"serve_bench: {' '.join(cmd)} failed ({done.returncode}): {done.stderr!r}")
    return ms, done.stdout.decode().strip()


def _console_script() -> list[str]:
    """This environment's ``mailledger`` (the console script a user runs)."""
    script = Path(sys.executable).parent / "mailledger"
    return [str(script)] if script.exists() else [sys.executable, "-m", "pipeline"]


@contextmanager
def _server(
    ml: list[str], store: Path, env: dict[str, str], args: list[str]
) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(
        [*ml, "--store", str(store), "serve", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stderr is not None
    banner = proc.stderr.readline().decode()
    if "serving" not in banner:
        proc.kill()
        sys.exit(f"serve_bench: the server did not start: {banner}{proc.stderr.read().decode()}")
    try:
        yield proc
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        proc.stderr.close()


@contextmanager
def _stub(store: str, env: dict[str, str]) -> Iterator[None]:
    """A server of ``store`` that answers every command at once with exit 0."""
    point = protocol.endpoint(store, env)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(point.socket)
    listener.listen(16)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                try:
                    protocol.recv_msg(conn)
                    protocol.send_msg(conn, {"ok": True, "pid": os.getpid()})
                    _, fds = protocol.recv_msg(conn, max_fds=3)
                    for fd in fds:
                        os.close(fd)
                    protocol.send_msg(conn, {"exit": 0})
                except (OSError, protocol.ProtocolError):
                    pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        listener.close()
        os.unlink(point.socket)


def _round_trips(store: Path, env: dict[str, str], argv: list[str], runs: int) -> list[float]:
    """Ms of each socket round trip of ``argv`` served, from this (warm) process."""
    from pipeline.serve.client import connect

    point = protocol.endpoint(store, env)
    nowhere = os.open(os.devnull, os.O_RDWR)
    request = {
        "op": "run",
        "argv": ["--store", str(store), *argv],
        "cwd": os.getcwd(),
        "env": env,
        "umask": 0o077,
        "stdio": {},
    }
    times = []
    try:
        for _ in range(runs):
            t0 = time.perf_counter()
            sock = connect(point)
            assert sock is not None, "no server"
            try:
                protocol.send_msg(sock, request, fds=[nowhere, nowhere, nowhere])
                reply, _ = protocol.recv_msg(sock)
            finally:
                sock.close()
            times.append((time.perf_counter() - t0) * 1000)
            if reply.get("exit") not in (0, 1):
                sys.exit(f"serve_bench: served {argv} answered {reply}")
            time.sleep(_PAUSE)
    finally:
        os.close(nowhere)
    return times


def _memory(pid: int, warm: bool) -> dict[str, float]:
    """RSS MiB of the server and its spare worker, and the PSS MiB of both
    (``warm``: the spare is a worker back from the last read, the store kept)."""
    import psutil

    server = psutil.Process(pid)
    mib = 1 << 20
    out = {"serve_idle_rss_mib": server.memory_info().rss / mib}
    children = server.children()
    spare = "warm" if warm else "spare"
    out[f"{spare}_idle_rss_mib"] = sum(c.memory_info().rss for c in children) / mib
    out[f"serve_and_{spare}_pss_mib"] = (
        sum(p.memory_full_info().pss for p in [server, *children]) / mib
    )
    if warm:
        return out
    # (RSS also counts the libraries' pages mapped from files, which depend on the
    # kernel and on how their files were read: the same server read 53 MiB of them
    # from one venv's copy of DuckDB and pyarrow, 86 MiB from another's; its own
    # memory is the anonymous part)
    with open(f"/proc/{pid}/status") as f:
        anon = next((ln.split()[1] for ln in f if ln.startswith("RssAnon:")), "0")
    out["serve_idle_anon_mib"] = int(anon) / 1024
    return out


def serve_figures(
    store: Path,
    notmuch: Path | None,
    runs: int = 30,
    script: Path | None = None,
    serve_args: list[str] | None = None,
) -> dict[str, Any]:
    """Measure, print, and return every figure (``notmuch``: a notmuch home of the
    same mail, made by ``testkit.peers.Notmuch``; None: no notmuch column;
    ``script``: another install's ``mailledger`` to measure, its server and client,
    and its interpreter's start; ``serve_args``: the server's options, such as
    ``--keep-warm 0``)."""
    serve_args = list(serve_args or [])
    ml = [str(script)] if script is not None else _console_script()
    python = str(Path(ml[0]).parent / "python") if script is not None else sys.executable
    work = Path(tempfile.mkdtemp(prefix="serve-bench-"))
    (work / "run").mkdir(mode=0o700)
    env = {**os.environ, "XDG_RUNTIME_DIR": str(work / "run"), "XDG_STATE_HOME": str(work)}
    env.pop("MAILLEDGER_STORE", None)
    nm_env = {**env, "NOTMUCH_CONFIG": str(notmuch / "config"), "TZ": "UTC"} if notmuch else None
    if notmuch is not None and not shutil.which("notmuch"):
        nm_env = None
    figures: dict[str, Any] = {"load_before": os.getloadavg()[0]}
    rows: list[tuple[str, tuple[float, float], tuple[float, float] | None]] = []
    try:
        with _server(ml, store, env, serve_args) as server:
            whole: dict[str, tuple[list[float], list[float]]] = {
                "count": ([], []),
                "page": ([], []),
            }
            for kind, ours_argv, theirs_argv, n in (
                ("count", ["search", "--output", "count"], ["count"], runs),
                ("page", ["search", "--limit", "50"], ["search", "--limit=50"], max(5, runs // 2)),
            ):
                for q in QUERIES:
                    served = [*ml, "--store", str(store), *ours_argv, q]
                    ours, theirs, counts = [], [], set()
                    _timed(served, env)  # (warm)
                    for _ in range(n):
                        ms, out = _timed(served, env)
                        ours.append(ms)
                        counts.add(
                            ("mailledger", out if kind == "count" else str(len(out.split("\n"))))
                        )
                        time.sleep(_PAUSE)
                        if nm_env is not None:
                            ms, out = _timed(["notmuch", *theirs_argv, q], nm_env)
                            theirs.append(ms)
                            if kind == "count":
                                counts.add(("notmuch", out))
                            time.sleep(_PAUSE)
                    answers = {who: a for who, a in counts}
                    agree = len({a for _, a in counts}) == 1
                    label = f"{kind} {q} = {answers['mailledger']}" + (
                        " lines" if kind == "page" else ""
                    )
                    rows.append(
                        (
                            label
                            + (
                                ""
                                if agree or nm_env is None
                                else f" (notmuch {answers['notmuch']})"
                            ),
                            _percentiles(ours),
                            _percentiles(theirs) if theirs else None,
                        )
                    )
                    whole[kind][0].extend(ours)
                    whole[kind][1].extend(theirs)
            count_walls, notmuch_walls = whole["count"]
            figures["serve_count_p50_ms"], figures["serve_count_p95_ms"] = _percentiles(count_walls)
            if notmuch_walls:
                figures["notmuch_count_p50_ms"], figures["notmuch_count_p95_ms"] = _percentiles(
                    notmuch_walls
                )
            figures["serve_whole_page_p50_ms"], figures["serve_whole_page_p95_ms"] = _percentiles(
                whole["page"][0]
            )
            if whole["page"][1]:
                figures["notmuch_page_p50_ms"] = _percentiles(whole["page"][1])[0]
            here = [*ml, "--no-serve", "--store", str(store), "search", "--output", "count"]
            inproc = [_timed([*here, QUERIES[0]], env)[0] for _ in range(max(5, runs // 3))]
            figures["inprocess_count_p50_ms"] = _percentiles(inproc)[0]

            # the thin client alone, and the interpreter's start
            fake = str(work / "no-store")
            with _stub(fake, env):
                thin = [*ml, "--store", fake, "search", "--output", "count", "x"]
                walls = [_timed(thin, env)[0] for _ in range(runs)]
            figures["thin_client_p50_ms"], figures["thin_client_p95_ms"] = _percentiles(walls)
            bare = [_timed([python, "-I", "-S", "-c", "pass"], env)[0] for _ in range(runs)]
            venv = [_timed([python, "-c", "pass"], env)[0] for _ in range(runs)]
            figures["python_IS_start_p50_ms"] = _percentiles(bare)[0]
            figures["python_start_p50_ms"] = _percentiles(venv)[0]

            # server side: from a warm client, what the server and its worker take
            pages, counts_rt = [], []
            for q in QUERIES:
                page = _round_trips(store, env, ["search", "--limit", "50", q], runs // 2)
                figures[f"serve_page_p50_ms {q}"] = _percentiles(page)[0]
                pages += page
                counts_rt += _round_trips(store, env, ["search", "--output", "count", q], runs // 2)
            figures["serve_page_p50_ms"], figures["serve_page_p95_ms"] = _percentiles(pages)
            figures["serve_count_rt_p50_ms"] = _percentiles(counts_rt)[0]
            ids = _timed(
                [*ml, "--store", str(store), "search", "--format", "ids", "--limit", "20", "*"],
                env,
            )[1].split()
            shows = []
            for mid in ids:
                shows += _round_trips(store, env, ["show", mid], 2)
            figures["serve_show_p50_ms"], figures["serve_show_p95_ms"] = _percentiles(shows)
            time.sleep(1.0)
            warm = "--keep-warm" not in serve_args and script is None
            if warm:  # the warm worker now; the cold spare once its keep is over
                figures.update(_memory(server.pid, warm=True))
                time.sleep(31.0)
            figures.update(_memory(server.pid, warm=False))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    figures["load_after"] = os.getloadavg()[0]
    _print(figures, rows, ml, serve_args)
    return figures


def _print(
    figures: dict[str, Any],
    rows: list[tuple[str, tuple[float, float], tuple[float, float] | None]],
    ml: list[str],
    serve_args: list[str],
) -> None:
    options = " serve " + " ".join(serve_args) if serve_args else ""
    print(
        f"\nmailledger serve ({' '.join(ml)}{options}), load average"
        f" {figures['load_before']:.2f} before, {figures['load_after']:.2f} after:"
    )
    print(f"{'whole command, ms':56} {'p50':>7} {'p95':>7} {'notmuch':>8} {'ratio':>6}")
    for name, (p50, p95), theirs in rows:
        nm = f"{theirs[0]:8.1f} {p50 / theirs[0]:6.2f}" if theirs else f"{'-':>8} {'-':>6}"
        print(f"{name[:56]:56} {p50:7.1f} {p95:7.1f} {nm}")
    f = figures
    print(
        f"all counts served: p50 {f['serve_count_p50_ms']:.1f} p95 {f['serve_count_p95_ms']:.1f};"
        + (
            f" notmuch count p50 {f['notmuch_count_p50_ms']:.1f} p95"
            f" {f['notmuch_count_p95_ms']:.1f} (ratio of p50s"
            f" {f['serve_count_p50_ms'] / f['notmuch_count_p50_ms']:.2f});"
            if "notmuch_count_p50_ms" in f
            else ""
        )
        + f" in-process (--no-serve) p50 {f['inprocess_count_p50_ms']:.1f}"
    )
    print(
        f"thin client alone (a stub server answering at once): p50 {f['thin_client_p50_ms']:.1f}"
        f" p95 {f['thin_client_p95_ms']:.1f}; python -c pass {f['python_start_p50_ms']:.1f},"
        f" python -I -S -c pass {f['python_IS_start_p50_ms']:.1f}"
    )
    print(
        f"whole first page (search --limit 50 Q): p50 {f['serve_whole_page_p50_ms']:.1f} p95"
        f" {f['serve_whole_page_p95_ms']:.1f}"
        + (
            f"; notmuch search --limit=50 p50 {f['notmuch_page_p50_ms']:.1f}"
            if "notmuch_page_p50_ms" in f
            else ""
        )
    )
    per_query = ", ".join(
        f"{k.split(' ', 1)[1]} {v:.1f}" for k, v in f.items() if k.startswith("serve_page_p50_ms ")
    )
    print(f"server side first page p50 by query, ms: {per_query}")
    print(
        f"server side (socket round trip from a warm client): first page of 50 p50"
        f" {f['serve_page_p50_ms']:.1f} p95 {f['serve_page_p95_ms']:.1f}; count p50"
        f" {f['serve_count_rt_p50_ms']:.1f}; show p50 {f['serve_show_p50_ms']:.1f}"
        f" p95 {f['serve_show_p95_ms']:.1f}"
    )
    if "warm_idle_rss_mib" in f:
        print(
            f"idle, a second after the last read: the warm worker (the store kept) RSS"
            f" {f['warm_idle_rss_mib']:.0f} MiB, PSS of it and the server"
            f" {f['serve_and_warm_pss_mib']:.0f} MiB"
        )
    print(
        f"idle{' (after --keep-warm)' if 'warm_idle_rss_mib' in f else ''}: server RSS"
        f" {f['serve_idle_rss_mib']:.0f} MiB (anonymous {f['serve_idle_anon_mib']:.0f}),"
        f" spare worker RSS {f['spare_idle_rss_mib']:.0f} MiB,"
        f" PSS of both {f['serve_and_spare_pss_mib']:.0f} MiB"
    )
    for key, target in TARGETS.items():
        value = f[key]
        print(
            f"  {key:28} {value:8.1f} <= {target:6.1f}  {value / target:5.2f}x "
            f"{'ok' if value <= target else 'MISSED'}"
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--store", type=Path, required=True, help="a store of the bench corpus")
    ap.add_argument("--notmuch", type=Path, help="a notmuch home of the same mail")
    ap.add_argument("--runs", type=int, default=30, help="of each whole command")
    ap.add_argument(
        "--mailledger", type=Path, help="another install's console script (default: this one's)"
    )
    ap.add_argument(
        "--serve-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="an option of the server (repeat: --serve-arg=--keep-warm --serve-arg=0)",
    )
    ns = ap.parse_args(argv)
    figures = serve_figures(ns.store, ns.notmuch, ns.runs, ns.mailledger, ns.serve_arg)
    print(json.dumps({"serve": figures}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

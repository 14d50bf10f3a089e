"""Issue 37's HTTP targets against ``mailledger serve --listen`` (``make bench-http``).

A store of generated mail (``--store DIR``, else ``testkit.corpus`` messages, seed 1,
imported once under ``bench-data/http-load-N/``) is copied to a temporary directory
(the server may write to what it serves: the views' paths, the full-text index
brought up) unless ``--in-place``, and served by ``mailledger serve --listen
127.0.0.1:PORT`` in a subprocess, its runtime and state directories temporary too.

1. Idle: the RSS and PSS of the server and each of its children (psutil), once the
   app answers, before any load.
2. One client, one request at a time: ``--single`` message pages and search pages,
   p50/p95 (issue 37: "a message page <= 30 ms").
3. ``--clients`` closed-loop clients (asyncio, an ``httpx.AsyncClient`` each, one
   keep-alive connection each: a request as soon as the previous one answered, or
   ``--think`` s later on average, as a person reading the page would) for
   ``--duration`` seconds after ``--warmup`` seconds, over a mix of the search page,
   the API's search (summary and count), the message page, the thread page and the
   API's message; per kind and overall the requests, errors (a status other than
   200, or no answer within 30 s), p50/p95/p99 and requests/s; the processes'
   peak RSS while it ran, the load average, this process's own CPU.
4. Idle again after the load: RSS and PSS 3 s after it and ``--settle`` s later (40:
   after ``serve --keep-warm``'s 30 s, the web children idle since are fresh ones)
   (the allocators give back what they freed after a delay).

Gates (issue 37): 0 errors and p99 <= 250 ms under the load; a message page p95 <=
30 ms; the served store's idle memory (the PSS of the server and its children, the
memory they cost together, where their RSS counts the pages they share once in each)
<= 150 MiB. Every figure is printed with the load average beside it, then one JSON
line. The load generator shares the machine's cores with the server: its own CPU
time is printed.

``python -m bench.http_load [--store DIR] [--clients 50] [--duration 60] [--serve-arg=--X]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import psutil

REPO = Path(__file__).resolve().parents[1]
MIB = 1 << 20

# (kind, weight): the mix a browser and a script make together
MIX: list[tuple[str, int]] = [
    ("search page", 25),
    ("api search summary", 15),
    ("api search count", 15),
    ("message page", 20),
    ("thread page", 10),
    ("api message", 15),
]
# searches in the corpus's words (testkit.corpus's prose), a field and a date range
QUERIES = [
    "budget",
    "meeting report",
    "from:a",
    "subject:report",
    "date:2024 budget",
    "schedule or review",
    "has:attachment",
    '"quarterly budget"',
]
GATE_P99_MS = 250.0
GATE_MESSAGE_MS = 30.0
GATE_IDLE_MIB = 150.0


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def _pct(xs: list[float], q: float) -> float:
    """The q-quantile of ``xs`` (seconds) in ms, nearest rank."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, int(q * len(s) + 0.5) - 1))] * 1000


def _build(where: Path, n: int) -> Path:
    """A store of ``n`` generated messages (seed 1), made once under ``where``."""
    from pipeline.cli import main as cli
    from testkit.corpus import generate_messages

    store, done = where / "store", where / "built"
    if done.exists():
        return store
    shutil.rmtree(where, ignore_errors=True)
    maildir = where / "maildir"
    for sub in ("cur", "new", "tmp"):
        (maildir / sub).mkdir(parents=True)
    for name, raw in generate_messages(n, seed=1):
        (maildir / "cur" / f"{name}:2,S").write_bytes(raw)
    code = cli(
        ["-q", "--store", str(store), "import", "maildir", str(maildir)], env={"HOME": str(where)}
    )
    if code:
        raise SystemExit(f"http_load: the import into {store} failed ({code})")
    shutil.rmtree(maildir)
    done.write_text("")
    return store


def _row_groups(store: Path) -> str:
    """The log's files and their row groups, as one line."""
    import pyarrow.parquet as pq

    groups = []
    for path in sorted((store / "log").glob("*.parquet")):
        meta = pq.ParquetFile(path).metadata
        groups += [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
    files = len(list((store / "log").glob("*.parquet")))
    return f"{files} files, {len(groups)} row groups, the largest {max(groups, default=0)} events"


def _compact(store: Path) -> None:
    """``mailledger compact`` on ``store`` (the copy): its log rewritten in row groups."""
    argv = [sys.executable, "-m", "pipeline", "--no-serve", "--store", str(store), "compact"]
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)


def _sample_ids(store: Path, n: int) -> list[str]:
    """``n`` Message-IDs of the store (a seeded sample), read in this process (which
    forks nothing after: DuckDB is started here only)."""
    from pipeline.store import MessageStore

    with MessageStore.open(store, create=False) as ms:
        table = ms.query(
            f"select message_id from messages using sample reservoir({n} rows) repeatable (1)"
        )
    return [str(x) for x in table.column(0).to_pylist()]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Served:
    """``mailledger --store STORE serve --listen 127.0.0.1:PORT [extra]``."""

    def __init__(self, store: Path, tmp: Path, extra: list[str]) -> None:
        self.port = _free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        run = tmp / "run"
        run.mkdir(mode=0o700)
        env = {**os.environ, "XDG_RUNTIME_DIR": str(run), "XDG_STATE_HOME": str(tmp / "state")}
        env.pop("MAILLEDGER_STORE", None)
        self.env = env
        argv = [sys.executable, "-m", "pipeline", "--store", str(store), "serve"]
        argv += ["--listen", f"127.0.0.1:{self.port}", *extra]
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env=env, cwd=tmp,
        )  # fmt: skip
        self.store = store
        deadline = time.monotonic() + 120
        while not self._answers():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise SystemExit(f"http_load: the server did not answer on {self.base}")
            time.sleep(0.2)

    def _answers(self) -> bool:
        try:
            return httpx.get(self.base + "/api/v1/stats", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    def processes(self) -> list[psutil.Process]:
        """The server and its children (the spare worker, the web children...)."""
        try:
            me = psutil.Process(self.proc.pid)
            return [me, *me.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def status(self) -> dict[str, Any]:
        """``serve status --json``."""
        argv = [sys.executable, "-m", "pipeline", "--store", str(self.store), "serve", "status"]
        done = subprocess.run([*argv, "--json"], capture_output=True, env=self.env, check=True)
        info: dict[str, Any] = json.loads(done.stdout)
        return info

    def roles(self) -> dict[int, str]:
        """pid -> what it is (the server, a web child, the sync child)."""
        info = self.status()
        roles = {self.proc.pid: "server"}
        for name in ("http", "sync"):
            child = info.get(name) or {}
            for pid in child.get("pids") or [child.get("pid")]:
                if pid is not None:
                    roles[pid] = name
        return roles

    def memory(self) -> dict[str, Any]:
        """RSS and PSS (MiB) of each process and their sums."""
        rows = []
        roles = self.roles()
        for p in self.processes():
            try:
                info = p.memory_full_info()
                name = roles.get(p.pid, "worker")
                rows.append(
                    {"pid": p.pid, "role": name, "rss": info.rss / MIB, "pss": info.pss / MIB}
                )
            except psutil.NoSuchProcess:
                continue
        return {
            "processes": rows,
            "rss_total": sum(r["rss"] for r in rows),
            "pss_total": sum(r["pss"] for r in rows),
        }

    def cpu(self) -> float:
        """CPU seconds (user and system) the server and its children have used."""
        total = 0.0
        for p in self.processes():
            with suppress(psutil.NoSuchProcess):
                t = p.cpu_times()
                total += t.user + t.system
        return total

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _paths(kind: str, rng: random.Random, ids: list[str]) -> str:
    q = quote(rng.choice(QUERIES))
    mid = quote(rng.choice(ids), safe="")
    return {
        "search page": f"/search?q={q}",
        "api search summary": f"/api/v1/search?q={q}&limit=50",
        "api search count": f"/api/v1/search?q={q}&output=count",
        "message page": f"/m/{mid}",
        "thread page": f"/t/{mid}",
        "api message": f"/api/v1/message/{mid}",
    }[kind]


def sequential(base: str, ids: list[str], runs: int) -> dict[str, dict[str, float]]:
    """One client, one request at a time: the message page and the search page."""
    rng = random.Random(2)
    out: dict[str, dict[str, float]] = {}
    with httpx.Client(base_url=base, timeout=30) as client:
        for kind in ("message page", "search page"):
            for _ in range(10):  # (warm-up)
                client.get(_paths(kind, rng, ids))
            times: list[float] = []
            for _ in range(runs):
                path = _paths(kind, rng, ids)
                t0 = time.perf_counter()
                answer = client.get(path)
                times.append(time.perf_counter() - t0)
                if answer.status_code != 200:
                    raise SystemExit(f"http_load: {path}: {answer.status_code}")
            out[kind] = {"p50_ms": _pct(times, 0.5), "p95_ms": _pct(times, 0.95)}
    return out


async def _client(
    base: str,
    ids: list[str],
    seed: int,
    until: float,
    record: Callable[[str, float, bool], None],
    think: float,
) -> None:
    rng = random.Random(seed)
    kinds = [k for k, _ in MIX]
    weights = [w for _, w in MIX]
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    async with httpx.AsyncClient(base_url=base, timeout=30, limits=limits) as client:
        while time.monotonic() < until:
            kind = rng.choices(kinds, weights)[0]
            path = _paths(kind, rng, ids)
            t0 = time.perf_counter()
            try:
                answer = await client.get(path)
                ok = answer.status_code == 200
            except httpx.HTTPError:
                ok = False
            record(kind, time.perf_counter() - t0, ok)
            if think:  # (a person reading the page: exponential, mean ``think`` s)
                await asyncio.sleep(rng.expovariate(1 / think))


def load(
    base: str,
    ids: list[str],
    clients: int,
    warmup: float,
    duration: float,
    think: float = 0.0,
    server_cpu: Callable[[], float] = lambda: 0.0,
) -> dict[str, Any]:
    """``clients`` closed-loop clients (each pausing ``think`` s on average between an
    answer and its next request): ``warmup`` seconds unrecorded, then ``duration``
    seconds recorded; ``server_cpu``: the server's CPU seconds so far, read as the
    recording starts and ends (its CPU per answer does not depend on how much of
    the machine other work takes)."""
    times: dict[str, list[float]] = {k: [] for k, _ in MIX}
    errors: dict[str, int] = {k: 0 for k, _ in MIX}
    recording = False
    served_cpu = [0.0, 0.0]

    def record(kind: str, seconds: float, ok: bool) -> None:
        if recording:
            times[kind].append(seconds)
            if not ok:
                errors[kind] += 1

    async def run() -> float:
        nonlocal recording
        start = time.monotonic()
        until = start + warmup + duration
        tasks = [
            asyncio.create_task(_client(base, ids, 100 + i, until, record, think))
            for i in range(clients)
        ]
        await asyncio.sleep(warmup)
        recording = True
        began = time.monotonic()
        served_cpu[0] = server_cpu()
        await asyncio.gather(*tasks)
        served_cpu[1] = server_cpu()
        return time.monotonic() - began

    cpu0 = psutil.Process().cpu_times()
    elapsed = asyncio.run(run())
    cpu1 = psutil.Process().cpu_times()
    kinds: dict[str, Any] = {}
    every: list[float] = []
    for kind, xs in times.items():
        every += xs
        kinds[kind] = _summary(xs, errors[kind], elapsed)
    return {
        "elapsed_s": elapsed,
        "kinds": kinds,
        "overall": _summary(every, sum(errors.values()), elapsed),
        "client_cpu_s": (cpu1.user + cpu1.system) - (cpu0.user + cpu0.system),
        "server_cpu_s": served_cpu[1] - served_cpu[0],
    }


def _summary(xs: list[float], errors: int, elapsed: float) -> dict[str, Any]:
    return {
        "requests": len(xs),
        "errors": errors,
        "p50_ms": _pct(xs, 0.50),
        "p95_ms": _pct(xs, 0.95),
        "p99_ms": _pct(xs, 0.99),
        "max_ms": max(xs) * 1000 if xs else float("nan"),
        "mean_ms": statistics.fmean(xs) * 1000 if xs else float("nan"),
        "rps": len(xs) / elapsed if elapsed else 0.0,
    }


@contextmanager
def _peak_memory(served: Served) -> Iterator[dict[str, float]]:
    """The highest summed RSS of the server's processes, sampled once a second."""
    peak = {"rss_total": 0.0}
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(1.0):
            total = 0.0
            for p in served.processes():
                with suppress(psutil.NoSuchProcess):
                    total += p.memory_info().rss / MIB
            peak["rss_total"] = max(peak["rss_total"], total)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    try:
        yield peak
    finally:
        stop.set()
        t.join()


def _print_memory(title: str, mem: dict[str, Any]) -> None:
    parts = ", ".join(f"{r['role']} {r['pss']:.0f} ({r['rss']:.0f})" for r in mem["processes"])
    print(
        f"{title}: PSS (RSS) MiB: {parts}; total {mem['pss_total']:.0f} ({mem['rss_total']:.0f})"
        f"  [load {_load()}]"
    )


def _verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--store", type=Path, help="a store to serve (default: generated mail)")
    ap.add_argument("--messages", type=int, default=10_000, help="generated: how many")
    ap.add_argument("--data", type=Path, default=REPO / "bench-data")
    ap.add_argument("--in-place", action="store_true", help="serve --store where it is")
    ap.add_argument(
        "--compact",
        action="store_true",
        help="`compact` the copy first (log files written before row groups of 1,000"
        " events are one group each: a message's headers decode the whole file)",
    )
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--warmup", type=float, default=5.0)
    ap.add_argument(
        "--think",
        type=float,
        default=0.0,
        help="seconds a client pauses between an answer and its next request, on average"
        " (exponential; default 0: each request as soon as the previous one answered)",
    )
    ap.add_argument("--single", type=int, default=200, help="sequential requests of each kind")
    ap.add_argument(
        "--serve-arg", action="append", default=[], help="passed to serve (--serve-arg=--X=Y)"
    )
    ap.add_argument(
        "--settle",
        type=float,
        default=40.0,
        help="seconds more before the last idle figure (serve's --keep-warm, 30 s by"
        " default, replaces the web children idle after the load before it)",
    )
    ap.add_argument("--json", type=Path, help="the results written here too")
    args = ap.parse_args(argv)
    source = args.store or _build(args.data / f"http-load-{args.messages}", args.messages)
    with tempfile.TemporaryDirectory(prefix="http-load-") as tmp_name:
        tmp = Path(tmp_name)
        store = source
        if not args.in_place:
            store = tmp / "store"
            t0 = time.monotonic()
            shutil.copytree(source, store, symlinks=True)
            print(f"copied {source} to {store} in {time.monotonic() - t0:.1f} s")
            if args.compact:
                _compact(store)
        print(f"log: {_row_groups(store)}  [load {_load()}]")
        ids = _sample_ids(store, 500)
        result: dict[str, Any] = {
            "store": str(source),
            "compacted": args.compact,
            "serve_args": args.serve_arg,
            "clients": args.clients,
            "think_s": args.think,
        }
        result["load_start"] = os.getloadavg()
        served = Served(store, tmp, args.serve_arg)
        try:
            time.sleep(2.0)  # (the spare worker settles)
            result["idle_before"] = idle = served.memory()
            _print_memory("idle, before any request but the first", idle)
            seq = sequential(served.base, ids, args.single)
            result["sequential"] = seq
            for kind, s in seq.items():
                print(
                    f"one client, {args.single} x {kind}: p50 {s['p50_ms']:.1f} ms,"
                    f" p95 {s['p95_ms']:.1f} ms  [load {_load()}]"
                )
            pause = f", pausing {args.think:g} s on average" if args.think else ""
            print(
                f"{args.clients} closed-loop clients{pause}, {args.warmup:.0f} s warm-up then"
                f" {args.duration:.0f} s  [load at start {_load()}]"
            )
            with _peak_memory(served) as peak:
                run = load(
                    served.base, ids, args.clients, args.warmup, args.duration, args.think,
                    server_cpu=served.cpu,
                )  # fmt: skip
            result["load"] = run
            result["load_end"] = os.getloadavg()
            result["peak_rss_total"] = peak["rss_total"]
            heads = ("requests", "errors", "p50", "p95", "p99", "req/s")
            print(f"  {'kind':<20} " + " ".join(f"{h:>8}" for h in heads))
            for kind, s in [*run["kinds"].items(), ("overall", run["overall"])]:
                print(
                    f"  {kind:<20} {s['requests']:>8} {s['errors']:>8} {s['p50_ms']:>5.0f} ms"
                    f" {s['p95_ms']:>5.0f} ms {s['p99_ms']:>5.0f} ms {s['rps']:>8.1f}"
                )
            print(
                f"  [load at end {_load()}; peak RSS of the server's processes"
                f" {peak['rss_total']:.0f} MiB; this load generator's CPU"
                f" {run['client_cpu_s']:.1f} s of {run['elapsed_s']:.0f} s]"
            )
            answers = run["overall"]["requests"]
            print(
                f"  [the server's CPU: {run['server_cpu_s']:.1f} s,"
                f" {1000 * run['server_cpu_s'] / max(answers, 1):.2f} ms per answer]"
            )
            time.sleep(3.0)
            result["idle_after_3s"] = soon = served.memory()
            _print_memory("idle, 3 s after the load", soon)
            after = soon
            if args.settle:
                time.sleep(args.settle)
                after = served.memory()
                _print_memory(f"idle, {3 + args.settle:.0f} s after the load", after)
            result["idle_after"] = after
        finally:
            served.stop()
    overall = run["overall"]
    # (idle memory: the larger of before the load and --settle s after it, when the
    # web children have their DuckDB instances and what their allocators kept)
    idle_pss = max(idle["pss_total"], after["pss_total"])
    idle_rss = max(idle["rss_total"], after["rss_total"])
    gates = {
        "0 errors under load": overall["errors"] == 0,
        f"p99 <= {GATE_P99_MS:.0f} ms under load": overall["p99_ms"] <= GATE_P99_MS,
        f"message page p95 <= {GATE_MESSAGE_MS:.0f} ms": seq["message page"]["p95_ms"]
        <= GATE_MESSAGE_MS,
        f"idle PSS total <= {GATE_IDLE_MIB:.0f} MiB": idle_pss <= GATE_IDLE_MIB,
    }
    result["gates"] = gates
    print("gates (issue 37):")
    print(f"  0 errors under load ({overall['errors']}): {_verdict(overall['errors'] == 0)}")
    print(
        f"  p99 <= {GATE_P99_MS:.0f} ms under load ({overall['p99_ms']:.0f} ms):"
        f" {_verdict(overall['p99_ms'] <= GATE_P99_MS)}"
    )
    msg = seq["message page"]["p95_ms"]
    print(
        f"  message page p95 <= {GATE_MESSAGE_MS:.0f} ms ({msg:.1f} ms):"
        f" {_verdict(msg <= GATE_MESSAGE_MS)}"
    )
    print(
        f"  idle memory <= {GATE_IDLE_MIB:.0f} MiB (the server's processes, the larger of"
        f" before and after: PSS {idle_pss:.0f} MiB; RSS summed {idle_rss:.0f}):"
        f" {_verdict(idle_pss <= GATE_IDLE_MIB)}"
    )
    line = json.dumps(result, default=str)
    if args.json:
        args.json.write_text(line + "\n")
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())

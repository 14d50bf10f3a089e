"""``make delta-spike``: gate 1 of issue 16, many writer processes on one Delta table.

Eight spawned writer processes append batches of log events (the log's own Arrow
schema plus a ``month`` partition column) to one local Delta table, each commit
carrying the writer's application transaction id, so a retried commit whose first
attempt landed is recognised and not applied twice. Printed: commit latency
p50/p90/p99/max per window of 200 commits (in Delta version order), retries,
writer RSS (peak, and during the commits that wrote a checkpoint), load average and
CPU seconds, and a verification of the table read three ways (deltalake's file
list, pyarrow over the files a replay of ``_delta_log`` names, DuckDB over the same
files with no delta extension). The run itself is a subprocess: its exit status is
a result (delta-rs once aborted the interpreter at exit with status 134).

    python -m bench.delta_spike [--commits 2000] [--writers 8] [--data DIR] [--keep]

Nothing here is product code: deltalake is not a dependency of mailledger yet.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing as mp
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa

from stores.events import SCHEMA, CursorMoved, Event, MessageSeen, events_to_table

__all__ = ["main"]

WINDOW = 200
P99_LIMIT_S = 2.0
RSS_LIMIT = 1 << 30
_MONTHS = 24  # the batches' recorded_at walk through this many months over the run
_ATTEMPTS = 20  # a commit's attempts in the writer before the failure reaches its caller
_FOLDERS = ("INBOX", "Archive", "Sent", "Lists/dev", "Lists/announce", "Receipts")
_WORDS = ("budget", "review", "meeting", "draft", "invoice", "release", "notes", "plan", "report")


def _month(i: int, total: int) -> tuple[str, datetime]:
    m = i * _MONTHS // max(total, 1)
    start = datetime(2024 + m // 12, 1 + m % 12, 1, tzinfo=UTC)
    return start.strftime("%Y-%m"), start


def batch_table(writer: int, batch: int, n: int, total: int) -> pa.Table:
    """One commit's rows: ``n - 1`` message-seen events and the cursor move that ends
    a folder's batch, as a sync would log them; ``run_id`` names (writer, batch) and
    ``seq`` is the row's place in the batch, so a doubled or lost batch shows."""
    rng = random.Random(writer * 1_000_003 + batch)
    month, start = _month(batch, total)
    recorded = start + timedelta(seconds=rng.randrange(27 * 86400))
    run_id = f"spike-w{writer:02d}-b{batch:05d}"
    source = f"imap://user{writer}@mail.example.org"
    folder = rng.choice(_FOLDERS)
    first_uid = batch * 1000
    events: list[Event] = []
    for i in range(n - 1):
        when = recorded - timedelta(minutes=rng.randrange(60 * 24 * 90))
        sender = f"{rng.choice(_WORDS)}.{rng.randrange(500)}@example.{rng.choice('abc')}.com"
        to = tuple(f"p{rng.randrange(2000)}@example.org" for _ in range(1 + rng.randrange(3)))
        subject = " ".join(rng.choices(_WORDS, k=3 + rng.randrange(6)))
        mid = f"<{writer}.{batch}.{i}.{rng.getrandbits(48):x}@mail.example.org>"
        refs = tuple(f"<r{rng.getrandbits(40):x}@example.org>" for _ in range(rng.randrange(4)))
        headers = (
            ("From", sender),
            ("To", ", ".join(to)),
            ("Subject", subject),
            ("Date", when.strftime("%a, %d %b %Y %H:%M:%S +0000")),
            ("Message-ID", mid),
            ("MIME-Version", "1.0"),
            ("Content-Type", "text/plain; charset=utf-8"),
            ("Received", f"from mx{rng.randrange(9)}.example.org by mail.example.org"),
            ("X-Mailer", "spike"),
        )
        events.append(
            MessageSeen(
                run_id=run_id,
                recorded_at=recorded,
                source=source,
                folder=folder,
                uidvalidity=1_700_000_000 + writer,
                uid=first_uid + i,
                message_id=mid,
                sha256=hashlib.sha256(mid.encode()).hexdigest(),
                size=2_000 + rng.randrange(200_000),
                internal_date=when,
                headers=headers,
                date_utc=when,
                date_offset_min=0,
                from_addr=sender,
                to_addrs=to,
                in_reply_to=refs[-1] if refs else None,
                references=refs,
                list_id="<dev.example.org>" if folder.startswith("Lists") else None,
                subject=subject,
            )
        )
    events.append(
        CursorMoved(
            run_id=run_id,
            recorded_at=recorded,
            source=source,
            folder=folder,
            uidvalidity=1_700_000_000 + writer,
            cursor_from=first_uid,
            cursor_to=first_uid + n - 1,
            mode="delta",
            reason="batch",
            uidnext=first_uid + n,
        )
    )
    table = events_to_table(events, first_seq=0)
    return table.append_column(pa.field("month", pa.string(), False), pa.array([month] * n))


@dataclass(frozen=True)
class Plan:
    """What one writer appends: its batches (global numbers) and their sizes."""

    writer: int
    batches: tuple[tuple[int, int], ...]
    total: int
    lose_response_at: int  # the batch whose first successful commit is reported lost


def plans(commits: int, writers: int, lo: int, hi: int, seed: int) -> list[Plan]:
    """Batches dealt round-robin to the writers, sizes uniform in [lo, hi]."""
    rng = random.Random(seed)
    sizes = [rng.randint(lo, hi) for _ in range(commits)]
    out = []
    for w in range(writers):
        mine = tuple((b, sizes[b]) for b in range(w, commits, writers))
        lose = mine[len(mine) // 2][0] if mine else -1
        out.append(Plan(w, mine, commits, lose))
    return out


class _LostResponse(Exception):
    """The simulated loss of a commit's answer: the commit landed, the caller never heard."""


def _commit_info(uri: str, version: int) -> dict[str, Any]:
    path = Path(uri) / "_delta_log" / f"{version:020d}.json"
    for line in path.read_text().splitlines():
        action = json.loads(line)
        if "commitInfo" in action:
            info: dict[str, Any] = action["commitInfo"]
            return info
    return {}


def _writer(plan: Plan, uri: str, out: str, go: Any, reopen: int) -> None:
    """One writer process: append every batch of ``plan``, one record per commit;
    a fresh table handle every ``reopen`` commits when not 0 (a long-lived handle's
    commits grow dearer: 31 -> 329 ms CPU over 600 commits, alone)."""
    from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

    app_id = f"mailledger-spike-writer-{plan.writer}"
    dt = DeltaTable(uri)
    records = []
    go.wait()
    for version, (batch, n) in enumerate(plan.batches, start=1):
        table = batch_table(plan.writer, batch, n, plan.total)
        if reopen and version % reopen == 0:
            dt = DeltaTable(uri)
        props = CommitProperties(app_transactions=[Transaction(app_id, version)])
        errors: list[str] = []
        skipped = False
        lost = batch == plan.lose_response_at
        t0 = time.monotonic()
        c0 = time.process_time()
        for attempt in range(1, _ATTEMPTS + 1):
            try:
                if attempt > 1:  # the last attempt may have landed: ask the table
                    dt.update_incremental()
                    if (dt.transaction_version(app_id) or 0) >= version:
                        skipped = True
                        break
                write_deltalake(
                    dt, table, mode="append", partition_by=["month"], commit_properties=props
                )
                if lost:
                    lost = False
                    raise _LostResponse
                break
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {str(exc)[:200]}")
                time.sleep(min(0.05 * 2**attempt, 1.0) * random.random())
        t1 = time.monotonic()
        cpu = time.process_time() - c0
        committed = dt.version()
        info = _commit_info(uri, committed) if not skipped else {}
        records.append(
            {
                "writer": plan.writer,
                "batch": batch,
                "rows": n,
                "version": committed,
                "t0": t0,
                "t1": t1,
                "cpu": cpu,
                "checkpoint": not skipped
                and (Path(uri) / "_delta_log" / f"{committed:020d}.checkpoint.parquet").exists(),
                "attempts": attempt,
                "errors": errors,
                "skipped_as_applied": skipped,
                "failed": not skipped and len(errors) == _ATTEMPTS,
                "deltars_retries": info.get("operationMetrics", {}).get("num_retries", 0),
            }
        )
    usage = resource.getrusage(resource.RUSAGE_SELF)
    summary = {
        "writer": plan.writer,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "maxrss": usage.ru_maxrss * 1024,
        "commits": records,
    }
    Path(out).write_text(json.dumps(summary))


class _Sampler(threading.Thread):
    """RSS of the writer processes and the load average, sampled from outside."""

    def __init__(self, pids: Sequence[int], every: float = 0.02) -> None:
        super().__init__(daemon=True)
        self.pids = list(pids)
        self.every = every
        self.samples: list[tuple[float, int, int]] = []  # (monotonic, pid, rss)
        self.load: list[tuple[float, float]] = []  # (monotonic, 1-minute load average)
        self.stop = threading.Event()

    def run(self) -> None:
        page = os.sysconf("SC_PAGE_SIZE")
        last_load = 0.0
        while not self.stop.is_set():
            now = time.monotonic()
            for pid in self.pids:
                try:
                    with open(f"/proc/{pid}/statm") as f:
                        rss = int(f.read().split()[1]) * page
                except (OSError, IndexError, ValueError):
                    continue
                self.samples.append((now, pid, rss))
            if now - last_load >= 1.0:
                self.load.append((now, os.getloadavg()[0]))
                last_load = now
            self.stop.wait(self.every)


def _pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def _replay_log(uri: str) -> set[str]:
    """The active files after the last version, replayed from ``_delta_log`` with no
    delta-rs: the last checkpoint's adds and removes, then every later JSON commit."""
    import pyarrow.parquet as pq

    log = Path(uri) / "_delta_log"
    active: set[str] = set()
    start = 0
    last = log / "_last_checkpoint"
    if last.exists():
        cp = json.loads(last.read_text())["version"]
        rows = pq.read_table(log / f"{cp:020d}.checkpoint.parquet", columns=["add"]).column(0)
        active = {a["path"] for a in rows.to_pylist() if a is not None}
        start = cp + 1
    version = start
    while (commit := log / f"{version:020d}.json").exists():
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                active.add(action["add"]["path"])
            elif "remove" in action:
                active.discard(action["remove"]["path"])
        version += 1
    return active


def verify(uri: str, expected: dict[str, int], months: int) -> list[str]:
    """Problems with the table's rows against ``expected`` (run_id -> rows), read by
    deltalake, by pyarrow over the replayed file list and by DuckDB over the same."""
    import duckdb
    import pyarrow.compute as pc
    import pyarrow.dataset as ds
    from deltalake import DeltaTable

    problems = []
    want = sum(expected.values())
    dt = DeltaTable(uri)
    by_deltars = {Path(u).relative_to(Path(uri).resolve()).as_posix() for u in dt.file_uris()}
    replayed = _replay_log(uri)
    if by_deltars != replayed:
        problems.append(
            f"file lists differ: deltalake {len(by_deltars)}, log replay {len(replayed)}"
        )
    files = sorted(str(Path(uri) / p) for p in replayed)
    data = ds.dataset(files, format="parquet", partitioning="hive", partition_base_dir=uri)
    table = data.to_table(columns=["run_id", "seq", "month"])
    counts = table.group_by("run_id").aggregate([("seq", "count"), ("seq", "count_distinct")])
    got = dict(zip(counts["run_id"].to_pylist(), counts["seq_count"].to_pylist(), strict=True))
    distinct = sum(counts["seq_count_distinct"].to_pylist())
    if table.num_rows != want:
        problems.append(f"pyarrow: {table.num_rows} rows, appended {want}")
    if distinct != table.num_rows:
        problems.append(f"pyarrow: {table.num_rows - distinct} doubled (run_id, seq)")
    if got != expected:
        lost = [r for r in expected if r not in got]
        doubled = [r for r, c in got.items() if c != expected.get(r)]
        problems.append(f"pyarrow: {len(lost)} batches lost, {len(doubled)} wrong: {doubled[:5]}")
    if pc.count_distinct(table["month"]).as_py() != months:
        problems.append(f"pyarrow: {pc.count_distinct(table['month'])} months, want {months}")
    con = duckdb.connect()
    rows, ids, pairs = con.execute(
        "SELECT count(*), count(DISTINCT run_id), count(DISTINCT (run_id, seq)) "
        "FROM read_parquet(?)",
        [files],
    ).fetchone() or (0, 0, 0)
    if (rows, ids, pairs) != (want, len(expected), want):
        problems.append(f"duckdb: rows {rows}, batches {ids}, distinct rows {pairs}")
    print(
        f"verify: {len(replayed)} active files (deltalake list = log replay: "
        f"{by_deltars == replayed}); pyarrow {table.num_rows} rows in {len(got)} batches, "
        f"duckdb {rows} rows in {ids} batches; appended {want} rows in {len(expected)} batches"
    )
    return problems


def _naive_retry_doubles(root: Path) -> tuple[int, int, float]:
    """(rows after one commit, rows after the same commit retried blindly with the same
    txn id, ms of the guarded retry's check): delta-rs does not refuse a txn version
    the table already holds, so the writer must look before it retries."""
    from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

    uri = str(root / "naive")
    table = batch_table(99, 0, 100, 1)
    props = CommitProperties(app_transactions=[Transaction("naive", 1)])
    write_deltalake(uri, table, mode="append", partition_by=["month"], commit_properties=props)
    once = DeltaTable(uri).count()
    t0 = time.perf_counter()
    dt = DeltaTable(uri)
    applied = (dt.transaction_version("naive") or 0) >= 1
    check_ms = (time.perf_counter() - t0) * 1000
    assert applied
    write_deltalake(uri, table, mode="append", partition_by=["month"], commit_properties=props)
    return once, DeltaTable(uri).count(), check_ms


_PROBE = """
import sys
import pyarrow.fs as fs
from deltalake import DeltaTable
uri, mode = sys.argv[1], sys.argv[2]
kw = {"filesystem": fs.SubTreeFileSystem(uri, fs.LocalFileSystem())} if mode == "native" else {}
print(DeltaTable(uri).to_pyarrow_dataset(**kw).head(10).num_rows)
"""


def exit_probe(uri: str, runs: int) -> dict[str, list[str]]:
    """Exit statuses of processes that read the head of the table through
    ``to_pyarrow_dataset()`` and exit: with deltalake's own filesystem (a Python
    ``PyFileSystem`` over delta-rs, Arrow's I/O threads call back into it) and with
    pyarrow's native local filesystem. A status of 139 or 134, or a hang, is the
    at-exit death."""
    out: dict[str, list[str]] = {}
    for mode in ("deltalake-fs", "native"):
        for _ in range(runs):
            cmd = [sys.executable, "-c", _PROBE, uri, mode]
            try:
                proc = subprocess.run(cmd, capture_output=True, timeout=30, check=False)
                status = str(proc.returncode)
            except subprocess.TimeoutExpired:
                status = "hang"
            out.setdefault(mode, []).append(status)
    return out


def _create(uri: str) -> None:
    from deltalake import DeltaTable

    schema = SCHEMA.append(pa.field("month", pa.string(), False))
    DeltaTable.create(uri, schema=schema, partition_by=["month"], name="mailledger-events")


def run(args: argparse.Namespace) -> int:
    """The measured run (the subprocess): exit 0 when every gate-1 figure holds."""
    root = Path(args.data) if args.data else Path(tempfile.mkdtemp(prefix="delta-spike-"))
    uri = str(root / "events")
    shutil.rmtree(uri, ignore_errors=True)
    root.mkdir(parents=True, exist_ok=True)
    _create(uri)
    ctx = mp.get_context("spawn")
    go = ctx.Event()
    work = plans(args.commits, args.writers, args.min_events, args.max_events, args.seed)
    outs = [str(root / f"writer-{p.writer}.json") for p in work]
    procs = [
        ctx.Process(
            target=_writer, args=(p, uri, o, go, args.reopen_every), name=f"writer-{p.writer}"
        )
        for p, o in zip(work, outs, strict=True)
    ]
    for p in procs:
        p.start()
    sampler = _Sampler([p.pid for p in procs if p.pid is not None])
    sampler.start()
    time.sleep(args.warmup)  # the spawned writers import pyarrow and deltalake
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    go.set()
    for p in procs:
        p.join()
    wall = time.monotonic() - t0
    sampler.stop.set()
    sampler.join()
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    problems = [f"writer {i} exit status {p.exitcode}" for i, p in enumerate(procs) if p.exitcode]
    summaries = [json.loads(Path(o).read_text()) for o in outs if Path(o).exists()]
    commits = sorted((c for s in summaries for c in s["commits"]), key=lambda c: c["version"])
    problems += _report(commits, summaries, sampler, uri, wall, cpu1, cpu0)
    expected = {f"spike-w{p.writer:02d}-b{b:05d}": n for p in work for b, n in p.batches}
    months = len({_month(b, args.commits)[0] for b in range(args.commits)})
    problems += verify(uri, expected, months)
    once, twice, check_ms = _naive_retry_doubles(root)
    print(
        f"lost response, blind retry: {once} rows -> {twice} rows (delta-rs applied the same "
        f"txn version twice); the guarded retry's check (open + transaction_version) took "
        f"{check_ms:.0f} ms"
    )
    if args.exit_probe:
        statuses = exit_probe(uri, args.exit_probe)
        print(
            "at-exit probe (head() of to_pyarrow_dataset, then exit): "
            + "; ".join(f"{mode}: {' '.join(st)}" for mode, st in statuses.items())
        )
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    for p in problems:
        print(f"FAIL: {p}")
    print("gate 1:", "PASS" if not problems else f"FAIL ({len(problems)} problems)")
    sys.stdout.flush()
    return 1 if problems else 0


def _report(
    commits: list[dict[str, Any]],
    summaries: list[dict[str, Any]],
    sampler: _Sampler,
    uri: str,
    wall: float,
    cpu1: Any,
    cpu0: Any,
) -> list[str]:
    problems = []
    applied = [c for c in commits if not c["skipped_as_applied"]]
    lat = [c["t1"] - c["t0"] for c in commits]
    print(
        f"{'window':>11} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'max ms':>8} "
        f"{'retries':>8} {'CPU ms p50':>11} {'load':>5}"
    )
    windows = []
    for i in range(0, len(commits), WINDOW):
        part = commits[i : i + WINDOW]
        ms = [(c["t1"] - c["t0"]) * 1000 for c in part]
        retries = sum(c["attempts"] - 1 + c["deltars_retries"] for c in part)
        windows.append(statistics.median(ms))
        cpu = statistics.median(c["cpu"] * 1000 for c in part)
        load = [v for t, v in sampler.load if part[0]["t0"] <= t <= part[-1]["t1"]] or [0.0]
        print(
            f"{i + 1:>5}-{i + len(part):<5} {statistics.median(ms):8.0f} {_pct(ms, 0.9):8.0f} "
            f"{_pct(ms, 0.99):8.0f} {max(ms):8.0f} {retries:8d} {cpu:11.0f} "
            f"{statistics.median(load):5.1f}"
        )
    ms_all = [x * 1000 for x in lat]
    failed = [c for c in commits if c["failed"]]
    outer = sum(c["attempts"] - 1 for c in commits)
    inner = sum(c["deltars_retries"] for c in commits)
    kinds = Counter(e.split(":")[0] for c in commits for e in c["errors"])
    print(
        f"all {len(commits)} commits in {wall:.1f} s ({len(commits) / wall:.1f}/s): "
        f"p50 {statistics.median(ms_all):.0f} ms, p90 {_pct(ms_all, 0.9):.0f}, "
        f"p99 {_pct(ms_all, 0.99):.0f}, max {max(ms_all):.0f}; "
        f"delta-rs internal retries {inner}, writer retries {outer} {dict(kinds)}, "
        f"lost responses recognised as applied {len(commits) - len(applied)}, "
        f"failures reaching the caller {len(failed)}"
    )
    first, last = windows[0], windows[-1]
    print(f"flatness: last window p50 / first window p50 = {last / first:.2f}")
    checkpoints = sorted(p.name for p in (Path(uri) / "_delta_log").glob("*.checkpoint.parquet"))
    by_pid_rss = _rss_during(commits, summaries, sampler, checkpointing=True)
    other_rss = _rss_during(commits, summaries, sampler, checkpointing=False)
    peak = max(s["maxrss"] for s in summaries)
    sampled = max((rss for _, _, rss in sampler.samples), default=0)
    print(
        f"checkpoints written: {len(checkpoints)} ({checkpoints[0] if checkpoints else '-'} ..); "
        f"writer RSS peak {peak / 2**20:.0f} MiB (ru_maxrss), sampled {sampled / 2**20:.0f} MiB; "
        f"during checkpoint commits max {by_pid_rss / 2**20:.0f} MiB, "
        f"other commits max {other_rss / 2**20:.0f} MiB"
    )
    cpu = (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime)
    writers_cpu = sum(s["cpu_s"] for s in summaries)
    load = [v for _, v in sampler.load] or [0.0]
    print(
        f"load average (1 min) during the run: min {min(load):.2f} median "
        f"{statistics.median(load):.2f} max {max(load):.2f} on {os.cpu_count()} cores; "
        f"writers' CPU {writers_cpu:.1f} s ({cpu:.1f} s by rusage of the children), "
        f"{writers_cpu / max(len(commits), 1) * 1000:.0f} ms CPU a commit incl. building the batch"
    )
    if len(commits) != sum(len(s["commits"]) for s in summaries) or not commits:
        problems.append("commit records missing")
    if failed:
        problems.append(f"{len(failed)} commits failed after {_ATTEMPTS} attempts")
    if _pct(ms_all, 0.99) > P99_LIMIT_S * 1000:
        problems.append(f"p99 commit {_pct(ms_all, 0.99):.0f} ms > {P99_LIMIT_S * 1000:.0f} ms")
    if max(peak, sampled) > RSS_LIMIT:
        problems.append(f"writer RSS {max(peak, sampled) / 2**20:.0f} MiB > 1024 MiB")
    if last > 2 * first:
        problems.append(f"latency not flat: window p50 {first:.0f} -> {last:.0f} ms")
    return problems


def _rss_during(
    commits: list[dict[str, Any]],
    summaries: list[dict[str, Any]],
    sampler: _Sampler,
    checkpointing: bool,
) -> int:
    """Max sampled RSS of a writer during its commits that wrote (or did not write) a
    checkpoint: delta-rs writes one after every 100th version (99, 199, ..), in the
    committing process, before ``write_deltalake`` returns."""
    del summaries
    by_writer: dict[int, list[tuple[float, float]]] = {}
    for c in commits:
        if c["checkpoint"] == checkpointing and not c["skipped_as_applied"]:
            by_writer.setdefault(c["writer"], []).append((c["t0"], c["t1"]))
    pid_writer = dict(zip(sampler.pids, range(len(sampler.pids)), strict=True))
    best = 0
    for t, pid, rss in sampler.samples:
        spans = by_writer.get(pid_writer[pid], ())
        if any(a <= t <= b for a, b in spans):
            best = max(best, rss)
    return best


def main(argv: list[str] | None = None) -> int:
    """Run the spike in a subprocess and report its exit status beside its figures."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--commits", type=int, default=2000)
    ap.add_argument("--writers", type=int, default=8)
    ap.add_argument("--min-events", type=int, default=50)
    ap.add_argument("--max-events", type=int, default=500)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--warmup", type=float, default=3.0, help="seconds for the writers to load")
    ap.add_argument("--data", help="directory for the table (default: a temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep the table afterwards")
    ap.add_argument("--reopen-every", type=int, default=0, help="commits per table handle")
    ap.add_argument("--exit-probe", type=int, default=3, help="runs of each at-exit probe")
    ap.add_argument("--in-process", action="store_true", help="be the measured run itself")
    args = ap.parse_args(argv)
    if args.in_process:
        return run(args)
    cmd = [sys.executable, "-m", "bench.delta_spike", "--in-process", *(argv or sys.argv[1:])]
    proc = subprocess.run(cmd, stderr=subprocess.PIPE, text=True, check=False)
    tail = proc.stderr.strip().splitlines()[-5:]
    print(f"exit status of the run: {proc.returncode}" + (f"; stderr: {tail}" if tail else ""))
    return 0 if proc.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

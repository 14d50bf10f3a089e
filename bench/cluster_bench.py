"""Issue 34's gates 2 and 6, measured in one run (``make bench-cluster``).

- **Commit latency, four fetchers on one shard** (gate 2: p99 <= 250 ms): four
  processes, each an account's committer holding its account's writer epoch,
  commit batches of parsed messages with their cursor move into one store at
  once; each commit is timed around ``MessageStore.commit`` (waiting for the
  writer lock included), as a sync task commits (folded later, ``apply=False``).
- **One shard costs nothing** (gate 6: within 5%): the same accounts on the real
  Dovecot synced by ``mailledger --store S sync`` and by ``mailledger --cluster C
  sync`` into a one-shard cluster, as whole commands, alternating pair by pair:
  a first sync into a new store, then an idle one; the ratio of each pair.

``python -m bench.cluster_bench [--batches N] [--rounds R] [--messages M]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def _raw(account: str, i: int) -> bytes:
    return (
        f"From: Sender {i} <s{i}@{account}.example>\r\nTo: {account}@example.org\r\n"
        f"Subject: bench {account} {i}\r\nDate: Mon, 01 Jun 2026 10:00:00 +0000\r\n"
        f"Message-ID: <{account}.{i}@bench.example>\r\n\r\n" + "a line of text\r\n" * 40
    ).encode()


def _timed_lock(store: Any, held: list[float]) -> None:
    """Time each hold of ``store``'s writer lock by this thread (a commit's critical
    section; the small-file merges on their own thread are not counted)."""
    lock, me = store.log.lock, threading.current_thread()

    @contextlib.contextmanager
    def timed(*args: Any, **kwargs: Any) -> Iterator[None]:
        with lock(*args, **kwargs):
            t0 = time.perf_counter()
            yield
            if threading.current_thread() is me:
                held.append(time.perf_counter() - t0)

    store.log.lock = timed


def _committer(
    root: str, account: str, batches: int, size: int, go: Any
) -> tuple[list[float], list[float]]:
    """One fetcher's commits: ``batches`` of ``size`` messages, each with its cursor.
    Returns each commit's time and each hold of the writer lock."""
    from pipeline.parse import parse_message
    from pipeline.store import MessageStore

    times: list[float] = []
    held: list[float] = []
    with MessageStore.open(Path(root)) as store:
        _timed_lock(store, held)
        store.take_epoch(f"bench committer {account}", producer=account)
        parsed = [
            [parse_message(_raw(account, b * size + i)) for i in range(size)]
            for b in range(batches)
        ]
        go.wait()
        last: int | None = None
        for b, batch in enumerate(parsed):
            events: list[Any] = []
            for i, p in enumerate(batch):
                uid = b * size + i + 1
                store.blobs.put(_raw(account, uid - 1), p.sha256)
                events.append(
                    store.events.seen(p, source=account, folder="INBOX", uidvalidity=1, uid=uid)
                )
            to = (b + 1) * size
            events.append(
                store.events.cursor_moved(
                    source=account,
                    folder="INBOX",
                    uidvalidity=1,
                    cursor_from=last,
                    cursor_to=to,
                    uidnext=to + 1,
                    mode="delta" if last else "full",
                    reason="bench",
                )
            )
            t0 = time.perf_counter()
            store.commit(events, apply=False)
            times.append(time.perf_counter() - t0)
            last = to
    return times, held


def commit_latency(work: Path, batches: int, size: int, fetchers: int = 4) -> dict[str, Any]:
    from pipeline.store import MessageStore

    root = work / "shard"
    MessageStore.open(root).close()
    ctx = multiprocessing.get_context("spawn")
    go = ctx.Manager().Event()
    with ctx.Pool(fetchers) as pool:
        pending = [
            pool.apply_async(_committer, (str(root), f"acct{k}", batches, size, go))
            for k in range(fetchers)
        ]
        time.sleep(1.0)  # (each has parsed its batches)
        t0 = time.perf_counter()
        go.set()
        results = [p.get() for p in pending]
        wall = time.perf_counter() - t0
    times = sorted(t for r in results for t in r[0])
    held = sorted(t for r in results for t in r[1])

    def pct(q: float, xs: list[float] = times) -> float:
        return round(xs[min(len(xs) - 1, int(q * len(xs)))] * 1000, 1)

    return {
        "fetchers": fetchers,
        "commits": len(times),
        "messages_per_commit": size,
        "p50_ms": pct(0.50),
        "p95_ms": pct(0.95),
        "p99_ms": pct(0.99),
        "max_ms": round(times[-1] * 1000, 1),
        "commits_per_s": round(len(times) / wall, 1),
        "lock_held_p50_ms": pct(0.50, held),
        "lock_held_p99_ms": pct(0.99, held),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def _timed(argv: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, check=False)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"{argv[3:]} exited {done.returncode}: {done.stderr.decode()[-500:]}")
    return wall


def one_shard_parity(work: Path, rounds: int, messages: int) -> dict[str, Any]:
    from testkit.dovecot import Dovecot

    dv = Dovecot()
    dv.start()
    try:
        users = ("gmail", "fastmail", "plain")
        for user in users:
            dv.reset_user(user)
            dv.user(user).bulk_maildir("INBOX", [_raw(user, i) for i in range(messages)])
        config = work / "config.toml"
        config.write_text("".join(dv.account_toml(u) for u in users))
        env = {**os.environ, **dv.password_env(), "HOME": str(work)}
        env.pop("MAILLEDGER_STORE", None)
        ml = [sys.executable, "-m", "pipeline"]
        store, cluster = work / "store", work / "cluster"
        sync = ["sync", "--config", str(config), "--apply", "--workers", "0"]
        pairs: dict[str, list[tuple[float, float]]] = {"first": [], "idle": []}
        for _ in range(rounds):
            shutil.rmtree(store, ignore_errors=True)
            shutil.rmtree(cluster, ignore_errors=True)
            _timed([*ml, "cluster", "init", str(cluster), "--shards", "1"], env)
            for kind in ("first", "idle"):
                plain = _timed([*ml, "--store", str(store), *sync], env)
                one = _timed([*ml, "--cluster", str(cluster), *sync], env)
                pairs[kind].append((plain, one))
        out: dict[str, Any] = {"rounds": rounds, "messages": messages * len(users)}
        for kind, runs in pairs.items():
            out[kind] = {
                "plain_s": round(statistics.median(p for p, _ in runs), 3),
                "one_shard_s": round(statistics.median(o for _, o in runs), 3),
                "ratio_median": round(statistics.median(o / p for p, o in runs), 3),
                "ratio_max": round(max(o / p for p, o in runs), 3),
            }
        return out
    finally:
        dv.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=50, help="commits per fetcher")
    ap.add_argument("--batch-size", type=int, default=50, help="messages per commit")
    ap.add_argument("--rounds", type=int, default=5, help="paired rounds of the parity runs")
    ap.add_argument("--messages", type=int, default=1000, help="messages per account (parity)")
    ap.add_argument("--no-parity", action="store_true", help="commit latency only")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="cluster-bench-") as tmp:
        work = Path(tmp)
        lat = commit_latency(work / "latency", args.batches, args.batch_size)
        (work / "latency").mkdir(exist_ok=True)
        verdict = "ok" if lat["p99_ms"] <= 250 else "MISSED"
        print(
            f"commit latency, {lat['fetchers']} fetchers on one shard, {lat['commits']} commits"
            f" of {lat['messages_per_commit']} messages: p50 {lat['p50_ms']} ms, p95"
            f" {lat['p95_ms']} ms, p99 {lat['p99_ms']} ms, max {lat['max_ms']} ms"
            f" ({lat['commits_per_s']} commits/s; writer lock held p50 {lat['lock_held_p50_ms']}"
            f" ms, p99 {lat['lock_held_p99_ms']} ms; load {lat['load_average'][0]})"
            f" -- gate p99 <= 250 ms: {verdict}",
            flush=True,
        )
        result: dict[str, Any] = {"commit_latency": lat}
        if not args.no_parity:
            par = one_shard_parity(work, args.rounds, args.messages)
            for kind in ("first", "idle"):
                r = par[kind]
                print(
                    f"one-shard cluster vs plain store, {kind} sync of {par['messages']}"
                    f" messages ({par['rounds']} pairs): plain {r['plain_s']} s, one shard"
                    f" {r['one_shard_s']} s, ratio median {r['ratio_median']} max"
                    f" {r['ratio_max']} -- gate within 5%:"
                    f" {'ok' if r['ratio_median'] <= 1.05 else 'MISSED'}",
                    flush=True,
                )
            result["one_shard"] = par
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Issue 34, gate 4: reads across 16 shards against one store of the same mail
(``make bench-cluster-reads``).

The mail: ``testkit.corpus`` messages (seed 1), message i to shard i % 16 (so most
threads cross shards), every one also imported into one store. Both are built
once under ``bench-data/cluster-reads-N/`` and reused. Each read runs in this
process (``ClusterReads`` on the cluster's snapshots; a ``MessageStore`` held in
a session on the store), a warm-up and then ``--runs`` times, alternating
store and cluster; its p95 each side and the ratio. Gate: ``query`` p95 within
1.5x the store's; ``search`` top-50 p95 at most 300 ms. Snapshot lag: a commit of
``--lag-batch`` new messages into a shard, then ``publish_snapshot``, ``--lag-runs``
times; the time from the commit's end until the snapshot is published (p99 at most
10 s).

``python -m bench.cluster_reads [--messages N] [--runs R]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from projections.queries import Sort

REPO = Path(__file__).resolve().parents[1]
SHARDS = 16

QUERIES = {
    "count(*) from messages": "select count(*) from messages",
    "top 10 senders": (
        "select from_addr, count(*) n from messages group by from_addr order by n desc, from_addr"
        " limit 10"
    ),
    "one row by Message-ID": "select subject from messages where message_id = ?",
    "header_index where header = 'from'": (
        "select count(*) from header_index where header = 'from'"
    ),
    "thread(id) macro": "select count(*) from thread(?)",
}
SEARCHES: dict[str, tuple[str, Sort]] = {
    "a word, newest": ("budget", "newest"),
    "a word, relevance": ("budget", "relevance"),
    "two words, newest": ("meeting report", "newest"),
    "date and size, newest": ("date:2001..2030 size:1k..", "newest"),
    "from: a name, newest": ("from:a", "newest"),
}


def _build(where: Path, n: int) -> tuple[Path, Path]:
    """The cluster of 16 shards and the one store (made once, then reused)."""
    from pipeline.cli import main as cli
    from pipeline.cluster import init_cluster, open_catalog, publish_snapshot
    from pipeline.store import MessageStore
    from testkit.corpus import generate_messages

    cluster, single, done = where / "cluster", where / "single", where / "built"
    if done.exists():
        return cluster, single
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True)
    maildirs = [where / "maildirs" / f"{k:02d}" for k in range(SHARDS)]
    for d in maildirs:
        for sub in ("cur", "new", "tmp"):
            (d / sub).mkdir(parents=True)
    for i, (name, raw) in enumerate(generate_messages(n, seed=1)):
        (maildirs[i % SHARDS] / "cur" / f"{name}:2,S").write_bytes(raw)
    env = {"HOME": str(where)}
    init_cluster(cluster, SHARDS, [])
    catalog = open_catalog(cluster)
    for k, shard in enumerate(catalog.shards):
        root = catalog.shard_path(shard)
        cli(["-q", "--store", str(root), "import", "maildir", str(maildirs[k])], env=env)
        cli(["-q", "--store", str(single), "import", "maildir", str(maildirs[k])], env=env)
        with MessageStore.open(root, create=False) as store:
            publish_snapshot(store)
    with MessageStore.open(single, create=False) as store:
        store.catch_up()
    shutil.rmtree(where / "maildirs")
    done.write_text("")
    return cluster, single


def _p(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] * 1000


def _timed(fn: Callable[[], object], runs: int) -> list[float]:
    fn()  # (warm-up)
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def reads(cluster: Path, single: Path, runs: int) -> list[dict[str, Any]]:
    from datetime import UTC

    from pipeline.cluster.reads import open_reads
    from pipeline.store import MessageStore
    from projections.queries import compile_query
    from projections.search import parse

    rows: list[dict[str, Any]] = []
    with (
        open_reads(cluster) as many,
        MessageStore.open(single, create=False) as one,
        one.session(),
    ):
        some_id = (
            one.query("select child from thread_edges order by child limit 1").column(0)[0].as_py()
        )
        now = one.clock.now()
        for name, sql in QUERIES.items():
            params = [some_id] if "?" in sql else None
            a = _timed(partial(one.query, sql, params), runs)
            b = _timed(partial(many.query, sql, params), runs)
            same = one.query(sql, params).to_pylist() == many.query(sql, params).to_pylist()
            rows.append(_row("query", name, a, b, same))
        for name, (q, sort) in SEARCHES.items():
            plan = compile_query(parse(q, now=now, tz=UTC))
            a = _timed(partial(one.search, plan, sort=sort, limit=50), runs)
            b = _timed(partial(many.search, plan, sort=sort, limit=50), runs)
            x = one.search(plan, sort=sort, limit=50).column("message_id").to_pylist()
            y = many.search(plan, sort=sort, limit=50).column("message_id").to_pylist()
            # (relevance: bm25 is per shard, so the page is the same only roughly)
            same = x == y if sort != "relevance" else f"{len(set(x) & set(y))}/{len(x)}"
            rows.append(_row("search", name, a, b, same))
    return rows


def _row(kind: str, name: str, a: list[float], b: list[float], same: bool | str) -> dict[str, Any]:
    one, many = _p(a, 0.95), _p(b, 0.95)
    if kind == "query":
        verdict = "ok" if many <= 1.5 * one else "MISSED"
    else:
        verdict = "ok" if many <= 300 else "MISSED"
    return {
        "kind": kind,
        "read": name,
        "store_p95_ms": round(one, 1),
        "cluster_p95_ms": round(many, 1),
        "store_p50_ms": round(statistics.median(a) * 1000, 1),
        "cluster_p50_ms": round(statistics.median(b) * 1000, 1),
        "ratio": round(many / one, 2) if one else None,
        "same_answer": same,
        "verdict": verdict,
    }


def _same(same: bool | str) -> str:
    return same if isinstance(same, str) else "yes" if same else "NO"


def snapshot_lag(cluster: Path, runs: int, batch: int) -> dict[str, Any]:
    """Commit ``batch`` new messages into a shard, then publish its snapshot."""
    from pipeline.cluster import open_catalog, publish_snapshot
    from pipeline.store import MessageStore
    from testkit.corpus import generate_messages

    catalog = open_catalog(cluster)
    root = catalog.shard_path(catalog.shards[0])
    new = list(generate_messages(runs * batch, seed=7))
    lags = []
    with MessageStore.open(root, create=False) as store:
        for r in range(runs):
            for name, raw in new[r * batch : (r + 1) * batch]:
                store.add(name, raw, source="lag", folder="INBOX")
            t0 = time.perf_counter()
            publish_snapshot(store)
            lags.append(time.perf_counter() - t0)
    return {
        "runs": runs,
        "messages_per_commit": batch,
        "p50_s": round(statistics.median(lags), 3),
        "p99_s": round(_p(lags, 0.99) / 1000, 3),
        "verdict": "ok" if _p(lags, 0.99) <= 10_000 else "MISSED",
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--lag-runs", type=int, default=10)
    ap.add_argument("--lag-batch", type=int, default=50)
    ap.add_argument("--data", type=Path, default=REPO / "bench-data")
    args = ap.parse_args(argv)
    cluster, single = _build(args.data / f"cluster-reads-{args.messages}", args.messages)
    load = os.getloadavg()[0]
    result: dict[str, Any] = {"messages": args.messages, "shards": SHARDS, "load": load}
    result["reads"] = reads(cluster, single, args.runs)
    print(f"reads across {SHARDS} shards, {args.messages} messages, p95 of {args.runs} runs"
          f" in-process (load {load:.1f} at start):")  # fmt: skip
    print(f"  {'read':<44} {'store':>9} {'cluster':>9} {'ratio':>6}  same   gate")
    for r in result["reads"]:
        what = f"{r['kind']} {r['read']}"
        print(
            f"  {what:<44} {r['store_p95_ms']:>7} ms {r['cluster_p95_ms']:>6} ms"
            f" {r['ratio']:>6}  {_same(r['same_answer']):<5}  {r['verdict']}"
        )
    with tempfile.TemporaryDirectory(prefix="cluster-lag-") as tmp:
        copy = Path(tmp) / "cluster"
        shutil.copytree(cluster, copy, symlinks=True)
        lag = snapshot_lag(copy, args.lag_runs, args.lag_batch)
    result["snapshot_lag"] = lag
    print(
        f"snapshot lag (commit of {lag['messages_per_commit']} messages, then publish):"
        f" p50 {lag['p50_s']} s, p99 {lag['p99_s']} s -- gate p99 <= 10 s: {lag['verdict']}"
    )
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

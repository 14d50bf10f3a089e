"""The full-text projection's figures on an existing store: its build (as replay
builds it: msg/s wall, CPU seconds of this process and its workers), its size
against the text it indexes, two-word and phrase search p50 at the API level,
and the incremental update when one message is added.

    python -m bench.fulltext STORE [--samples 200] [--seed 1]

The store's ``fulltext.sqlite`` is rebuilt (nothing else changes, but for the
messages the update step adds). The words are drawn from the stored messages'
own text: two words of one message, and two adjacent words of one (a phrase).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import resource
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

TARGETS = {
    "text_build_msgs_per_s": (">=", 3000.0),
    "text_size_of_extracted": ("<=", 0.5),
    "two_word_p50_ms": ("<=", 50.0),
    "phrase_p50_ms": ("<=", 100.0),
    "one_message_update_ms": ("<=", 50.0),
}

_WORD = re.compile(r"[a-z]{4,}")


def _cpu() -> tuple[float, float]:
    """CPU seconds of this process, and of its child processes (the forkserver,
    whose children the extraction workers are: the live ones' own times, and
    those it reaped in its children's times)."""
    import psutil

    own = resource.getrusage(resource.RUSAGE_SELF)
    workers = 0.0
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            times = child.cpu_times()
            workers += times.children_user + times.children_system + times.user + times.system
    return own.ru_utime + own.ru_stime, workers


def _p50(fn: Any, inputs: list[Any]) -> tuple[float, float]:
    times = []
    for x in inputs:
        t0 = time.perf_counter()
        fn(x)
        times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.99) - 1]


def main(argv: list[str] | None = None) -> int:
    from pipeline.store import MessageStore
    from projections.fulltext.extract import extract
    from projections.fulltext.workers import INLINE_BELOW
    from projections.queries import compile_query
    from projections.search import parse

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("store", type=Path)
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ns = ap.parse_args(argv)
    rng = random.Random(ns.seed)
    figures: dict[str, float] = {}
    now = datetime.now(UTC)

    with MessageStore.open(ns.store, create=False) as store:
        fulltext = store.projector.fulltext
        assert fulltext is not None
        with store.projector.hold():
            store.projector.fulltext = None  # (a copied store mends its views: no index yet)
            con = store.projector.reader()
            store.projector.fulltext = fulltext
            n = int(con.execute("SELECT count(*) FROM messages").fetchall()[0][0])
            load0 = os.getloadavg()[0]
            (own0, workers0), t0 = _cpu(), time.perf_counter()
            fulltext.rebuild(con)
            build_s = time.perf_counter() - t0
            load1 = os.getloadavg()[0]
            own1, workers1 = _cpu()
            own_cpu, workers_cpu = own1 - own0, workers1 - workers0
            shas = [
                r[0]
                for r in con.execute(
                    "SELECT sha256 FROM messages ORDER BY hash(message_id, ?::INTEGER) LIMIT ?",
                    [ns.seed, ns.samples * 5],
                ).fetchall()
            ]
        figures["text_build_msgs_per_s"] = n / build_s
        size = fulltext.path.stat().st_size
        texts = [extract(store.blobs.get(sha)) for sha in shas]
        text_bytes = statistics.mean(len("\n".join(t.row()).encode()) for t in texts) * n
        figures["text_size_of_extracted"] = size / text_bytes

        two, phrases = [], []
        for t in texts:
            words = _WORD.findall(t.body)
            if len(words) >= 2:
                two.append(" ".join(rng.sample(words, 2)))
                i = rng.randrange(len(words) - 1)
                phrases.append(f'"{words[i]} {words[i + 1]}"')
        two, phrases = two[: ns.samples], phrases[: ns.samples]

        def run(q: str) -> object:
            return store.search(compile_query(parse(q, now=now)), "messages", limit=50)

        def hits(q: str) -> int:
            out = store.search(compile_query(parse(q, now=now)), "count")
            return int(out.column(0)[0].as_py())

        with store.session():
            run(two[0])  # (warm)
            two_ms = _p50(run, two)
            phrase_ms = _p50(run, phrases)
            two_hits = statistics.median(hits(q) for q in two[:50])
            phrase_hits = statistics.median(hits(q) for q in phrases[:50])
        figures["two_word_p50_ms"] = two_ms[0]
        figures["phrase_p50_ms"] = phrase_ms[0]

        # one message added: the whole add (blob, log, DuckDB fold, index), and the
        # index's own part (the sync after the fold), timed by wrapping it
        synced: list[float] = []
        sync = fulltext.sync

        def timed_sync(duck: Any) -> int:
            t = time.perf_counter()
            try:
                return sync(duck)
            finally:
                synced.append((time.perf_counter() - t) * 1000)

        fulltext.sync = timed_sync  # type: ignore[method-assign]
        adds = []
        for i in range(21):
            token = f"benchupdate{rng.randrange(1 << 40):x}"
            raw = (
                f"From: Bench <bench@example.org>\r\nSubject: update {token}\r\n"
                f"Message-ID: <{token}.{i}@bench.example>\r\n\r\nthe body of {token}\r\n"
            ).encode()
            began = time.perf_counter()
            store.add(None, raw)
            adds.append((time.perf_counter() - began) * 1000)
        fulltext.sync = sync  # type: ignore[method-assign]
        figures["one_message_update_ms"] = statistics.median(synced)

    # (below INLINE_BELOW messages, or with one, the build extracts in this process)
    workers = fulltext.workers if n >= INLINE_BELOW and fulltext.workers > 1 else 0
    print(
        f"full-text build: {n:,} messages in {build_s:.1f} s wall = {n / build_s:,.0f} msg/s"
        f" ({workers} extraction worker processes and the writer, {os.cpu_count()} CPUs,"
        f" load average {load0:.2f} before, {load1:.2f} after); CPU s: the writer"
        f" {own_cpu:.1f} ({n / own_cpu:,.0f} msg/CPU-s), the extraction workers"
        f" {workers_cpu:.1f} ({n / max(workers_cpu, 1e-9):,.0f} msg/CPU-s), in all"
        f" {(own_cpu + workers_cpu) / n * 1000:.3f} ms a message;"
        f" {(own_cpu + workers_cpu) / build_s:.2f} cores busy on average;"
        f" index {size / 1e6:.1f} MB against about {text_bytes / 1e6:.1f} MB of extracted"
        f" text (from {len(texts)} sampled messages)"
    )
    print(
        f"two words p50/p99 {two_ms[0]:.1f}/{two_ms[1]:.1f} ms (median hits {two_hits:,.0f});"
        f" phrase p50/p99 {phrase_ms[0]:.1f}/{phrase_ms[1]:.1f} ms (median hits"
        f" {phrase_hits:,.0f}); store.search, newest 50"
    )
    print(
        f"one message: the index's sync p50 {figures['one_message_update_ms']:.1f} ms"
        f" (max {max(synced):.1f}), the whole add p50 {statistics.median(adds):.1f} ms"
    )
    print(f"{'figure':28} {'measured':>12} {'target':>12}  ratio")
    for key, (op, target) in TARGETS.items():
        value = figures[key]
        ok = value >= target if op == ">=" else value <= target
        print(
            f"{key:28} {value:12.3f} {op + ' ' + str(target):>12}  {value / target:5.2f}x"
            f" {'ok' if ok else 'MISSED'}"
        )
    print(json.dumps({"figures": figures}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Search latencies at API level and as a whole command, on a store of the bench corpus.

The queries are built from a sample of the store's own messages (drawn with a
seed, so two stores can be asked the same ones): structured queries (one per
prefix a user types most: ``from:``, ``to:``, ``subject:``, ``date:``, ``list:``,
an address's domain, ``thread:{id:}``) and free text (two words of a message's
subject, and the same two as a phrase). Each is timed through
``MessageStore.search`` (the summary output, limit 50, newest first:
a screenful) in one session; the whole command is timed separately with its
start-up, with ``--limit 50`` and printing every match.

    python -m bench.search_bench STORE [--samples 100] [--seed 1]
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

__all__ = ["SearchFigures", "search_figures", "structured_queries", "text_queries"]

_WORD = re.compile(r"[A-Za-z]{4,}")


@dataclass
class SearchFigures:
    """p50 / p90 ms of each kind of query, the whole command's wall seconds, and
    the queries asked (``kinds``: kind -> its queries)."""

    structured: tuple[float, float]
    two_words: tuple[float, float]
    phrase: tuple[float, float]
    relevance: tuple[float, float]
    command_s: float
    """``mailledger search --limit 50 Q``: a screenful, as a person asks."""
    all_hits: tuple[int, float]
    """The same command printing every match: the matches, and its wall seconds."""
    kinds: dict[str, list[str]]
    median_hits: dict[str, float]


def structured_queries(rows: list[dict[str, Any]]) -> list[str]:
    """A structured query per prefix for each sampled message ``rows`` (message_id,
    from_addr, to_addrs, subject, date_key, list_id)."""
    out: list[str] = []
    for r in rows:
        if r["from_addr"]:
            out.append(f"from:{r['from_addr']}")
            out.append(f"from:{r['from_addr'].rsplit('@', 1)[-1]}")
        if r["to_addrs"]:
            out.append(f"to:{r['to_addrs'][0]}")
        words = _WORD.findall(r["subject"] or "")
        if words:
            out.append(f"subject:{words[0]}")
        if r["date_key"]:
            out.append(f"date:{r['date_key'][:7]}")
        if r["list_id"]:
            out.append(f"list:{r['list_id']}")
        out.append(f"thread:{{id:{r['message_id']}}}")
    return out


def text_queries(rows: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """(two free words, the same words as a phrase) from each sampled subject."""
    two, phrases = [], []
    for r in rows:
        words = _WORD.findall(r["subject"] or "")
        if len(words) >= 2:
            two.append(f"{words[0]} {words[1]}")
            phrases.append(f'"{words[0]} {words[1]}"')
    return two, phrases


def _percentiles(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]


def sample_rows(store: Path, seed: int, samples: int) -> list[dict[str, Any]]:
    """``samples`` messages of the store, drawn by ``seed``."""
    from pipeline.store import MessageStore

    with MessageStore.open(store, create=False) as s:
        rows = s.query(
            "SELECT message_id, from_addr, to_addrs, subject, date_key, list_id FROM messages"
            " ORDER BY hash(message_id, ?::INTEGER), message_id LIMIT ?",
            [seed, samples],
        ).to_pylist()
    return rows


def search_figures(store: Path, rows: list[dict[str, Any]]) -> SearchFigures:
    """Time the queries built from ``rows`` on the store at ``store``."""
    from pipeline.store import MessageStore
    from projections.queries import compile_query
    from projections.search import parse

    structured = structured_queries(rows)
    two, phrases = text_queries(rows)
    kinds = {"structured": structured, "two_words": two, "phrase": phrases, "relevance": two}
    times: dict[str, list[float]] = {k: [] for k in kinds}
    hits: dict[str, list[int]] = {k: [] for k in kinds}
    now = datetime.now(UTC)
    with MessageStore.open(store, create=False) as s, s.session():
        s.search(compile_query(parse("from:warm@up.invalid", now=now)), limit=50)  # (warm)
        for kind, queries in kinds.items():
            for q in queries:
                plan = compile_query(parse(q, now=now))
                start = time.perf_counter()
                if kind == "relevance":
                    table = s.search(plan, limit=50, sort="relevance")
                else:
                    table = s.search(plan, limit=50)
                times[kind].append((time.perf_counter() - start) * 1000)
                hits[kind].append(table.num_rows)
    # the whole command, as a user waits for it: the median of three; a screenful
    # (--limit 50), then every match printed (its cost follows the matches)
    from bench.sync_bench import compile_sources

    compile_sources()  # (as installed: not compiling the package at every start)
    q = structured[0] if structured else "from:nobody@invalid"
    cmd = [sys.executable, "-m", "pipeline", "--store", str(store), "search", q]
    walls, every = [], []
    for _ in range(3):
        start = time.perf_counter()
        subprocess.run([*cmd, "--limit", "50"], check=True, capture_output=True)
        walls.append(time.perf_counter() - start)
        start = time.perf_counter()
        out = subprocess.run(cmd, check=True, capture_output=True).stdout
        every.append(time.perf_counter() - start)

    def p(kind: str) -> tuple[float, float]:
        return _percentiles(times[kind]) if times[kind] else (float("nan"), float("nan"))

    return SearchFigures(
        structured=p("structured"),
        two_words=p("two_words"),
        phrase=p("phrase"),
        relevance=p("relevance"),
        command_s=statistics.median(walls),
        all_hits=(out.count(b"\n"), statistics.median(every)),
        kinds=kinds,
        median_hits={k: statistics.median(v) if v else 0.0 for k, v in hits.items()},
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("store", type=Path)
    ap.add_argument("--samples", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ns = ap.parse_args(argv)
    rows = sample_rows(ns.store, ns.seed, ns.samples)
    random.Random(ns.seed).shuffle(rows)
    f = search_figures(ns.store, rows)
    print(
        f"search p50/p90 ms (limit 50, hits returned median): structured"
        f" {f.structured[0]:.1f}/{f.structured[1]:.1f} ({len(f.kinds['structured'])} queries,"
        f" {f.median_hits['structured']:.0f}); two words {f.two_words[0]:.1f}/{f.two_words[1]:.1f}"
        f" ({f.median_hits['two_words']:.0f}); phrase {f.phrase[0]:.1f}/{f.phrase[1]:.1f}"
        f" ({f.median_hits['phrase']:.0f}); two words by relevance (every match ranked, no"
        f" target) {f.relevance[0]:.1f}/{f.relevance[1]:.1f}; `search --limit 50"
        f" {f.kinds['structured'][0]}` {f.command_s:.2f} s, every match printed"
        f" ({f.all_hits[0]}) {f.all_hits[1]:.2f} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

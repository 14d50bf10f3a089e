"""``make bench-scale``: every figure at two store sizes side by side, and how it grows.

An archive is kept for years. A command that takes 0.2 s on 100,000 messages and
grows with the store takes 2 s on 1,000,000, and a replay whose memory grows with
the log stops fitting at all. So the figures of ``bench.run`` and
``bench.sync_bench``, and whole commands as a user types them, are measured at
each size of ``--sizes``; each is divided by what its cost should be proportional
to (the messages of the store, the hits printed, the messages of the thread, the
messages synced, or nothing: one call), and the growth of that cost per unit from
the smallest size to the largest is printed beside the absolute targets. A
growth of 1.0 is linear; above 1.25 is a scale problem. Nothing here gates CI;
it prints, and a one-line JSON of every figure comes last, for a note to quote.

    python -m bench.scale [--sizes 100000,1000000] [--data bench-data]
        [--sync-messages 10000] [--replay-args "--memory 1GiB"] [--no-sync] [--reuse]
        [--peers-size N | --no-peers]

The corpus of each size (``testkit.corpus``, seed 1) is generated once under
``--data`` and reused by later runs (``bench.run`` shares the 100,000 one). The
store is imported again on every run, because the import is a figure; the syncs
go into a working copy of it (its databases copied, its log and blobs hard
linked), so the store stays as imported. The default sizes take about 12 GB of
corpus and 7 GB of store (and 5 GB more for the copy while the syncs run), and
hours on two cores. ``--reuse`` measures the stores an earlier run left (or any
store put at ``DATA/store-N-SEED``) without importing them again: every figure
but the import's, which is then not printed.

Last, notmuch and mu beside mailledger on the corpus of the smallest size
(``bench.peers``; ``--peers-size N`` for another, ``--no-peers`` for none):
indexing it as whole commands, and the counts of every field and operator of
the search language against notmuch's.
"""

from __future__ import annotations

import argparse
import email.utils
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.peers import compare
from bench.run import corpus, lookups
from bench.search_bench import sample_rows, search_figures
from bench.sync_bench import (
    USER,
    Dovecot,
    Mailledger,
    compile_sources,
    measure_sync,
    run_measured,
    seed_inbox,
)

__all__ = ["main"]

_REPEAT = 3
"""Runs of each whole command (fewer when long), replay and idle sync: the median counts."""

GROWTH_MAX = 1.25
"""A cost per unit may grow at most this much from the smallest size to the largest."""


@dataclass
class Size:
    """What was measured on the store of ``n`` messages."""

    n: int
    figures: dict[str, float] = field(default_factory=dict)
    units: dict[str, float] = field(default_factory=dict)
    """Per figure: how many units (messages, hits...) its cost is divided by."""
    lower: set[str] = field(default_factory=set)
    """Figures that are only lower bounds: the command was stopped at the timeout."""
    notes: list[str] = field(default_factory=list)

    def put(self, key: str, value: float, units: float = 1.0, *, lower: bool = False) -> None:
        """Record a figure, what its cost is divided by, and whether it is a lower bound."""
        self.figures[key] = value
        self.units[key] = units
        if lower:
            self.lower.add(key)

    def say(self, text: str) -> None:
        """Print a line of progress now (a 1,000,000-message run takes hours) and keep it."""
        print(f"  [{self.n:,}] {text}", flush=True)
        self.notes.append(text)


@dataclass(frozen=True)
class Row:
    """One line of the table: a figure, its unit of cost, and its target."""

    key: str
    label: str
    kind: str
    """A time ("s", "ms" or "us"), a peak memory ("MiB"), a "rate" (per second) or a "ratio"."""
    per: str = "call"
    """What the cost should be proportional to; "" for a ratio, which has no cost."""
    target: tuple[str, float] | None = None
    largest_only: bool = False
    """The target holds at the largest size only (elsewhere the figure is shown)."""
    shown: str = ""
    """A target printed but not judged (it depends on the server's time)."""


def _rows(sync_messages: int) -> list[Row]:
    """The table, in the order the figures are measured, with the brief's targets."""
    k = f"{sync_messages:,}"
    return [
        Row("import_wall_s", "import maildir wall s", "s", "msg"),
        Row("import_msgs_per_s", "import msg/s", "rate", "msg", (">=", 4000.0)),
        Row("import_rss_mib", "import peak RSS MiB (tree)", "MiB", "msg"),
        Row("replay_seconds", "replay s (its JSON)", "s", "event"),
        Row("replay_wall_s", "replay wall s (process)", "s", "event"),
        Row("replay_events_per_s", "replay events/s", "rate", "event", (">=", 1e5), True),
        Row("replay_rss_mib", "replay peak RSS MiB (tree)", "MiB", "event", ("<=", 1024.0)),
        Row("find_subject_p50_ms", "API find subject p50 ms", "ms", "hit", ("<=", 2.0)),
        Row("find_subject_fixed_ms", "  fit: fixed ms a call", "ms", "call"),
        Row("find_subject_hit_us", "  fit: us a hit", "us", "hit"),
        Row("find_from_p50_ms", "API find from p50 ms", "ms", "hit", ("<=", 2.0)),
        Row("find_from_fixed_ms", "  fit: fixed ms a call", "ms", "call"),
        Row("find_from_hit_us", "  fit: us a hit", "us", "hit"),
        Row("cold_find_p50_ms", "API one-shot find p50 ms", "ms"),
        Row("walk_thread_p50_ms", "API walk_thread p50 ms", "ms", "thread msg", ("<=", 10.0)),
        Row("walk_thread_fixed_ms", "  fit: fixed ms a call", "ms", "call"),
        Row("walk_thread_msg_us", "  fit: us a thread message", "us", "thread msg"),
        Row("raw_get_p50_ms", "API raw get p50 ms", "ms", "call", ("<=", 1.0)),
        Row("search_structured_p50_ms", "API search structured p50 ms", "ms", "call", ("<=", 20.0)),
        Row("search_words_p50_ms", "API search two words p50 ms", "ms", "call", ("<=", 50.0)),
        Row("search_phrase_p50_ms", "API search phrase p50 ms", "ms", "call", ("<=", 100.0)),
        Row("search_command_s", "`search` wall s", "s", "call", ("<=", 0.5)),
        Row("stats_s", "`stats` wall s", "s", "call", ("<=", 0.3)),
        Row("find_plain_s", "`find` top address wall s", "s", "hit"),
        Row("find_json_s", "`find --json` same wall s", "s", "hit"),
        Row("find_plain_json_ratio", "`find` plain / --json", "ratio", "", ("<=", 2.0)),
        Row("thread_s", "`thread` largest wall s", "s", "thread msg"),
        Row("verify_wall_s", "verify wall s", "s", "msg"),
        Row("verify_rss_mib", "verify peak RSS MiB (tree)", "MiB", "msg"),
        Row("sync_empty_wall_s", f"sync {k} into empty wall s", "s", "synced"),
        Row("sync_empty_rss_mib", f"sync {k} into empty RSS MiB", "MiB", "synced"),
        Row("sync_into_wall_s", f"sync {k} into store wall s", "s", "synced"),
        Row("sync_into_rss_mib", f"sync {k} into store RSS MiB", "MiB", "synced"),
        Row("sync_wall_ratio", "sync into store/empty wall", "ratio", "", ("<=", 1.2)),
        Row("sync_rss_ratio", "sync into store/empty RSS", "ratio", "", ("<=", 1.2)),
        Row("sync_one_wall_s", "sync 1 new message wall s", "s", shown="0.5 s+server"),
        Row("sync_one_rss_mib", "sync 1 new message RSS MiB", "MiB", "call", ("<=", 200.0)),
        Row("sync_one_anon_mib", "  of it not file pages MiB", "MiB", "call"),
        Row("sync_idle_wall_s", "idle sync wall s", "s", "call", ("<=", 0.35)),
    ]


# -- running things ----------------------------------------------------------------


def _tree(cmd: list[str], ok: tuple[int, ...] = (0,)) -> tuple[float, float, int, str]:
    """(wall s, peak RSS MiB of the process tree, exit code, what it printed) of one
    run of ``cmd``, measured by ``bench.sync_bench.run_measured``; the bench stops when the
    exit code is not in ``ok``."""
    with tempfile.TemporaryFile() as out:
        wall, rss, code = run_measured(cmd, stdout=out)
        out.seek(0)
        text = out.read().decode("utf-8", "replace")
    if code not in ok:
        sys.exit(f"bench: {shlex.join(cmd)} failed (exit {code})")
    return wall, rss, code, text


@dataclass(frozen=True)
class Timed:
    """The wall of a whole command: the median of its runs, or a lower bound."""

    wall: float
    walls: list[float]
    timed_out: bool
    stdout: str


def _command(cmd: list[str], timeout: float) -> Timed:
    """Run ``cmd`` as a user would, in up to ``_REPEAT`` fresh processes, and time each.

    A command whose cost grows with the store could hold the bench for hours at
    1,000,000 messages (a plain ``find`` of the owner's address there), so its
    time is bounded: a run still going after ``timeout`` seconds is killed, and
    its wall, if no run finished, is a lower bound (``timed_out``); no further
    run starts once another would take the total past ``timeout``, and the
    figure is then the median of fewer runs (all are printed).
    """
    walls: list[float] = []
    out = ""
    for _ in range(_REPEAT):
        if walls and sum(walls) + walls[-1] > timeout:
            break
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            if not walls:
                return Timed(time.perf_counter() - t0, [], True, "")
            break
        walls.append(time.perf_counter() - t0)
        if proc.returncode != 0:
            sys.exit(f"bench: {shlex.join(cmd)} failed ({proc.returncode}):\n{proc.stderr}")
        out = proc.stdout
    return Timed(statistics.median(walls), walls, False, out)


class _IntoStore(Mailledger):
    """``bench.sync_bench``'s mailledger peer, syncing into a store made elsewhere
    (the imported one, in place: its reset empties only the peer's config dir)."""

    name = "mailledger-into-store"

    def __init__(self, dv: Dovecot, work: Path, folders: list[str], store: Path) -> None:
        super().__init__(dv, work, folders)
        self._store = store

    @property
    def store(self) -> Path:
        return self._store


def _new_message(tag: str) -> bytes:
    """One small message whose Message-ID no corpus holds."""
    return (
        "From: New Sender <new@bench.invalid>\r\n"
        "To: alex@home.example.net\r\n"
        f"Subject: one new message ({tag})\r\n"
        f"Date: {email.utils.formatdate()}\r\n"
        f"Message-ID: <scale-{tag}-{time.time_ns()}@bench.invalid>\r\n"
        "\r\n"
        "Delivered between two syncs.\r\n"
    ).encode()


# -- one size ----------------------------------------------------------------------


def _joined(values: Iterable[float], fmt: str) -> str:
    """The samples of a figure, as printed beside it: ``0.41 / 0.43 / 0.40``."""
    return " / ".join(format(v, fmt) for v in values)


def _measure_size(n: int, ns: argparse.Namespace, dv: Dovecot | None) -> Size:
    """Every figure on a store of ``n`` messages, imported afresh from the corpus."""
    m = Size(n)
    maildir = corpus(ns.data, n, ns.seed)
    store = ns.data / f"store-{n}-{ns.seed}"
    ml = [sys.executable, "-m", "pipeline", "--store", str(store)]

    # 1. import. The corpus's dirty pages (11 GB at 1,000,000) are written out
    # first, and the previous step's before each replay, the verify and each
    # sync: the kernel's write-back is not part of any figure. The corpus is read
    # from the disk at every size (``_evict``), as a first import reads it.
    if ns.reuse and (store / "store.json").exists():
        m.say(f"import: not run (--reuse: {store} as it stands)")
    else:
        shutil.rmtree(store, ignore_errors=True)
        os.sync()
        _evict(maildir)
        wall, rss, _, out = _tree([*ml, "import", "maildir", str(maildir), "--json"])
        counts = json.loads(out)
        m.put("import_wall_s", wall, n)
        m.put("import_msgs_per_s", n / wall)
        m.put("import_rss_mib", rss, n)
        m.say(
            f"import: {wall:.1f} s, {n / wall:,.0f} msg/s, {rss:.0f} MiB; new="
            f"{counts['new_messages']} malformed={counts['malformed']}"
            f" balanced={counts['balanced']}"
        )

    # 2. replay: the median of _REPEAT by its own seconds; memory is the peak of all
    replays = []
    for _ in range(_REPEAT):
        os.sync()
        wall, rss, _, out = _tree([*ml, "replay", "--json", *shlex.split(ns.replay_args)])
        replays.append((json.loads(out), wall, rss))
    replay, wall, _ = sorted(replays, key=lambda r: r[0]["seconds"])[len(replays) // 2]
    events, seconds = replay["events"], replay["seconds"]
    m.put("replay_seconds", seconds, events)
    m.put("replay_wall_s", wall, events)
    m.put("replay_events_per_s", events / seconds)
    m.put("replay_rss_mib", max(r[2] for r in replays), events)
    m.say(
        f"replay{' ' + ns.replay_args if ns.replay_args else ''}: {events} events, "
        f"{_joined((r[0]['seconds'] for r in replays), '.2f')} s "
        f"({_joined((r[1] for r in replays), '.2f')} s whole process), "
        f"peak {_joined((r[2] for r in replays), '.0f')} MiB"
    )

    # 3. API-level lookups, as bench.run measures them; the messages of the first
    # (smallest) size's sample at every size, so that each size is asked the same
    # queries (a sender's hits grow with the store: a p50 is divided by the
    # sample's median hits, and the fit splits a call's cost into fixed and per hit)
    lk = lookups(store, ns.seed, ns.samples, sample=ns.sample)
    if ns.sample is None:
        ns.sample = lk.sample
    fits = lk.fits
    m.put("find_subject_p50_ms", lk.find_subject[0], fits["find_subject"].median_units or 1)
    m.put("find_subject_fixed_ms", fits["find_subject"].fixed_ms)
    m.put("find_subject_hit_us", fits["find_subject"].unit_us)
    m.put("find_from_p50_ms", lk.find_from[0], fits["find_from"].median_units or 1)
    m.put("find_from_fixed_ms", fits["find_from"].fixed_ms)
    m.put("find_from_hit_us", fits["find_from"].unit_us)
    m.put("cold_find_p50_ms", lk.cold_find[0])
    m.put("walk_thread_p50_ms", lk.walk_thread[0], fits["walk_thread"].median_units or 1)
    m.put("walk_thread_fixed_ms", fits["walk_thread"].fixed_ms)
    m.put("walk_thread_msg_us", fits["walk_thread"].unit_us)
    m.put("raw_get_p50_ms", lk.raw_get[0])
    st = lk.stats
    m.say(
        f"lookups of {len(lk.sample)} messages (the first size's sample, those stored);"
        f" median hits: subject {fits['find_subject'].median_units:.0f}, from"
        f" {fits['find_from'].median_units:.0f}; thread {fits['walk_thread'].median_units:.0f}"
        f" messages; fits (fixed ms + us a unit): find subject {fits['find_subject'].fixed_ms:.2f}"
        f" + {fits['find_subject'].unit_us:.2f}, find from {fits['find_from'].fixed_ms:.2f} +"
        f" {fits['find_from'].unit_us:.2f}, walk_thread {fits['walk_thread'].fixed_ms:.2f} +"
        f" {fits['walk_thread'].unit_us:.1f}"
    )
    m.say(
        f"store: {st['messages']} messages, {st['threads']} threads, {st['events']} events,"
        f" {st['log_files']} log files, {st['bytes'] / 1e6:.0f} MB; p50/p99 ms: find subject"
        f" {lk.find_subject[0]:.2f}/{lk.find_subject[1]:.2f}, find from"
        f" {lk.find_from[0]:.2f}/{lk.find_from[1]:.2f}, walk_thread"
        f" {lk.walk_thread[0]:.2f}/{lk.walk_thread[1]:.2f}, raw get"
        f" {lk.raw_get[0]:.3f}/{lk.raw_get[1]:.3f}, one-shot find {lk.cold_find[0]:.1f}"
    )

    # 3b. search (bench.search_bench): the first size's sample of messages again
    if ns.search_sample is None:
        ns.search_sample = sample_rows(store, ns.seed, ns.search_samples)
    sf = search_figures(store, ns.search_sample)
    m.put("search_structured_p50_ms", sf.structured[0])
    m.put("search_words_p50_ms", sf.two_words[0])
    m.put("search_phrase_p50_ms", sf.phrase[0])
    m.put("search_command_s", sf.command_s)
    m.say(
        f"search p50/p90 ms (limit 50; median rows returned): structured"
        f" {sf.structured[0]:.1f}/{sf.structured[1]:.1f} ({len(sf.kinds['structured'])} queries,"
        f" {sf.median_hits['structured']:.0f}), two words {sf.two_words[0]:.1f}/"
        f"{sf.two_words[1]:.1f} ({sf.median_hits['two_words']:.0f}), phrase"
        f" {sf.phrase[0]:.1f}/{sf.phrase[1]:.1f} ({sf.median_hits['phrase']:.0f});"
        f" `search --limit 50 {sf.kinds['structured'][0]}` {sf.command_s:.2f} s, every match"
        f" printed ({sf.all_hits[0]}) {sf.all_hits[1]:.2f} s"
    )

    # 4. whole commands, with interpreter start-up, as a user waits for them
    from pipeline.store import MessageStore

    with MessageStore.open(store, create=False) as s:
        top = s.query(
            "SELECT header, value, count(*) AS hits FROM header_index"
            " WHERE header IN ('from', 'to') GROUP BY ALL ORDER BY hits DESC, value LIMIT 1"
        ).to_pylist()[0]
        big = s.query(
            "SELECT min(n.message_id) AS message_id, count(*) AS messages"
            " FROM thread_nodes n JOIN messages m USING (message_id)"
            " GROUP BY n.thread_id ORDER BY messages DESC, message_id LIMIT 1"
        ).to_pylist()[0]
    timeout = ns.command_timeout
    stats = _command([*ml, "stats"], timeout)
    plain = _command([*ml, "find", top["header"], top["value"]], timeout)
    as_json = _command([*ml, "find", top["header"], top["value"], "--json"], timeout)
    thread = _command([*ml, "thread", big["message_id"]], timeout)
    hits, size = top["hits"], big["messages"]
    m.put("stats_s", stats.wall, lower=stats.timed_out)
    m.put("find_plain_s", plain.wall, hits, lower=plain.timed_out)
    m.put("find_json_s", as_json.wall, hits, lower=as_json.timed_out)
    if not as_json.timed_out:
        m.put("find_plain_json_ratio", plain.wall / as_json.wall, lower=plain.timed_out)
    m.put("thread_s", thread.wall, size, lower=thread.timed_out)
    listed = len(json.loads(as_json.stdout)) if as_json.stdout else None

    def walls(t: Timed) -> str:
        return f"> {t.wall:.1f} (stopped)" if t.timed_out else _joined(t.walls, ".2f")

    m.say(
        f"commands (s): stats {walls(stats)}; find {top['header']} {top['value']} ({hits} hits,"
        f" --json listed {listed}): plain {walls(plain)}, --json {walls(as_json)};"
        f" thread of {size} messages {walls(thread)}"
    )

    # 5. verify
    os.sync()
    wall, rss, _, out = _tree([*ml, "verify", "--json"], ok=(0, 1))
    m.put("verify_wall_s", wall, n)
    m.put("verify_rss_mib", rss, n)
    verdict = json.loads(out)
    m.say(f"verify: {wall:.1f} s, {rss:.0f} MiB, ok={verdict['ok']} {verdict['problems'][:3]}")

    # 6. sync, into a copy of the store
    if dv is not None:
        _sync_figures(m, dv, store, ns.data / "scale-sync", ns.sync_messages)
    return m


def _evict(root: Path) -> None:
    """Drop the files under ``root`` from the page cache (written out already).

    Otherwise the figure of a size depends on what earlier steps left there: the
    100,000-message corpus (1.1 GB) is often still cached when it is imported, the
    11 GB of 1,000,000 mostly not, and a cached corpus imported 1.25x as fast here
    (100,000 messages: 41-45 s against 53-56 s read from the disk)."""
    for path in root.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def _working_copy(store: Path, copy: Path) -> None:
    """``copy``: the store at ``store`` as a sync may change it, ``store`` left as it
    is. The files a writer never changes in place (the log's Parquet files, the
    blobs and their packs: new ones are added, old ones replaced by a rename) are
    hard links; the databases and the rest are copied."""
    for src in sorted(store.rglob("*")):
        dst = copy / src.relative_to(store)
        if src.is_dir():
            dst.mkdir(parents=True, exist_ok=True)
            continue
        rel = src.relative_to(store).parts
        linked = rel[0] == "log" or (rel[0] == "blobs" and not rel[-1].startswith("."))
        if linked:
            os.link(src, dst)
        else:
            shutil.copy2(src, dst)


def _sync_figures(m: Size, dv: Dovecot, store: Path, work: Path, k: int) -> None:
    """A first sync of ``k`` messages into an empty store and into a working copy
    of ``store``, then one new message and idle syncs into that copy. ``store``
    itself is left as it was, so that a later ``--reuse`` run syncs the same
    messages into the same store (into the store itself, the second run found
    them all on record: 70 bodies of 10,000). The copies are made under the same
    directory as ``store`` (same disk, same fsync cost), and removed."""
    seeded, mailbox = seed_inbox(dv, k)
    shutil.rmtree(work, ignore_errors=True)
    _working_copy(store, work / "store")
    os.sync()
    empty = Mailledger(dv, work / "empty", ["INBOX"])
    into = _IntoStore(dv, work / "into", ["INBOX"], work / "store")
    try:
        empty.reset()
        into.reset()
        first_empty = measure_sync(dv, empty)
        first_into = measure_sync(dv, into)
        dv.save(USER, "INBOX", _new_message(str(m.n)))
        one = measure_sync(dv, into)
        idles = [measure_sync(dv, into) for _ in range(_REPEAT)]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    runs = [first_empty, first_into, one, *idles]
    if any(r["exit"] not in (0, 3) for r in runs):
        sys.exit(f"bench: a sync failed: exits {[int(r['exit']) for r in runs]}")
    m.put("sync_empty_wall_s", first_empty["wall_s"], k)
    m.put("sync_empty_rss_mib", first_empty["rss_mib"], k)
    m.put("sync_into_wall_s", first_into["wall_s"], k)
    m.put("sync_into_rss_mib", first_into["rss_mib"], k)
    m.put("sync_wall_ratio", first_into["wall_s"] / first_empty["wall_s"])
    m.put("sync_rss_ratio", first_into["rss_mib"] / first_empty["rss_mib"])
    m.put("sync_one_wall_s", one["wall_s"])
    m.put("sync_one_rss_mib", one["rss_mib"])
    m.put("sync_one_anon_mib", one["anon_mib"])
    m.put("sync_idle_wall_s", statistics.median(r["wall_s"] for r in idles))
    m.say(
        f"sync of {seeded} messages ({mailbox / 1e6:.0f} MB): into empty"
        f" {first_empty['wall_s']:.2f} s {first_empty['rss_mib']:.0f} MiB"
        f" ({first_empty['bodies']:.0f} bodies); into the store {first_into['wall_s']:.2f} s"
        f" {first_into['rss_mib']:.0f} MiB ({first_into['bodies']:.0f} bodies); one new"
        f" {one['wall_s']:.2f} s {one['rss_mib']:.0f} MiB, {one['anon_mib']:.0f} MiB of it not"
        f" file pages ({one['bodies']:.0f} body); idle"
        f" {_joined((r['wall_s'] for r in idles), '.2f')} s; exits"
        f" {sorted({int(r['exit']) for r in runs})}"
    )


# -- the table -------------------------------------------------------------------


def _seconds(row: Row, value: float) -> float:
    """A time figure in seconds; a rate as seconds per unit."""
    if row.kind == "rate":
        return 1.0 / value
    return value / {"ms": 1e3, "us": 1e6}.get(row.kind, 1.0)


def _cost(row: Row, m: Size) -> float | None:
    """The figure's cost per unit at this size (seconds or MiB), None when not measured."""
    value = m.figures.get(row.key)
    if value is None or not row.per:
        return None
    base = value if row.kind == "MiB" else _seconds(row, value)
    return base / m.units[row.key]


def _fmt_value(row: Row, m: Size) -> str:
    """The figure as printed; a lower bound (a stopped command) is marked ``>``."""
    value = m.figures.get(row.key)
    if value is None:
        return "-"
    mark = ">" if row.key in m.lower else ""
    if row.kind == "rate":
        return f"{mark}{value:,.0f}"
    if row.kind == "MiB":
        return f"{mark}{value:.0f}"
    return f"{mark}{value:.3f}" if value < 10 else f"{mark}{value:.1f}"


def _fmt_cost(row: Row, m: Size) -> str:
    """The cost per unit in a unit that keeps it readable (us to s, B to MiB)."""
    cost = _cost(row, m)
    if cost is None:
        return "-"
    mark = ">" if row.key in m.lower else ""
    if row.kind == "MiB":
        b = cost * 2**20
        if b < 1024:
            return f"{mark}{b:.0f} B"
        return f"{mark}{b / 1024:.1f} KiB" if b < 2**20 else f"{mark}{cost:.1f} MiB"
    if cost < 1e-3:
        return f"{mark}{cost * 1e6:.1f} us"
    return f"{mark}{cost * 1e3:.2f} ms" if cost < 1 else f"{mark}{cost:.2f} s"


def _judge(row: Row, sizes: list[Size]) -> tuple[str, float | None, str]:
    """(growth as printed, growth, verdict) of a row over the sizes, smallest first.

    The absolute target holds at every size (the largest only, if so marked);
    the cost per unit may grow at most ``GROWTH_MAX``. A timed-out figure is a
    lower bound: it proves a miss or leaves the verdict open ("?").
    """
    misses: list[str] = []
    open_ = False
    if row.target is not None and not row.shown:
        op, target = row.target
        for m in sizes[-1:] if row.largest_only else sizes:
            value = m.figures.get(row.key)
            if value is None:
                continue
            good = value >= target if op == ">=" else value <= target
            if row.key in m.lower and op == "<=" and good:
                open_ = True
            elif not good and "target" not in misses:
                misses.append("target")
    growth, shown = None, "-"
    small, large = sizes[0], sizes[-1]
    cs, cl = _cost(row, small), _cost(row, large)
    if len(sizes) > 1 and cs is not None and cl is not None:
        growth = cl / cs
        low_s, low_l = row.key in small.lower, row.key in large.lower
        if low_s and low_l:
            shown, open_ = "?", True
        elif low_l:  # a lower bound of the growth
            shown = f">{growth:.2f}x"
            if growth > GROWTH_MAX:
                misses.append("growth")
            else:
                open_ = True
        elif low_s:  # an upper bound
            shown = f"<{growth:.2f}x"
            open_ = open_ or growth > GROWTH_MAX
        else:
            shown = f"{growth:.2f}x"
            if growth > GROWTH_MAX:
                misses.append("growth")
    judged = (row.target is not None and not row.shown) or growth is not None
    verdict = (
        f"MISSED ({', '.join(misses)})" if misses else "?" if open_ else "ok" if judged else "-"
    )
    return shown, growth, verdict


def _table(rows: list[Row], sizes: list[Size]) -> dict[str, Any]:
    """Print the table; returns the growth and verdict of each row, for the JSON."""
    heads = [f"@ {m.n:,}" for m in sizes]
    print(
        f"\n{'figure':31} {'per':10} "
        + " ".join(f"{h:>11}" for h in heads)
        + "   cost per unit: "
        + " ".join(f"{h:>11}" for h in heads)
        + f" {'growth':>8} {'target':>13}  verdict"
    )
    out: dict[str, Any] = {"growth": {}, "verdicts": {}}
    for row in rows:
        if not any(row.key in m.figures for m in sizes):
            continue
        shown, growth, verdict = _judge(row, sizes)
        if row.shown:
            target = row.shown
        elif row.target:
            op, t = row.target
            target = f"{op} {t:,.0f}" if t >= 100 else f"{op} {t:g}"
            target += " at max" if row.largest_only else ""
        else:
            target = "-"
        print(
            f"{row.label:31} {row.per or '-':10} "
            + " ".join(f"{_fmt_value(row, m):>11}" for m in sizes)
            + "                  "
            + " ".join(f"{_fmt_cost(row, m):>11}" for m in sizes)
            + f" {shown:>8} {target:>13}  {verdict}"
        )
        out["growth"][row.key] = growth
        out["verdicts"][row.key] = verdict
    return out


# -- main ------------------------------------------------------------------------


def _sizes(text: str) -> list[int]:
    """``--sizes``: message counts, comma-separated, returned smallest first."""
    try:
        sizes = sorted({int(x.replace("_", "")) for x in text.split(",") if x.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of sizes: {text!r}") from None
    if not sizes or sizes[0] < 1:
        raise argparse.ArgumentTypeError("sizes must be positive message counts")
    return sizes


def main(argv: list[str] | None = None) -> int:
    """Measure every size, smallest first, then print the table and the JSON line."""
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--sizes", type=_sizes, default=[100_000, 1_000_000], help="100000,1000000")
    ap.add_argument("--data", type=Path, default=Path("bench-data"), help="corpora and stores")
    ap.add_argument("--seed", type=int, default=1, help="of the corpus")
    ap.add_argument("--samples", type=int, default=1000, help="messages looked up (API p50s)")
    ap.add_argument("--search-samples", type=int, default=100, help="messages queried by search")
    ap.add_argument("--sync-messages", type=int, default=10_000, help="first sync size")
    ap.add_argument(
        "--replay-args", default="", help='more arguments for replay, e.g. "--memory 1GiB"'
    )
    ap.add_argument(
        "--command-timeout",
        type=float,
        default=600.0,
        help="seconds a whole command may run (its wall then a lower bound), and its runs"
        " together, as far as can be foreseen (default 600)",
    )
    ap.add_argument("--no-sync", action="store_true", help="no Dovecot: skip the sync figures")
    ap.add_argument(
        "--reuse",
        action="store_true",
        help="measure the stores an earlier run left under --data (no import figures)",
    )
    ap.add_argument(
        "--peers-size",
        type=int,
        help="the corpus notmuch and mu index beside mailledger (default: the smallest size)",
    )
    ap.add_argument("--no-peers", action="store_true", help="no notmuch / mu comparison")
    ns = ap.parse_args(argv)
    ns.sample = None  # (the first size's lookup sample, asked again at the others)
    ns.search_sample = None  # (likewise for the search queries)

    ns.data.mkdir(parents=True, exist_ok=True)
    ns.data = ns.data.resolve()
    compile_sources()
    dv: Dovecot | None = None
    if not ns.no_sync:
        from testkit.dovecot import find_dovecot  # on the path since bench.sync_bench

        if find_dovecot() is None:
            sys.exit(
                "bench: dovecot is not installed (apt-get install -y dovecot-imapd), or --no-sync"
            )
        dv = Dovecot(rawlog=False)
        dv.start()
    sizes: list[Size] = []
    t0 = time.perf_counter()
    try:
        for n in ns.sizes:
            print(f"store of {n:,} messages:", flush=True)
            sizes.append(_measure_size(n, ns, dv))
    finally:
        if dv is not None:
            dv.stop()

    rows = _rows(ns.sync_messages)
    print(
        f"\nsizes {', '.join(f'{n:,}' for n in ns.sizes)} messages in"
        f" {time.perf_counter() - t0:.0f} s; cost per unit = figure / units ('per': store"
        f" message, replayed event, hit printed, thread message, synced message, or one"
        f" call); growth = cost per unit at {ns.sizes[-1]:,} / at {ns.sizes[0]:,}, target"
        f" <= {GROWTH_MAX} everywhere (import msg/s: within 20% of the smallest size's);"
        f" targets hold at every size unless 'at max'; '>' marks a lower bound (stopped"
        f" after {ns.command_timeout:.0f} s), '?' a verdict it leaves open"
    )
    judged = _table(rows, sizes)
    peers = None
    if not ns.no_peers:
        n = ns.peers_size or ns.sizes[0]
        print(f"\nnotmuch and mu beside mailledger on the corpus of {n:,} messages:")
        peers = compare(corpus(ns.data, n, ns.seed), ns.data / "peers")
    print(
        json.dumps(
            {
                "sizes": ns.sizes,
                "sync_messages": None if ns.no_sync else ns.sync_messages,
                "replay_args": ns.replay_args,
                "figures": {str(m.n): m.figures for m in sizes},
                "units": {str(m.n): m.units for m in sizes},
                "lower_bounds": {str(m.n): sorted(m.lower) for m in sizes},
                **judged,
                "peers": peers,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

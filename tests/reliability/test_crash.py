"""Crash trials: ``kill -9`` a Maildir import at random moments; the store must stay whole.

Store policy: trials keep importing into the same store until one import run
finishes on its own (the next trials resume it, like a person re-running a
killed import); that store then gets its checks of a finished import (every
distinct Message-ID once, a second re-run adds no event) and the next trial
starts a fresh store. The last store is run to completion at the end. Every
kill is followed by the checks of a crashed store.
"""

from __future__ import annotations

import contextlib
import email
import email.policy
import hashlib
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipeline.store import MessageStore
from stores.log import EventLog

pytestmark = pytest.mark.slow

N_MESSAGES = 400
BATCH = 25
TRIALS = 20
SEED = 20261130


@dataclass(frozen=True)
class Source:
    root: Path
    distinct_ids: int
    """Distinct Message-IDs (content hash for a message without one)."""
    locations: int
    """Message files: each is one location (folder, unique name)."""


def _write_maildir(root: Path, n: int, seed: int) -> None:
    try:
        from testkit.corpus import write_maildir
    except ImportError:  # the benchmark corpus is optional: a tiny generator will do
        rng = random.Random(seed)
        for d in ("cur", "new", "tmp", ".Archive/cur", ".Archive/new", ".Archive/tmp"):
            (root / d).mkdir(parents=True, exist_ok=True)
        for i in range(n):
            mid = f"Message-ID: <m{i % (n - 7)}@crash.test>\n" if i % 50 else ""
            body = f"message {i}\n" + "lorem ipsum dolor\n" * rng.randint(1, 200)
            raw = f"From: a{i % 9}@x.org\nTo: b@y.org\nSubject: s{i}\n{mid}\n{body}"
            folder = "cur" if i % 4 else ".Archive/cur"
            (root / folder / f"{1700000000 + i}.M{i}P1.host:2,S").write_text(raw)
        return
    write_maildir(root, n, seed)


def _distinct_ids(root: Path) -> tuple[int, int]:
    """(distinct Message-IDs, message files) of a Maildir, read with the stdlib only."""
    ids: set[str] = set()
    files = 0
    for path in sorted(root.rglob("*")):
        if not path.is_file() or path.parent.name not in ("cur", "new"):
            continue
        raw = path.read_bytes()
        files += 1
        msg = email.message_from_bytes(raw, policy=email.policy.compat32)
        mid = (msg.get("Message-ID") or "").strip().strip("<>").strip()
        ids.add(mid if mid else "sha256:" + hashlib.sha256(raw).hexdigest())
    return len(ids), files


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Source:
    root = tmp_path_factory.mktemp("crash") / "Maildir"
    _write_maildir(root, N_MESSAGES, seed=7)
    distinct, files = _distinct_ids(root)
    assert files == N_MESSAGES
    return Source(root, distinct, files)


def _import_cmd(store: Path, maildir: Path) -> list[str]:
    return [sys.executable, "-m", "pipeline", "--store", str(store), "import", "maildir",
            str(maildir), "--batch-size", str(BATCH)]  # fmt: skip


def _spawn(store: Path, maildir: Path, out: Path) -> subprocess.Popen[bytes]:
    """Start an import in its own process group, its output to ``out`` (never a pipe
    that a helper process outliving the import could hold open)."""
    with open(out, "wb") as fh:
        return subprocess.Popen(
            _import_cmd(store, maildir), stdout=fh, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip


def _group(pgid: int) -> list[int]:
    """Live (not zombie) processes of process group ``pgid``."""
    pids = []
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat_file.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            pids.append(int(stat_file.parent.name))
    return pids


def _reap(proc: subprocess.Popen[bytes]) -> None:
    """End whatever is left of an import's process group (helpers it started)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def _run_import(store: Path, maildir: Path) -> str:
    """Run an import to its end; returns its output."""
    out = store.parent / f"{store.name}.out"
    proc = _spawn(store, maildir, out)
    try:
        code = proc.wait(timeout=120)
    finally:
        _reap(proc)
    text = out.read_text()
    assert code == 0, text
    return text


def _timed_import(store: Path, maildir: Path) -> tuple[float, float, float]:
    """Run an import to its end, watching its log: (how long it took, when its
    first batch was committed, when its last one was), seconds from its start."""
    out = store.parent / f"{store.name}.out"
    t0 = time.monotonic()
    proc = _spawn(store, maildir, out)
    seen, first, last = 0, None, 0.0
    try:
        while proc.poll() is None:
            n = len(list((store / "log").glob("*.parquet"))) if (store / "log").is_dir() else 0
            if n > seen:
                seen, last = n, time.monotonic() - t0
                first = last if first is None else first
            time.sleep(0.002)
        duration = time.monotonic() - t0
    finally:
        _reap(proc)
    assert proc.returncode == 0, out.read_text()
    return duration, (first if first is not None else 0.0), last


def _check_crashed_store(store: Path, source: Source) -> int:
    """The checks after a kill; returns the number of messages the store holds."""
    if not (store / "store.json").exists():  # killed before it made the store
        assert not (store / "log").exists() or not any((store / "log").glob("*.parquet"))
        return 0
    log = EventLog(store / "log")
    files = log.files()  # opens: no gap, no overlap
    for f in files:  # no half batch: each file holds exactly the range its name tells
        seqs = pq.read_table(f.path, columns=["seq"]).column("seq").to_pylist()
        assert seqs == list(range(f.first, f.last + 1)), f.path
        # one batch, or whole batches an append merged (an import's short last
        # batch is its last file)
        assert f.rows <= BATCH or f.rows % BATCH == 0, f.path
    with MessageStore.open(store, create=False) as st:
        assert st.verify() == []  # log, blobs and projections = a fresh replay
        messages = st.query("SELECT count(*) AS n, count(DISTINCT message_id) AS d FROM messages")
        n, d = messages.to_pylist()[0].values()
        assert n == d, "a message is held twice"
        assert n <= source.distinct_ids
        seen = st.query(
            "SELECT count(*) AS n, count(DISTINCT (folder, uidl, sha256)) AS d"
            " FROM events WHERE type = 'message-seen'"
        ).to_pylist()[0]
        assert seen["n"] == seen["d"], "a location was recorded twice"
        assert seen["n"] <= source.locations
        shas = st.query("SELECT DISTINCT sha256 FROM events WHERE sha256 IS NOT NULL")
        missing = [s for s in shas.column("sha256").to_pylist() if not st.blobs.has(s)]
        assert missing == [], "an event names a blob the store does not hold"
        assert st.log.last_seq() == (files[-1].last if files else 0)
    return int(n)


def _check_finished_store(store: Path, source: Source) -> None:
    """A store whose import ran to completion: every distinct id once; a re-run adds nothing."""
    with MessageStore.open(store, create=False) as st:
        assert st.verify() == []
        assert len(st.message_ids()) == source.distinct_ids
        last = st.log.last_seq()
    again = _run_import(store, source.root)
    assert " events=0" in again, again
    assert EventLog(store / "log").last_seq() == last


def test_an_import_killed_at_any_moment_leaves_a_whole_store_that_a_rerun_completes(
    source: Source, tmp_path: Path
) -> None:
    # one uninterrupted run: how long an import takes (process start included), and
    # when it commits. An import spends most of its time starting up and building
    # its projections at the end; its batches are committed in a short window
    # between (the faster the commits, the shorter), where a kill must also land.
    duration, first_commit, last_commit = _timed_import(tmp_path / "reference", source.root)
    window = (max(0.0, first_commit - 0.05), min(duration, last_commit + 0.05))

    rng = random.Random(SEED)
    stores = 0
    store = tmp_path / f"store-{stores}"
    history: list[str] = []  # what each trial did, for the failure message

    def partial() -> list[str]:
        return [
            h
            for h in history
            if "killed" in h and not h.endswith((" 0", f" {source.distinct_ids}"))
        ]

    trial = -1
    # at least TRIALS trials, and more (up to 3x) until 3 kills have landed mid-import:
    # on a busy machine most of an import's time is interpreter start-up
    while (trial := trial + 1) < TRIALS or (len(partial()) < 3 and trial < 3 * TRIALS):
        # any moment on even trials; within the commit window on odd ones
        delay = rng.uniform(0.0, duration) if trial % 2 == 0 else rng.uniform(*window)
        out = tmp_path / f"trial-{trial}.out"
        proc = _spawn(store, source.root, out)
        try:
            try:
                code = proc.wait(timeout=delay)
            except subprocess.TimeoutExpired:
                proc.kill()  # SIGKILL, kill -9, of the import process
                proc.wait(timeout=30)
                _reap(proc)  # then of the worker processes it leaves orphaned
                held = _check_crashed_store(store, source)
                history.append(f"{store.name} killed at {delay:.2f}s holding {held}")
                continue
            _reap(proc)
            assert code == 0, out.read_text()  # it finished before the kill came
            _check_finished_store(store, source)
            history.append(f"{store.name} finished within {delay:.2f}s")
        except AssertionError as exc:
            raise AssertionError(
                f"trial {trial} (import takes {duration:.2f}s, commits within"
                f" {window[0]:.2f}-{window[1]:.2f}s; so far: {history}): {exc}"
            ) from exc
        stores += 1
        store = tmp_path / f"store-{stores}"

    if store.exists():
        _run_import(store, source.root)
        _check_finished_store(store, source)
    assert len(partial()) >= 3, (
        f"too few kills landed mid-import (commits within {window[0]:.2f}-{window[1]:.2f}s"
        f" of {duration:.2f}s): {history}"
    )


def test_a_killed_import_leaves_no_process_behind(source: Source, tmp_path: Path) -> None:
    store = tmp_path / "store"
    _run_import(store, source.root)  # a re-run: parsing every message again, nothing new
    proc = _spawn(store, source.root, tmp_path / "out")
    try:
        deadline = time.monotonic() + 30
        while len(_group(proc.pid)) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)  # until its worker processes are up
        helpers = len(_group(proc.pid)) - 1
        proc.kill()
        proc.wait(timeout=30)
        deadline = time.monotonic() + 5
        while _group(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = _group(proc.pid)
    finally:
        _reap(proc)
    assert helpers > 0, "the import started no helper process: nothing to check"
    assert left == [], f"{len(left)} of its {helpers} helper processes outlived the import"

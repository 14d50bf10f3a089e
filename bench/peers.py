"""notmuch and mu beside mailledger on the bench corpus: indexing it, and the same
questions asked of each.

The same Maildir is indexed by ``notmuch new``, ``mu index`` and ``mailledger
import maildir`` (into a fresh store), each a whole command in a process of its
own, one after the other, the corpus read once first so that each reads it from
the page cache: wall, CPU (user + system of the command and its children), peak
RSS of its process tree (``bench.sync_bench.run_measured``), the index on disk,
and what each needs on disk to answer (notmuch and mu: their index and the
Maildir; mailledger: its store, which keeps the mail itself).

Then every probe of ``testkit.peers`` (every field and operator of the search
language, written in each dialect) is asked through ``notmuch count``, ``mu
find`` and ``mailledger search --output count``, and the counts are printed side
by side with a verdict against notmuch's (mu's where notmuch has no such field):
``agree``, ``differs: KEY`` (a difference on purpose, ``testkit.peers.REASONS``),
or ``DIFFERS`` (unexplained: a bug to fix or a reason to write down).

    python -m bench.peers MAILDIR [--work bench-data/peers]
    python -m bench.peers --messages 10000 [--data bench-data] [--seed 1]

``make bench`` and ``make bench-scale`` run it after their own figures (at the
smallest size); a tool that is not installed is left out with a line saying so.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from bench.sync_bench import run_measured
from testkit.peers import REASONS, SAMPLE_SQL, Mu, Notmuch, Probe, Sample, missing_tools, probes

__all__ = ["compare", "main"]


class _Peer(Protocol):
    name: str
    env: dict[str, str] | None

    def setup(self) -> None: ...
    def index_command(self) -> list[str]: ...
    def index_bytes(self) -> int: ...
    def count(self, probe: Probe) -> int | None: ...


class _Mailledger:
    """mailledger as a peer: ``import maildir`` into a fresh store, ``search --output count``."""

    name = "mailledger"
    env: dict[str, str] | None = None

    def __init__(self, maildir: Path, store: Path) -> None:
        self.maildir = maildir
        self.store = store
        self.ml = [sys.executable, "-m", "pipeline", "--store", str(store)]

    def setup(self) -> None:
        shutil.rmtree(self.store, ignore_errors=True)

    def index_command(self) -> list[str]:
        return [*self.ml, "import", "maildir", str(self.maildir), "--json"]

    def index_bytes(self) -> int:
        """The store less the mail it keeps (``blobs/``): the log, projections, full text."""
        return _tree_bytes(self.store) - _tree_bytes(self.store / "blobs")

    def store_bytes(self) -> int:
        return _tree_bytes(self.store)

    def count(self, probe: Probe) -> int | None:
        out = subprocess.run(
            [*self.ml, "search", "--output", "count", probe.mailledger],
            capture_output=True,
            text=True,
            check=False,
        )
        if out.returncode != 0:
            print(f"  ! mailledger search {probe.mailledger!r}: {out.stderr.strip()}")
            return None
        return int(out.stdout.strip())

    def sample(self) -> Sample:
        out = subprocess.run(
            [*self.ml, "query", "--json", SAMPLE_SQL], capture_output=True, text=True, check=True
        )
        row = json.loads(out.stdout)[0]
        return Sample(row["message_id"], row["thread_id"], row["thread_subject"])


def _tree_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


@dataclass(frozen=True)
class Indexed:
    """One whole indexing command: wall and CPU seconds, peak RSS MiB, exit code,
    its index's bytes, and the bytes it needs to answer (index + what it reads)."""

    name: str
    wall: float
    cpu: float
    rss: float
    code: int
    index_bytes: int
    total_bytes: int


_PR_SET_CHILD_SUBREAPER = 36  # prctl(2), Linux


def _cpu() -> float:
    """User + system seconds of every child this process waited for, so far."""
    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    return u.ru_utime + u.ru_stime


def _measured(cmd: list[str], env: dict[str, str] | None) -> tuple[float, float, float, int]:
    """(wall s, CPU s, peak RSS MiB of the tree, exit code) of one whole command.

    The CPU is user + system of the command and every process under it. Those
    only its own children reaped are not enough: mailledger's import workers
    are children of a multiprocessing forkserver, which outlives the command,
    orphaned, and is reaped by init with their CPU (half of an import's). So
    this process is made a child subreaper for the run: the orphans come here,
    and are waited for here, their CPU with them.
    """
    import ctypes

    import psutil

    libc = ctypes.CDLL(None, use_errno=True)
    before = {p.pid for p in psutil.Process().children()}
    libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    try:
        cpu0 = _cpu()
        wall, rss, code = run_measured(cmd, env)
        for orphan in psutil.Process().children():
            if orphan.pid not in before:
                os.waitpid(orphan.pid, 0)
        cpu = _cpu() - cpu0
    finally:
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
    return wall, cpu, rss, code


def _index(peer: _Peer, maildir_bytes: int) -> Indexed:
    peer.setup()
    os.sync()  # the previous command's dirty pages are nobody's index time
    wall, cpu, rss, code = _measured(peer.index_command(), peer.env)
    index = peer.index_bytes()
    total = peer.store_bytes() if isinstance(peer, _Mailledger) else index + maildir_bytes
    return Indexed(peer.name, wall, cpu, rss, code, index, total)


def _warm(maildir: Path) -> int:
    """Read every file of the corpus once (so that each indexer reads it from the
    page cache, none pays for the disk); returns their bytes."""
    total = 0
    for p in maildir.rglob("*"):
        if p.is_file():
            total += len(p.read_bytes())
    return total


def _verdict(probe: Probe, counts: dict[str, int | None]) -> str:
    ml, nm, mu = counts.get("mailledger"), counts.get("notmuch"), counts.get("mu")
    oracle, by = (nm, "") if nm is not None else (mu, " (mu)")
    if ml is None:
        return "ERROR"
    if oracle is None:
        return "no peer"
    if ml == oracle:
        return "agree" + by
    return f"differs: {probe.differs}" if probe.differs else "DIFFERS" + by


def compare(maildir: Path, work: Path) -> dict[str, Any]:
    """Index ``maildir`` with each tool (their files under ``work``), ask every
    probe of each, print both tables; returns their figures, for a JSON line."""
    maildir, work = maildir.resolve(), work.resolve()
    for pkg in missing_tools():
        print(
            f"peers: {pkg} is not installed (apt-get install -y {pkg}, which `make bench`"
            " does when run as root): its column is left out"
        )
    ml = _Mailledger(maildir, work / "store")
    peers: list[_Peer] = []
    if shutil.which("notmuch"):
        peers.append(Notmuch(maildir, work / "notmuch"))
    if shutil.which("mu"):
        peers.append(Mu(maildir, work / "mu"))
    peers.append(ml)
    maildir_bytes = _warm(maildir)
    indexed = [_index(p, maildir_bytes) for p in peers]
    failed = [i.name for i in indexed if i.code != 0]
    if "mailledger" in failed:
        sys.exit("peers: mailledger import failed")
    peers = [p for p in peers if p.name not in failed]

    print(f"\nindexing {maildir} ({maildir_bytes / 1e6:.0f} MB), each a whole command:")
    print(
        f"{'command':26} {'wall s':>8} {'CPU s':>8} {'peak RSS MiB':>13} {'index MB':>9}"
        f" {'to answer MB':>13}"
    )
    commands = {"notmuch": "notmuch new", "mu": "mu index", "mailledger": "mailledger import"}
    for i in indexed:
        print(
            f"{commands[i.name]:26} {i.wall:8.1f} {i.cpu:8.1f} {i.rss:13.0f}"
            f" {i.index_bytes / 1e6:9.1f} {i.total_bytes / 1e6:13.1f}"
            + (f"  (exit {i.code}: left out)" if i.code else "")
        )
    print(
        "  index: notmuch's and mu's database; mailledger's store less blobs/ (log,"
        " projections, full text). to answer: notmuch and mu need the Maildir too"
        " (index + Maildir); mailledger's store keeps the mail (the whole store)."
    )

    sample = ml.sample()
    rows: list[dict[str, Any]] = []
    spent = dict.fromkeys((p.name for p in peers), 0.0)
    for probe in probes(sample):
        counts: dict[str, int | None] = {}
        for p in peers:
            t0 = time.perf_counter()
            counts[p.name] = p.count(probe)
            spent[p.name] += time.perf_counter() - t0
        rows.append({"probe": probe, "counts": counts, "verdict": _verdict(probe, counts)})

    names = [p.name for p in peers]
    print(f"\n{'covers':34} {'mailledger query':44} " + " ".join(f"{n:>10}" for n in names))
    for r in rows:
        probe = r["probe"]
        cells = " ".join(f"{'-' if r['counts'][n] is None else r['counts'][n]:>10}" for n in names)
        print(f"{probe.covers[:34]:34} {probe.mailledger[:44]:44} {cells}  {r['verdict']}")
    print(f"{'query commands, wall s in all':79} " + " ".join(f"{spent[n]:10.1f}" for n in names))
    keys = sorted({r["probe"].differs for r in rows if r["verdict"].startswith("differs")})
    for key in keys:
        print(f"  {key}: {REASONS[key]}")
    unexplained = [r["probe"].mailledger for r in rows if r["verdict"].startswith(("DIFF", "ERR"))]
    print(
        f"{sum(r['verdict'].startswith('agree') for r in rows)} of {len(rows)} probes agree;"
        f" {sum(r['verdict'].startswith('differs') for r in rows)} differ on"
        f" purpose; unexplained: {unexplained or 'none'}"
    )
    return {
        "indexed": {
            i.name: {
                "wall_s": i.wall,
                "cpu_s": i.cpu,
                "rss_mib": i.rss,
                "index_bytes": i.index_bytes,
                "total_bytes": i.total_bytes,
            }
            for i in indexed
        },
        "counts": {r["probe"].mailledger: r["counts"] for r in rows},
        "unexplained": unexplained,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("maildir", type=Path, nargs="?", help="a Maildir (default: the bench corpus)")
    ap.add_argument("--work", type=Path, help="the peers' files (default: DATA/peers)")
    ap.add_argument("--messages", type=int, default=100_000, help="of the bench corpus")
    ap.add_argument("--data", type=Path, default=Path("bench-data"))
    ap.add_argument("--seed", type=int, default=1)
    ns = ap.parse_args(argv)
    if ns.maildir is None:
        from bench.run import corpus

        ns.data.mkdir(parents=True, exist_ok=True)
        ns.maildir = corpus(ns.data, ns.messages, ns.seed)
    result = compare(ns.maildir, ns.work or ns.data / "peers")
    print(json.dumps({"peers": result}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""IMAP sync benchmark: mailledger and mbsync side by side against one loopback Dovecot.

Bytes are Dovecot's own per-session logout counters (``out=`` = bytes the server
sent), never mailledger's. Wall time and peak RSS come from ``wait4`` on each
child process. Every ratio is computed from figures measured in this run.

    python -m bench.sync_bench [--messages 10000] [--runs 5]
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

from testkit.corpus import generate_messages
from testkit.dovecot import Dovecot

REPO = Path(__file__).resolve().parents[1]

__all__ = ["main"]

USER = "fastmail"


_PSS: list[float] = []  # peak PSS MiB of each run_measured, in order (see run_measured)
_ANON: list[float] = []  # peak anonymous RSS MiB of each run_measured (RSS less file pages)


def run_measured(
    cmd: list[str],
    env: dict[str, str] | None = None,
    stdout: int | IO[bytes] = subprocess.DEVNULL,
) -> tuple[float, float, int]:
    """(wall seconds, peak RSS MiB of the process and all its children, exit code).

    The child's output goes to ``stdout`` (a file for a caller that reads what
    the command printed, e.g. ``replay --json``; discarded by default).

    RSS is sampled every 20 ms over the whole process tree (worker processes
    included), because ``wait4``'s ru_maxrss would also count the memory the
    child inherited from this (large) benchmark process before its exec. A sum
    of RSS counts the pages that worker processes share (libraries, the
    interpreter) once per process; the tree's PSS (each shared page divided
    among its sharers: memory actually used) is sampled too, into ``_PSS``. So is
    the part of RSS that is not pages of files (``rss - shared``: the heap, DuckDB's
    and Arrow's buffers), into ``_ANON``: the rest is the libraries' code and data
    mapped from the page cache, clean and shared, and how much of a library a
    process maps depends on the kernel (Linux 6.18 on ext4 maps file pages in large
    folios: importing DuckDB and opening an instance leaves 47 MiB of its library
    resident read from ext4, 33 MiB read from tmpfs).

    The sampling must not slow down what it measures on a machine of two cores:
    reading a process's PSS walks all its pages (3.4 ms for 200 MB), and listing
    the tree reads every process (1.4 ms). Done at every 20 ms sample for four
    processes, that took most of a core from the sync being timed (and nothing
    from mbsync's single small process). So the tree is listed every 100 ms and
    its PSS read every 200 ms; RSS (cheap) stays at 20 ms.
    """
    import psutil

    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=stdout, stderr=subprocess.PIPE)
    peak = peak_pss = peak_anon = 0
    procs: list[Any] = []
    listed = pss_read = 0.0
    try:
        top = psutil.Process(proc.pid)
        while proc.poll() is None:
            now = time.perf_counter()
            try:
                if now - listed >= 0.1:
                    procs, listed = [top, *top.children(recursive=True)], now
                infos = [p.memory_info() for p in procs]
                peak = max(peak, sum(i.rss for i in infos))
                peak_anon = max(peak_anon, sum(i.rss - i.shared for i in infos))
                if now - pss_read >= 0.2:
                    peak_pss = max(peak_pss, sum(p.memory_full_info().pss for p in procs))
                    pss_read = now
            except psutil.Error:
                listed = 0.0  # a process ended: list the tree again
            time.sleep(0.02)
    finally:
        proc.wait()
    wall = time.perf_counter() - t0
    _PSS.append(peak_pss / 2**20)
    _ANON.append(peak_anon / 2**20)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode not in (0, 3):
        print(f"  ! {' '.join(cmd[:4])}... exit {proc.returncode}: {err[-500:]}", file=sys.stderr)
    return wall, peak / 2**20, proc.returncode


def _server_out(dv: Dovecot, mark: int) -> tuple[int, int]:
    """(bytes the server sent, bodies it sent) in the IMAP sessions since ``mark``."""
    sessions = dv.sessions_since(mark, 1, user=USER, protocol="imap", timeout=10)
    return sum(s["out"] for s in sessions), sum(s.body_count for s in sessions)


class Peer:
    name = ""

    def __init__(self, dv: Dovecot, work: Path, folders: list[str]) -> None:
        self.dv = dv
        self.work = work
        self.folders = folders

    def reset(self) -> None:
        shutil.rmtree(self.work, ignore_errors=True)
        self.work.mkdir(parents=True)

    def sync(self) -> tuple[float, float, int]:
        raise NotImplementedError


class Mailledger(Peer):
    name = "mailledger"
    extra: tuple[str, ...] = ()

    @property
    def store(self) -> Path:
        """The store this peer syncs into (``bench.scale`` points it at a big one)."""
        return self.work / "store"

    def sync(self) -> tuple[float, float, int]:
        cfg = self.work / "config.toml"
        if not cfg.exists():
            cfg.write_text(self.dv.account_toml(USER, folders=self.folders))
        env = {**os.environ, **self.dv.password_env()}
        cmd = [
            sys.executable,
            "-m",
            "pipeline",
            "--store",
            str(self.store),
            "sync",
            "--apply",
            "--config",
            str(cfg),
            *self.extra,
        ]
        return run_measured(cmd, env)


class MailledgerOneProcess(Mailledger):
    """The same sync with no worker processes (smaller, one core)."""

    name = "mailledger-w0"
    extra = ("--workers", "0")


class Mbsync(Peer):
    name = "mbsync"

    def sync(self) -> tuple[float, float, int]:
        rc = self.work / "mbsyncrc"
        if not rc.exists():
            password = self.dv.password_env()[f"MAILLEDGER_TEST_{USER.upper()}_PASSWORD"]
            (self.work / "mail").mkdir(exist_ok=True)
            rc.write_text(
                f"IMAPAccount bench\nHost localhost\nPort {self.dv.imap_port}\nUser {USER}\n"
                f"Pass {password}\nSSLType None\nAuthMechs LOGIN\n\n"
                "IMAPStore bench-remote\nAccount bench\n\n"
                f"MaildirStore bench-local\nPath {self.work}/mail/\nInbox {self.work}/mail/INBOX\n"
                "SubFolders Verbatim\n\n"
                "Channel bench\nFar :bench-remote:\nNear :bench-local:\n"
                f"Patterns {' '.join(self.folders)}\nCreate Near\nSync Pull\nSyncState *\n"
            )
        return run_measured(["mbsync", "-c", str(rc), "-a", "-q"])


def measure_sync(dv: Dovecot, peer: Peer) -> dict[str, float]:
    # the dirty pages of the run before (100+ MB, either peer's) are written out
    # first: the kernel's write-back is nobody's sync time
    os.sync()
    mark = dv.log_mark()
    wall, rss, code = peer.sync()
    out, bodies = _server_out(dv, mark)
    return {
        "wall_s": wall,
        "rss_mib": rss,
        "pss_mib": _PSS[-1],
        "anon_mib": _ANON[-1],
        "server_bytes": out,
        "bodies": bodies,
        "exit": code,
    }


def compile_sources() -> None:
    """Byte-compile the package sources once, as a pip install would.

    This source tree may have no bytecode, and this environment may forbid
    writing it (PYTHONDONTWRITEBYTECODE is set here): then every timed run
    compiled 19 modules from source, 0.06 s of a half-second idle sync.
    """
    for package in ("pipeline", "stores", "projections"):
        compileall.compile_dir(REPO / package, quiet=1)


def seed_inbox(dv: Dovecot, n: int) -> tuple[int, int]:
    """Empty ``USER``'s mailbox, then put ``n`` generated messages (seed 7) into its
    INBOX; returns (messages, bytes). Dovecot indexes the folder before this
    returns, so that no timed sync pays for it."""
    dv.reset_user(USER)
    msgs = [raw for _, raw in generate_messages(n, seed=7)]
    dv.bulk_maildir(USER, "INBOX", msgs)
    dv.status(USER, "INBOX")
    return len(msgs), sum(len(m) for m in msgs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--messages", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=5, help="initial syncs per peer (median)")
    ns = ap.parse_args(argv)
    if shutil.which("mbsync") is None:
        sys.exit("bench: mbsync is not installed (apt-get install -y isync)")

    compile_sources()

    dv = Dovecot(rawlog=False)
    dv.start()
    work = Path(tempfile.mkdtemp(prefix="mailledger-syncbench-"))
    results: dict[str, dict[str, Any]] = {}
    try:
        t0 = time.perf_counter()
        seeded, mailbox = seed_inbox(dv, ns.messages)
        took = time.perf_counter() - t0
        print(f"seeded {seeded} messages, {mailbox / 1e6:.1f} MB, in {took:.1f}s")
        peers = [
            Mailledger(dv, work / "ml", ["INBOX", "Moved"]),
            MailledgerOneProcess(dv, work / "ml0", ["INBOX", "Moved"]),
            Mbsync(dv, work / "mb", ["INBOX", "Moved"]),
        ]
        with dv.imap(USER) as c:
            c.create_folder("Moved")

        # Round by round, every peer once per round: a slower phase of the machine
        # (this VM has them, ~30% for minutes) then falls on all peers alike.
        runs: dict[str, list[dict[str, float]]] = {peer.name: [] for peer in peers}
        for _ in range(ns.runs):
            for peer in peers:
                peer.reset()
                runs[peer.name].append(measure_sync(dv, peer))
        for peer in peers:
            mine = runs[peer.name]
            idles = [measure_sync(dv, peer) for _ in range(ns.runs)]  # half a second each
            results[peer.name] = {
                "initial": {k: statistics.median(x[k] for x in mine) for k in mine[0]},
                "initial_walls": [x["wall_s"] for x in mine],
                "idle": {k: statistics.median(x[k] for x in idles) for k in idles[0]},
                "idle_walls": [x["wall_s"] for x in idles],
            }

        # UIDVALIDITY change (UIDs kept, number changed), then every message moved.
        uv = dv.status(USER, "INBOX")["uidvalidity"]
        dv.set_uidvalidity(USER, "INBOX", uv + 1000)
        dv.status(USER, "INBOX")  # Dovecot re-indexes now, not in the first peer's run
        for peer in peers:
            results[peer.name]["uidvalidity_rescan"] = measure_sync(dv, peer)
        with dv.imap(USER) as c:
            c.select_folder("INBOX")
            c.move("1:*", "Moved")
        dv.status(USER, "Moved")
        dv.status(USER, "INBOX")
        for peer in peers:
            results[peer.name]["moved_all"] = measure_sync(dv, peer)
    finally:
        dv.stop()
        shutil.rmtree(work, ignore_errors=True)

    ml, mb = results["mailledger"], results["mbsync"]
    print(
        f"\nmailbox: {ns.messages} messages, {mailbox / 1e6:.1f} MB; "
        f"initial syncs: median of {ns.runs} (durable: mailledger fsyncs every commit)\n"
    )
    print(
        f"{'case':22} {'peer':13} {'wall s':>8} {'RSS MiB':>8} {'PSS MiB':>8}"
        f" {'server bytes':>14} {'bodies':>7}"
    )
    for case in ("initial", "idle", "uidvalidity_rescan", "moved_all"):
        for name, r in results.items():
            x = r[case]
            print(
                f"{case:22} {name:13} {x['wall_s']:8.2f} {x['rss_mib']:8.0f} {x['pss_mib']:8.0f} "
                f"{x['server_bytes']:14,.0f} {x['bodies']:7.0f}  exit={x['exit']:.0f}"
            )
    for name, r in results.items():
        walls = ", ".join(f"{w:.2f}" for w in r["initial_walls"])
        print(f"initial walls, round by round: {name:13} {walls}")
    for name, r in results.items():
        walls = ", ".join(f"{w:.2f}" for w in r["idle_walls"])
        print(f"idle walls:                    {name:13} {walls}")
    pairs = zip(ml["initial_walls"], mb["initial_walls"], strict=True)
    print("initial wall ratio, round by round:", ", ".join(f"{a / b:.2f}" for a, b in pairs))
    print()
    checks = [
        ("initial wall ratio (<= 0.5)", ml["initial"]["wall_s"] / mb["initial"]["wall_s"], 0.5),
        ("initial peak RSS MiB, all processes (<= 200)", ml["initial"]["rss_mib"], 200.0),
        ("initial peak PSS MiB, all processes (<= 200)", ml["initial"]["pss_mib"], 200.0),
        (
            "initial wall ratio, no workers (<= 0.5)",
            results["mailledger-w0"]["initial"]["wall_s"] / mb["initial"]["wall_s"],
            0.5,
        ),
        (
            "initial peak RSS MiB, no workers (<= 200)",
            results["mailledger-w0"]["initial"]["rss_mib"],
            200.0,
        ),
        (
            "idle bytes ratio (<= 0.01)",
            ml["idle"]["server_bytes"] / max(1, mb["idle"]["server_bytes"]),
            0.01,
        ),
        ("idle wall s incl. start-up (<= 0.6)", ml["idle"]["wall_s"], 0.6),
        (
            "uidvalidity rescan bytes / mailbox (<= 0.05)",
            ml["uidvalidity_rescan"]["server_bytes"] / mailbox,
            0.05,
        ),
        (
            "moved-all rescan bytes / mailbox (<= 0.05)",
            ml["moved_all"]["server_bytes"] / mailbox,
            0.05,
        ),
    ]
    for label, value, target in checks:
        print(f"{label:46} {value:10.4f}  {'ok' if value <= target else 'MISSED'}")
    print(
        "mbsync for comparison: uidvalidity rescan bytes / mailbox "
        f"{mb['uidvalidity_rescan']['server_bytes'] / mailbox:.3f}, moved-all "
        f"{mb['moved_all']['server_bytes'] / mailbox:.3f}"
    )
    print(json.dumps(results), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

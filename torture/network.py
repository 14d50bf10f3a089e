"""Network torture: IMAP syncs through a proxy that breaks the line on a schedule.

Between ``mailledger sync --apply`` and a real loopback Dovecot sits
``testkit/faultproxy.py``: on a schedule it drops the connection mid-FETCH,
stalls it past the client's timeout, resets it (RST), cuts a literal in the
middle or slips an unsolicited ``* N FETCH (FLAGS (\\Seen))`` / ``* N EXISTS``
into the server's answers. Each schedule runs on a fresh store:

1. optionally a clean ``sync --limit K`` first, so the faulted run is a delta;
2. the faulted run. It must end with exit 0 (and then the folder is complete)
   or exit 1 with the reason in the report, never a traceback, never 3; the
   counts balance; no cursor is ahead of the messages durable in the log;
3. a clean run. It must exit 0, download exactly the bodies still missing
   (counted from Dovecot's own logout lines, not from mailledger), leave every
   server message in the store exactly once (one ``message-seen`` per
   location and content), cursors at the highest UID, and ``verify()`` clean.

    python -m torture.network                 # 300 schedules (make torture)
    python -m torture.network --trials 40 --seed 7
    python -m torture.network --trials 5      # one per fault kind: the make-test slice

Exit 0 when no schedule broke a rule; the figures are printed either way.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import random
import re
import shutil
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torture import Result, cli_main

__all__ = [
    "FULL_TRIALS",
    "QUICK_TRIALS",
    "SEED",
    "CampaignFigures",
    "FolderTruth",
    "RunResult",
    "Schedule",
    "SyncDriver",
    "bodies_since",
    "durable_prefix_problems",
    "main",
    "one_of_each",
    "random_schedules",
    "run_campaign",
    "schedules_for",
    "seed_mailbox",
    "server_truth",
    "store_problems",
]

FULL_TRIALS = 300
QUICK_TRIALS = 5  # one schedule per fault kind
SEED = 20261130

USER = "fastmail"
ACCOUNT = "torture"
FOLDERS = ("INBOX", "Archive")
TIMEOUT = 1.0  # the account's timeout: a stall longer than this must fail the call


# -- the mail on the server ------------------------------------------------------


def _message(folder: str, i: int, size: int) -> bytes:
    body_line = f"{folder} message {i}: l\u00f6rem ipsum dolor sit amet {i}\r\n"
    body = (body_line * (size // len(body_line.encode()) + 1))[: max(size, 1)]
    return (
        f"From: Sender {i} <s{i % 7}@net.example>\r\nTo: me@net.example\r\n"
        f"Subject: {folder} {i}\r\nDate: Tue, 0{1 + i % 9} Sep 2026 08:{i % 60:02d}:00 +0000\r\n"
        f"Message-ID: <net-{folder.lower()}-{i}@torture.example>\r\n"
        "Content-Type: text/plain; charset=utf-8\r\n\r\n"
    ).encode() + body.encode()


def seed_mailbox(dv: Any, user: str = USER, *, inbox: int = 36, archive: int = 8) -> int:
    """Fill INBOX and Archive with messages of mixed sizes (1 KB .. 250 KB, so
    literals span many reads); returns how many were written."""
    sizes = [900, 1500, 30_000, 2_000, 250_000, 700, 12_000, 3_000, 80_000]
    n = dv.bulk_maildir(user, "INBOX", [_message("INBOX", i, sizes[i % 9]) for i in range(inbox)])
    n += dv.bulk_maildir(
        user, "Archive", [_message("Archive", i, sizes[(i * 5) % 9]) for i in range(archive)]
    )
    return int(n)


@dataclass(frozen=True)
class FolderTruth:
    """What the server holds in one folder, read with doveadm (no IMAP session)."""

    uidvalidity: int
    uids: dict[int, str]  # uid -> Message-ID (normalized as mailledger does)


def server_truth(dv: Any, user: str, folders: Sequence[str]) -> dict[str, FolderTruth]:
    from projections.normalize import normalize_msgid

    out: dict[str, FolderTruth] = {}
    for folder in folders:
        uv = dv.status(user, folder)["uidvalidity"]
        rows = dv.tab("fetch", "-u", user, "uid hdr.message-id", "mailbox", folder)
        uids = {int(r["uid"]): normalize_msgid(r.get("hdr.message-id", "")) or "" for r in rows}
        out[folder] = FolderTruth(int(uv), uids)
    return out


# -- driving the CLI -------------------------------------------------------------


@dataclass
class RunResult:
    """One in-process ``mailledger`` run: exit code, JSON report, output, traceback."""

    code: int | None
    report: dict[str, Any] | None
    stdout: str
    stderr: str
    traceback: str | None
    seconds: float

    def folder(self, account: str, folder: str) -> dict[str, Any]:
        assert self.report is not None
        return dict(self.report["accounts"][account]["folders"].get(folder, {}))

    def reason_visible(self) -> bool:
        """An exit 1 must say why: a folder or account error, a counted error."""
        if not self.report:
            return bool(self.stderr.strip())
        for acct in self.report.get("accounts", {}).values():
            if acct.get("error") or acct.get("folder_errors"):
                return True
            if acct.get("counts", {}).get("errors"):
                return True
        return False


_WORKERS_FLAG: bool | None = None


def _has_workers_flag() -> bool:
    """Whether ``sync`` takes ``--workers`` (parser processes; 0 keeps a run in-process)."""
    global _WORKERS_FLAG
    if _WORKERS_FLAG is None:
        from pipeline.cli import build_parser

        try:
            with contextlib.redirect_stderr(io.StringIO()):
                build_parser({}).parse_args(["sync", "--workers", "0"])
            _WORKERS_FLAG = True
        except Exception:
            _WORKERS_FLAG = False
    return _WORKERS_FLAG


def run_cli(argv: Sequence[str], env: dict[str, str]) -> RunResult:
    """``mailledger ARGV`` in this process; a traceback is caught and returned."""
    from pipeline.cli import main as cli_main

    out, err = io.StringIO(), io.StringIO()
    t0 = time.monotonic()
    code: int | None = None
    tb: str | None = None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli_main(list(argv), env=env)
        except SystemExit as exc:  # argparse --help and the like
            code = int(exc.code or 0) if not isinstance(exc.code, str) else 2
        except KeyboardInterrupt:
            raise
        except BaseException:  # a crash of the command under test: reported, not raised
            tb = traceback.format_exc()
    seconds = time.monotonic() - t0
    text = out.getvalue()
    report = None
    for line in reversed(text.strip().splitlines()):
        with contextlib.suppress(ValueError):
            report = json.loads(line)
            break
    return RunResult(code, report, text, err.getvalue(), tb, seconds)


class SyncDriver:
    """A store and a config file for one Dovecot user, reached at ``port``."""

    def __init__(
        self,
        dv: Any,
        workdir: Path,
        port: int,
        *,
        user: str = USER,
        account: str = ACCOUNT,
        folders: Sequence[str] = FOLDERS,
        timeout: float = TIMEOUT,
        **extra: object,
    ) -> None:
        """``extra``: more account keys (``initial="new-only"``...)."""
        from testkit.dovecot import USERS, toml_value

        self.dv = dv
        self.user = user
        self.account = account
        self.folders = tuple(folders)
        self.store = workdir / "store"
        self.config = workdir / "config.toml"
        workdir.mkdir(parents=True, exist_ok=True)
        keys: dict[str, object] = {
            "type": "imap",
            "host": "127.0.0.1",
            "port": port,
            "tls": "none",
            "username": user,
            "password_env": "TORTURE_IMAP_PASSWORD",
            "folders": list(self.folders),
            "timeout": timeout,
            **extra,
        }
        lines = [f"[accounts.{account}]"]
        for k, v in keys.items():
            lines.append(f"{k} = {v!r}" if isinstance(v, float) else f"{k} = {toml_value(v)}")
        self.config.write_text("\n".join(lines) + "\n")
        self.env = {"TORTURE_IMAP_PASSWORD": USERS[user], "HOME": str(workdir)}

    def sync(self, *args: str, workers: int = 0) -> RunResult:
        argv = ["--store", str(self.store), "sync", "--config", str(self.config), "--json"]
        if _has_workers_flag():
            argv += ["--workers", str(workers)]
        return run_cli([*argv, *args], self.env)

    @contextlib.contextmanager
    def open(self) -> Iterator[Any]:
        from pipeline.store import MessageStore

        store = MessageStore.open(self.store, create=False)
        try:
            yield store
        finally:
            store.close()


_LOGIN = re.compile(r"imap-login: Info: Login: user=<(?P<user>[^>]*)>.*session=<(?P<s>[^>]*)>")


def bodies_since(dv: Any, mark: int, user: str, timeout: float = 5.0) -> tuple[int, int]:
    """``(sessions, body_count)`` of the IMAP sessions of ``user`` that logged in
    after ``mark``, from Dovecot's own log (waits for their logout lines)."""
    from testkit.dovecot import session_bytes

    def ended(text: str) -> list[Any] | None:
        started = {m["s"] for m in _LOGIN.finditer(text) if m["user"] == user}
        done = [s for s in session_bytes(text) if s.session in started]
        return done if len(done) == len(started) else None

    text = dv.log_since(mark, until=lambda t: ended(t) is not None, timeout=timeout)
    done = ended(text) or []
    return len(done), sum(s.body_count for s in done)


# -- the rules -------------------------------------------------------------------


def durable_prefix_problems(store: Any, account: str, truth: dict[str, FolderTruth]) -> list[str]:
    """Every server UID at or below a folder's cursor must be durable in the log,
    as the message the server holds there."""
    problems: list[str] = []
    for folder, t in truth.items():
        cur = store.cursor(account, folder)
        if cur is None or cur.get("last_uid") is None:
            continue
        if cur["uidvalidity"] != t.uidvalidity:
            problems.append(f"{folder}: cursor uidvalidity {cur['uidvalidity']} != {t.uidvalidity}")
            continue
        rows = store.query(
            "SELECT uid, message_id FROM locations WHERE source = ? AND folder = ?"
            " AND uidvalidity = ?",
            [account, folder, t.uidvalidity],
        ).to_pylist()
        held: dict[int, set[str]] = {}
        for r in rows:
            held.setdefault(r["uid"], set()).add(r["message_id"])
        for uid, mid in sorted(t.uids.items()):
            if uid <= cur["last_uid"] and mid not in held.get(uid, set()):
                problems.append(
                    f"{folder}: cursor at {cur['last_uid']} but uid {uid} <{mid}> is not durable"
                )
                break
    return problems


def store_problems(store: Any, account: str, truth: dict[str, FolderTruth]) -> list[str]:
    """After a clean run: every server message stored once, one ``message-seen``
    per location and content, cursors at the top, ``verify()`` clean."""
    problems = list(durable_prefix_problems(store, account, truth))
    want = {mid for t in truth.values() for mid in t.uids.values()}
    have = set(store.message_ids())
    if want - have:
        problems.append(f"missing from the store: {sorted(want - have)[:5]}")
    for folder, t in truth.items():
        cur = store.cursor(account, folder)
        top = max(t.uids, default=0)
        if t.uids and (cur is None or cur.get("last_uid") != top):
            problems.append(f"{folder}: cursor {cur and cur.get('last_uid')} != highest uid {top}")
    doubled = store.query(
        "SELECT folder, uidvalidity, uid, sha256, count(*) AS n FROM events"
        " WHERE type = 'message-seen' AND source = ?"
        " GROUP BY folder, uidvalidity, uid, sha256 HAVING count(*) > 1",
        [account],
    ).to_pylist()
    if doubled:
        problems.append(f"locations recorded more than once: {doubled[:3]}")
    problems.extend(f"verify: {p}" for p in store.verify())
    return problems


# -- schedules -------------------------------------------------------------------


@dataclass(frozen=True)
class Schedule:
    """The faults of one trial, and how the store is prepared before it."""

    faults: tuple[Any, ...]  # faultproxy.Fault
    presync: int | None = None  # a clean `sync --limit N` before the faults
    workers: int = 0  # --workers for the faulted run

    def describe(self) -> str:
        pre = f"presync {self.presync}; " if self.presync else ""
        return (
            pre
            + "; ".join(f.describe() for f in self.faults)
            + (f"; workers {self.workers}" if self.workers else "")
        )


def _payload(rng: random.Random) -> bytes:
    n = rng.randint(1, 60)
    return rng.choice(
        [
            f"* {n} FETCH (FLAGS (\\Seen))\r\n",
            f"* {n} FETCH (UID {rng.randint(1, 60)} FLAGS (\\Seen \\Flagged))\r\n",
            f"* {n} EXISTS\r\n",
            f"* {n} RECENT\r\n",
        ]
    ).encode()


def _log_uniform(rng: random.Random, hi: int) -> int:
    return int(10 ** rng.uniform(0, math.log10(hi)))


def random_fault(rng: random.Random) -> Any:
    from testkit.faultproxy import Fault

    kind = rng.choices(
        ["drop", "rst", "stall", "truncate", "inject"], weights=[22, 16, 16, 22, 24]
    )[0]
    conn = rng.choice([0, 0, 0, 1, 2, None])
    if kind == "truncate":
        return Fault(
            "truncate", conn=conn, literal=rng.randint(1, 50), cut=_log_uniform(rng, 260_000)
        )
    if rng.random() < 0.75:
        trigger: dict[str, Any] = {
            "on_command": "FETCH",
            "nth": rng.randint(1, 4),
            "after": _log_uniform(rng, 400_000),
        }
    else:
        trigger = {"at_bytes": _log_uniform(rng, 1_400_000)}
    if kind == "stall":
        if rng.random() < 0.5:
            return Fault("stall", conn=conn, seconds=rng.uniform(1.2, 2.2), **trigger)
        # a short stall the client must ride out, or a long one it gives up on
        secs = rng.choice([rng.uniform(0.1, 0.6), rng.uniform(1.2, 2.0)])
        return Fault("stall", conn=conn, seconds=secs, then="resume", **trigger)
    if kind == "inject":
        return Fault("inject", conn=conn, payload=_payload(rng), **trigger)
    return Fault(kind, conn=conn, **trigger)


def random_schedules(n: int, seed: int) -> list[Schedule]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        count = rng.choices([1, 2, 3], weights=[60, 30, 10])[0]
        faults = tuple(random_fault(rng) for _ in range(count))
        presync = rng.randint(1, 30) if rng.random() < 0.4 else None
        workers = 2 if rng.random() < 0.1 else 0
        out.append(Schedule(faults, presync, workers))
    return out


def one_of_each() -> list[Schedule]:
    """One schedule per fault kind (the ``make test`` slice), mid-FETCH where it can."""
    from testkit.faultproxy import Fault

    return [
        Schedule((Fault("drop", on_command="FETCH", nth=2, after=40_000),)),
        Schedule((Fault("stall", on_command="FETCH", nth=2, after=5_000, seconds=1.6),)),
        Schedule((Fault("rst", conn=None, on_command="FETCH", nth=1, after=300),), presync=5),
        Schedule((Fault("truncate", literal=40, cut=100_000),)),
        Schedule(
            (Fault("inject", on_command="FETCH", nth=2, after=2_000,
                   payload=b"* 3 FETCH (FLAGS (\\Seen))\r\n"),
             Fault("inject", on_command="FETCH", nth=1, after=10, payload=b"* 99 EXISTS\r\n")),
        ),
    ]  # fmt: skip


# -- the campaign ----------------------------------------------------------------


@dataclass
class CampaignFigures:
    schedules: int = 0
    scheduled: Counter[str] = field(default_factory=Counter)
    fired: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    faulted_runs_seconds: list[float] = field(default_factory=list)
    recovery_bodies: int = 0
    firings: int = 0
    messages: int = 0
    violations: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def lines(self) -> list[str]:
        t = sorted(self.faulted_runs_seconds) or [0.0]
        return [
            f"network: {self.schedules} schedules over {self.messages} messages"
            f" in {self.seconds:.0f}s",
            "  faults scheduled: " + _fmt(self.scheduled),
            "  faults fired:     "
            + _fmt(self.fired)
            + f" ({self.firings} firings: a fault on every connection fires on each)",
            "  faulted runs:     " + _fmt(self.outcomes),
            f"  faulted run time: median {t[len(t) // 2]:.2f}s, max {t[-1]:.2f}s",
            f"  clean re-runs: all exit 0; bodies downloaded to recover: {self.recovery_bodies}"
            " (= exactly the messages missing, per Dovecot's logout lines)"
            if not self.violations
            else f"  VIOLATIONS: {len(self.violations)}",
            *(f"    {v}" for v in self.violations[:40]),
        ]


def _fmt(c: Counter[str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(c.items())) or "-"


def run_schedule(
    dv: Any, proxy: Any, workdir: Path, sch: Schedule, truth: dict[str, FolderTruth]
) -> tuple[list[str], str, list[Any], float, int]:
    """One trial; returns (violations, outcome, fired faults, faulted-run seconds,
    bodies downloaded by the clean re-run)."""
    drv = SyncDriver(dv, workdir, proxy.port)
    problems: list[str] = []
    proxy.schedule([])
    if sch.presync:
        pre = drv.sync("--apply", "--limit", str(sch.presync))
        if pre.code != 0:
            return [f"clean presync exit {pre.code}: {pre.stderr[-300:]}"], "presync", [], 0.0, 0
    before: dict[str, Any] = {}
    if drv.store.exists():
        with drv.open() as s:
            before = {f: s.cursor(ACCOUNT, f) for f in truth}
    proxy.schedule(list(sch.faults))
    run = drv.sync("--apply", workers=sch.workers)
    proxy.idle()
    fired = list(proxy.fired)
    proxy.schedule([])

    if run.traceback:
        problems.append("traceback: " + run.traceback.strip().splitlines()[-1])
        problems.append(run.traceback[-1500:])
    if run.code not in (0, 1):
        problems.append(f"exit {run.code} (only 0 or 1 allowed): {run.stderr[-400:]}")
    if run.report is None:
        problems.append("no JSON report")
    elif not run.report.get("balanced", False):
        problems.append("the run's counts do not balance")
    if run.code == 1 and not run.reason_visible():
        problems.append("exit 1 without a visible reason")
    if run.seconds > 60:
        problems.append(f"the faulted run took {run.seconds:.0f}s")
    outcome = f"exit {run.code}"
    if drv.store.exists():
        with drv.open() as s:
            problems += durable_prefix_problems(s, ACCOUNT, truth)
            after = {f: s.cursor(ACCOUNT, f) for f in truth}
            stored = set(s.message_ids())
    else:
        after, stored = {}, set()
    want = {mid for t in truth.values() for mid in t.uids.values()}
    if run.code == 0:
        if want - stored:
            problems.append(f"exit 0 but {len(want - stored)} messages missing (silent loss)")
        outcome = "exit 0, complete"
    elif run.code == 1:
        moved = any(
            (after.get(f) or {}).get("last_uid") != (before.get(f) or {}).get("last_uid")
            for f in truth
        )
        outcome = (
            "exit 1, cursor advanced over durable prefix" if moved else ("exit 1, cursor unmoved")
        )

    mark = dv.log_mark()
    clean = drv.sync("--apply")
    _, bodies = bodies_since(dv, mark, drv.user)
    if clean.traceback or clean.code != 0:
        problems.append(
            f"clean re-run exit {clean.code}: {(clean.traceback or clean.stderr)[-600:]}"
        )
    missing = len(want - stored)
    if bodies != missing:
        problems.append(f"clean re-run downloaded {bodies} bodies, {missing} were missing")
    with drv.open() as s:
        problems += store_problems(s, ACCOUNT, truth)
    return problems, outcome, fired, run.seconds, bodies


def run_campaign(
    dv: Any,
    workdir: Path,
    schedules: Sequence[Schedule],
    *,
    user: str = USER,
    progress: bool = False,
    keep: bool = False,
) -> CampaignFigures:
    """Seed ``user``'s mailbox (the user is reset first) and run every schedule."""
    from testkit.faultproxy import FaultProxy

    t0 = time.monotonic()
    figs = CampaignFigures()
    dv.reset_user(user)
    figs.messages = seed_mailbox(dv, user)
    truth = server_truth(dv, user, FOLDERS)
    with FaultProxy(("127.0.0.1", dv.imap_port)) as proxy:
        for n, sch in enumerate(schedules):
            trial = workdir / f"s{n:04d}"
            for f in sch.faults:
                figs.scheduled[f.kind] += 1
            try:
                problems, outcome, fired, secs, bodies = run_schedule(dv, proxy, trial, sch, truth)
            except Exception:
                problems, outcome, fired, secs, bodies = (
                    [f"harness: {traceback.format_exc()[-800:]}"],
                    "harness error",
                    [],
                    0.0,
                    0,
                )
            figs.schedules += 1
            figs.outcomes[outcome] += 1
            figs.faulted_runs_seconds.append(secs)
            figs.recovery_bodies += bodies
            figs.firings += len(fired)
            for f in {x.fault for x in fired}:
                figs.fired[f.kind] += 1
            if problems:
                figs.violations.append(f"schedule {n} [{sch.describe()}]: " + " | ".join(problems))
            elif not keep:
                shutil.rmtree(trial, ignore_errors=True)
            if progress:
                mark = "!" if problems else "."
                print(mark, end="\n" if (n + 1) % 50 == 0 else "", flush=True, file=sys.stderr)
    if progress:
        print(file=sys.stderr)
    figs.seconds = time.monotonic() - t0
    return figs


def schedules_for(trials: int, seed: int) -> list[Schedule]:
    """``trials`` schedules: one of each fault kind first, then random ones."""
    base = one_of_each()
    return base[:trials] + random_schedules(max(0, trials - len(base)), seed)


def main(trials: int = FULL_TRIALS, seed: int = SEED, workdir: Path | None = None) -> Result:
    """Start a private Dovecot, run ``trials`` schedules, print the figures."""
    result = Result("network")
    t0 = time.monotonic()
    from testkit.dovecot import Dovecot, find_dovecot

    if find_dovecot() is None:
        result.skipped.append("dovecot is not installed")
        print("network: SKIPPED (dovecot is not installed)", flush=True)
        return result
    work = Path(tempfile.mkdtemp(prefix="mailledger-torture-net-", dir=workdir))
    dv = Dovecot(rawlog=False)
    dv.start()
    try:
        figs = run_campaign(dv, work, schedules_for(trials, seed), progress=sys.stderr.isatty())
    finally:
        dv.stop()
        shutil.rmtree(work, ignore_errors=True)
    for v in figs.violations:
        result.fail(v)
    result.trials = figs.schedules
    result.faults = sum(figs.fired.values())
    result.figures = {
        "seed": seed,
        "messages": figs.messages,
        "scheduled": dict(figs.scheduled),
        "fired": dict(figs.fired),
        "firings": figs.firings,
        "outcomes": dict(figs.outcomes),
        "recovery_bodies": figs.recovery_bodies,
    }
    result.seconds = time.monotonic() - t0
    print(f"network: seed {seed}")
    print("\n".join(figs.lines()), flush=True)
    return result


if __name__ == "__main__":
    cli_main(main, FULL_TRIALS, SEED)

"""Fencing under chaos (issue 34, gate 1): one shard, four accounts synced by four
concurrent task processes, committers killed and paused at random points.

Each trial puts new mail (and now and then an expunge) on the four Dovecot
mailboxes, then runs one sync task per account at once: the real
``pipeline.cluster.sync.sync_account_task``, each in its own process, as Dask
runs it (one account, its account's writer epoch, commits in short critical
sections). Then one of them is hit:

- **kill** trials: a ``kill -9`` at a random moment, then the task is run again,
  as Dask's retry would;
- **pause** trials: a ``SIGSTOP`` at a random moment; the task is declared lost
  (its lease expired) and a second attempt runs to its end; then the first is
  resumed. Whatever it commits after the second attempt took the epoch is
  refused (``StaleEpochError``): counted, and required at least once.

After every trial each account is synced once more (a run that must find its
folder whole) and the shard is checked: no message lost (every UID on the server
has its location, every Message-ID is held), none doubled (one ``message-seen``
per location), no seq gap (the log is whole: ``verify``), and every cursor at the
server's last UID.

``python -m torture.fencing [--trials N] [--pauses M]``; ``make fencing-chaos``
runs the gate's 100 kills and 20 pauses.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from torture import REPO, Result, dovecot_server

FULL_TRIALS = 100
FULL_PAUSES = 20
QUICK_TRIALS = 2
QUICK_PAUSES = 2
SEED = 34

# four accounts on three test users: "d" is the same mailbox as "a" (the same mail
# in two accounts of one shard)
ACCOUNTS = {"a": "gmail", "b": "fastmail", "c": "plain", "d": "gmail"}
NEW_PER_TRIAL = 60


def _task_argv(shard: Path, account: str, config: Path, run_id: str) -> list[str]:
    code = (
        "import sys, json; from pipeline.cluster.sync import sync_account_task;"
        " from pipeline.reports import SyncOptions;"
        " from stores.errors import StaleEpochError\n"
        "try:\n"
        f"    r = sync_account_task({str(shard)!r}, 'shard-000', {account!r}, {str(config)!r},"
        f" SyncOptions(apply=True), {run_id!r})\n"
        "    print(json.dumps({'error': r.report.error, 'lines': r.lines}))\n"
        "    sys.exit(3 if r.report.error and 'is stale' in r.report.error else 0)\n"
        "except StaleEpochError as exc:\n"
        "    print(json.dumps({'stale': str(exc)})); sys.exit(3)\n"
    )
    return [sys.executable, "-c", code]


def _spawn(argv: list[str], out: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with open(out, "wb") as fh:
        return subprocess.Popen(
            argv, stdout=fh, stderr=subprocess.STDOUT, cwd=REPO, env=env, start_new_session=True
        )


def _mail(account: str, i: int) -> bytes:
    return (
        f"From: s{i}@{account}.example\r\nTo: {account}@example.org\r\n"
        f"Subject: trial mail {i}\r\nMessage-ID: <{account}-{i}@fencing.example>\r\n\r\n"
        f"body {i}\r\n"
    ).encode()


def _signal(proc: subprocess.Popen[bytes], sig: int) -> None:
    """``sig`` to the task's process group (a task that ended meanwhile: nothing)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)


def _last_seq(shard: Path) -> int:
    from stores.log.files import LogDirectory

    files = LogDirectory(shard / "log").files(fresh=True)
    return files[-1].last if files else 0


class _Campaign:
    def __init__(self, dv: Any, work: Path, seed: int, pause_within: float = 1.0) -> None:
        self.dv = dv
        self.pause_within = pause_within  # seconds after its epoch a task may be paused
        self.work = work
        self.rng = random.Random(seed)
        self.shard = work / "shard"
        self.config = work / "config.toml"
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("MAILLEDGER_")},
            **dv.password_env(),
            "HOME": str(work),
            "PYTHONPATH": str(REPO),
        }
        self.serial = 0
        self.sent: set[str] = set()  # the Message-IDs put on the server
        self.refusals = 0
        self.faults = 0
        self.pauses = 0

    def setup(self) -> None:
        for user in set(ACCOUNTS.values()):
            self.dv.reset_user(user)
        self.config.write_text(
            "".join(self.dv.account_toml(user, name=a) for a, user in ACCOUNTS.items())
        )
        from pipeline.store import MessageStore

        MessageStore.open(self.shard, create=True).close()

    def new_mail(self, more: str | None = None) -> None:
        """New mail on every mailbox; twenty times as much on ``more``'s (a task with
        several batches to commit: with ten times, 600 messages, the batch after
        the first 500 was committed before the pause could land once commits
        stopped making the small-file merge in the commit)."""
        for user in sorted(set(ACCOUNTS.values())):
            uids = self.dv.user(user).uids("INBOX")  # (all synced by the last converge)
            if uids and self.rng.random() < 0.3:  # an expunge: the archive keeps the message
                self.dv.user(user).expunge("INBOX", self.rng.choice(uids))
            start = self.serial
            self.serial += NEW_PER_TRIAL * (20 if user == more else 1)
            self.dv.user(user).bulk_maildir(
                "INBOX", [_mail(user, i) for i in range(start, self.serial)]
            )
            self.sent.update(f"{user}-{i}@fencing.example" for i in range(start, self.serial))

    def _run(self, account: str, tag: str) -> subprocess.Popen[bytes]:
        out = self.work / f"{tag}-{account}.out"
        return _spawn(_task_argv(self.shard, account, self.config, tag), out, self.env)

    def _finish(self, proc: subprocess.Popen[bytes], timeout: float = 300) -> int:
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _signal(proc, signal.SIGKILL)
            return proc.wait()

    def _epoch_taken(self, account: str, tag: str, proc: subprocess.Popen[bytes]) -> None:
        """Wait until the task of ``tag`` holds ``account``'s epoch (or has ended)."""
        from stores.fence import Fence

        fence = Fence(self.shard / "fence")
        while proc.poll() is None and f"sync {tag} of {account}" not in (
            fence.current(account).holder
        ):
            time.sleep(0.01)

    def trial(self, n: int, pause: bool) -> None:
        victim = self.rng.choice(sorted(ACCOUNTS))
        self.new_mail(ACCOUNTS[victim] if pause else None)
        tag = f"t{n}"
        procs = {a: self._run(a, tag) for a in ACCOUNTS}
        hit = procs[victim]
        if pause:  # paused while it holds its epoch
            start = _last_seq(self.shard)
            self._epoch_taken(victim, tag, hit)
            if self.pauses % 2 == 0:
                # after its first batch of 500 is durable, with more to commit (the
                # others add at most 3 x 60 and their cursors meanwhile)
                while hit.poll() is None and _last_seq(self.shard) < start + 500:
                    time.sleep(0.005)
            else:  # anywhere in its first second: planning, fetching, committing
                time.sleep(self.rng.uniform(0.0, self.pause_within))
            self.pauses += 1
        else:  # killed anywhere: starting, fetching, committing
            time.sleep(self.rng.uniform(0.2, 2.5))
        if hit.poll() is None:
            self.faults += 1
        if pause:
            _signal(hit, signal.SIGSTOP)
            second = self._run(victim, f"{tag}-again")  # the lease expired: a new attempt
            self._finish(second)
            _signal(hit, signal.SIGCONT)
            if self._finish(hit) == 3:
                self.refusals += 1
        else:
            _signal(hit, signal.SIGKILL)
            hit.wait()
            self._finish(self._run(victim, f"{tag}-retry"))  # Dask's retry
        for a, proc in procs.items():
            if a != victim:
                self._finish(proc)

    def converge(self) -> None:
        """Every account once more, one at a time: whatever a trial left undone."""
        for a in ACCOUNTS:
            self._finish(self._run(a, f"converge-{self.serial}"))

    def check(self, result: Result, when: str) -> None:
        from pipeline.store import MessageStore

        with MessageStore.open(self.shard, create=False) as store:
            problems = store.verify(blobs=False)
            for p in problems:
                result.fail(f"{when}: verify: {p}")
            seen = store.query(
                "SELECT source, folder, uidvalidity, uid, message_id FROM events"
                " WHERE type = 'message-seen'"
            ).to_pylist()
            doubled = [k for k, c in Counter(
                (r["source"], r["folder"], r["uidvalidity"], r["uid"]) for r in seen
            ).items() if c > 1]  # fmt: skip
            if doubled:
                result.fail(f"{when}: {len(doubled)} locations seen twice, e.g. {doubled[0]}")
            seqs = store.query("SELECT min(seq) AS lo, max(seq) AS hi, count(*) AS n FROM events")
            row = seqs.to_pylist()[0]
            if row["n"] and (row["lo"] != 1 or row["hi"] != row["n"]):
                result.fail(f"{when}: seq gap: {row}")
            held = set(store.message_ids())
            located = {(r["source"], r["uid"]) for r in seen}
            for account, user in ACCOUNTS.items():
                on_server = self.dv.user(user).uids("INBOX")
                missing = [u for u in on_server if (account, u) not in located]
                if missing:
                    result.fail(f"{when}: {account}: {len(missing)} UIDs lost, e.g. {missing[0]}")
                cursor = store.cursor(account, "INBOX") or {}
                top = max(on_server, default=None)
                if top is not None and (cursor.get("last_uid") or 0) < top:
                    result.fail(f"{when}: {account}: cursor {cursor.get('last_uid')} < {top}")
            lost_ids = sorted(self.sent - held)
            if lost_ids:
                result.fail(f"{when}: {len(lost_ids)} Message-IDs lost, e.g. {lost_ids[0]}")
            result.figures["events"] = row["n"]
            result.figures["messages"] = len(held)


def main(
    trials: int = FULL_TRIALS,
    seed: int = SEED,
    pauses: int | None = None,
    workdir: Path | None = None,
    pause_within: float = 1.0,
) -> Result:
    result = Result("fencing")
    t0 = time.monotonic()
    pauses = FULL_PAUSES if pauses is None and trials >= FULL_TRIALS else pauses
    pauses = pauses if pauses is not None else max(1, trials // 2)
    with dovecot_server() as dv:
        if dv is None:
            result.skipped.append("dovecot not installed")
            return result
        with tempfile.TemporaryDirectory(prefix="fencing-", dir=workdir) as tmp:
            camp = _Campaign(dv, Path(tmp), seed, pause_within)
            camp.setup()
            plan = [False] * trials + [True] * pauses
            camp.rng.shuffle(plan)
            for n, pause in enumerate(plan):
                camp.trial(n, pause)
                camp.converge()
                camp.check(result, f"trial {n} ({'pause' if pause else 'kill'})")
                result.trials += 1
            result.faults = camp.faults
            result.figures["kills"] = trials
            result.figures["pauses"] = pauses
            result.figures["stale_epoch_refusals"] = camp.refusals
            if pauses and not camp.refusals:
                result.fail("no stale-epoch refusal in any pause trial")
    result.seconds = time.monotonic() - t0
    print(
        f"fencing: {result.trials} trials ({trials} kills, {pauses} pauses), faults mid-run"
        f" {result.faults}, stale-epoch refusals {camp.refusals},"
        f" events {result.figures.get('events')}, messages {result.figures.get('messages')},"
        f" failures {len(result.failures)}, {result.seconds:.0f} s",
        flush=True,
    )
    return result


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=FULL_TRIALS, help="kill trials")
    ap.add_argument("--pauses", type=int, default=None, help="pause trials (default 20)")
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    res = main(trials=args.trials, seed=args.seed, pauses=args.pauses)
    print(res.summary())
    if args.json:
        print(json.dumps(res.as_dict(), default=str))
    sys.exit(0 if res.ok else 1)

"""The simulation of issue 34's gate 3 (``make scale-sim``): many mailboxes on a
slow link, synced by a cluster of shards on Dask.

- **Mail**: ``--accounts`` Dovecot users on loopback (200 by default), each with
  ``--messages`` messages; some messages are delivered to several accounts
  (cross-account duplicates, a mailing list's way) and some answer a message of
  another account (threads across accounts and shards). The generator keeps a
  manifest: every Message-ID each account was shown.
- **Link**: every account reaches the server through a proxy that adds
  ``--delay-ms`` (30) to every server response (``testkit.delayproxy``; not ``tc``
  on loopback, which would slow Dask too).
- **Throughput**: the first sync of every account into a new cluster of
  ``--shards`` (8), with 1 worker of 1 thread and with ``--workers`` (4), each
  ``--runs`` (3) times; the ratio of the medians, and the CPU and the waiting of
  each account's task, so that a miss is explained.
- **Chaos, then the answers**: on the last cluster, new mail, expunges and one
  UIDVALIDITY reset; then two ``sync`` runs started at the same moment, one of
  whose Dask workers is killed mid-run; then a last sync. The shards must hold
  every Message-ID of the manifest (0 lost), one ``message-seen`` per location (0
  doubled), their logs whole, and together the same messages, per account the
  same locations, as one store that synced the same accounts.

``python -m bench.scale_sim [--accounts N] [--shards S] [--messages M] ...``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def _raw(mid: str, subject: str, *, refs: str | None = None, to: str = "list") -> bytes:
    head = (
        f"From: someone <{mid.split('@')[0]}@senders.example>\r\nTo: {to}@example.org\r\n"
        f"Subject: {subject}\r\nDate: Mon, 01 Jun 2026 10:00:00 +0000\r\n"
        f"Message-ID: <{mid}>\r\n"
    )
    if refs:
        head += f"In-Reply-To: <{refs}>\r\nReferences: <{refs}>\r\n"
    return (head + "\r\n" + "simulated mail body line\r\n" * 20).encode()


class Mail:
    """The generator and its manifest."""

    def __init__(self, accounts: list[str], seed: int) -> None:
        self.accounts = accounts
        self.rng = random.Random(seed)
        self.shown: dict[str, set[str]] = {a: set() for a in accounts}
        self.serial = 0

    def batch(self, per_account: int) -> dict[str, list[bytes]]:
        """New mail for each account: its own, some also delivered to one or two
        other accounts, some replying to a message another account holds."""
        out: dict[str, list[bytes]] = {a: [] for a in self.accounts}
        for a in self.accounts:
            for _ in range(per_account):
                self.serial += 1
                mid = f"m{self.serial}@sim.example"
                refs = None
                others = [b for b in self.accounts if b != a and self.shown[b]]
                if others and self.rng.random() < 0.15:  # a reply across accounts
                    refs = self.rng.choice(sorted(self.shown[self.rng.choice(others)]))
                raw = _raw(mid, f"topic {self.serial % 97}", refs=refs, to=a)
                targets = [a]
                if self.rng.random() < 0.1:  # a list message: in two or three accounts
                    targets += self.rng.sample([b for b in self.accounts if b != a], 2)
                for t in targets:
                    out[t].append(raw)
                    self.shown[t].add(mid)
        return out


def _ml(env: dict[str, str], *argv: str, timeout: float = 3600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pipeline", *argv],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _cluster_sync(env: dict[str, str], root: Path, config: Path, workers: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    done = _ml(
        env,
        *("--cluster", str(root), "sync", "--config", str(config), "--apply", "--json"),
        *("--local-workers", str(workers)),
    )
    wall = time.perf_counter() - t0
    if done.returncode not in (0, 3):
        raise RuntimeError(f"cluster sync exited {done.returncode}: {done.stderr[-2000:]}")
    report = json.loads(done.stdout)
    return {"wall_s": wall, "report": report}


def _shard_facts(root: Path) -> dict[str, Any]:
    """Every shard's held Message-IDs, per-account locations and problems."""
    from pipeline.cluster import open_catalog
    from pipeline.store import MessageStore

    catalog = open_catalog(root)
    ids: set[str] = set()
    per_account: dict[str, set[tuple[Any, ...]]] = {}
    problems: list[str] = []
    for shard in catalog.shards:
        with MessageStore.open(catalog.shard_path(shard), create=False) as store:
            problems += [f"{shard}: {p}" for p in store.verify(blobs=False)]
            ids |= set(store.message_ids())
            seen = store.query(
                "SELECT source, folder, uidvalidity, uid FROM events WHERE type = 'message-seen'"
            ).to_pylist()
            doubled = [k for k, c in Counter(tuple(r.values()) for r in seen).items() if c > 1]
            if doubled:
                problems.append(f"{shard}: {len(doubled)} locations seen twice, e.g. {doubled[0]}")
            rows = store.query(
                "SELECT source, folder, uidvalidity, uid, message_id FROM locations"
            ).to_pylist()
            for r in rows:
                per_account.setdefault(r["source"], set()).add(
                    (r["folder"], r["uidvalidity"], r["uid"], r["message_id"])
                )
    return {"ids": ids, "locations": per_account, "problems": problems}


def _store_facts(root: Path) -> dict[str, Any]:
    from pipeline.store import MessageStore

    with MessageStore.open(root, create=False) as store:
        rows = store.query(
            "SELECT source, folder, uidvalidity, uid, message_id FROM locations"
        ).to_pylist()
        per_account: dict[str, set[tuple[Any, ...]]] = {}
        for r in rows:
            per_account.setdefault(r["source"], set()).add(
                (r["folder"], r["uidvalidity"], r["uid"], r["message_id"])
            )
        return {"ids": set(store.message_ids()), "locations": per_account}


def _same_answers(
    env: dict[str, str], root: Path, single: Path, accounts: list[str], seed: int
) -> dict[str, Any]:
    """The cluster's answers against the one store's (gate 3): the message count,
    20 searches (count and first page of 50, newest first) and 20 thread trees;
    after ``cluster snapshot`` (the cluster is read through its snapshots)."""
    from datetime import UTC

    from pipeline.cluster.reads import open_reads
    from pipeline.store import MessageStore
    from projections.queries import compile_query
    from projections.search import parse

    _ml(env, "cluster", "snapshot", str(root))
    rng = random.Random(seed)
    differ: list[str] = []
    with open_reads(root) as many, MessageStore.open(single, create=False) as one, one.session():
        now = one.clock.now()
        ids = sorted(one.message_ids())
        queries = ["*", "topic", "subject:topic", "from:senders.example", "body:simulated"]
        queries += [f'subject:"topic {n}"' for n in rng.sample(range(97), 8)]
        queries += [f"to:{a}@example.org" for a in rng.sample(accounts, min(7, len(accounts)))]
        for q in queries[:20]:
            plan = compile_query(parse(q, now=now, tz=UTC))
            for output, limit in (("count", None), ("summary", 50)):
                a = one.search(plan, output, limit=limit).to_pylist()  # type: ignore[arg-type]
                b = many.search(plan, output, limit=limit).to_pylist()  # type: ignore[arg-type]
                if a != b:
                    differ.append(f"search {q!r} {output}")
        picked = rng.sample(ids, min(20, len(ids)))
        for mid in picked:
            if one.thread_tree(mid) != many.thread_tree(mid):
                differ.append(f"thread {mid}")
        # (the cluster's `messages` sums the shards' own counts: a message two
        # accounts on two shards hold counts twice; `distinct_messages` is one store's)
        counts = (one.stats()["messages"], many.stats()["distinct_messages"])
        if counts[0] != counts[1]:
            differ.append(f"messages {counts}")
    return {
        "searches": len(queries[:20]),
        "threads": len(picked),
        "messages": counts,
        "differ": differ,
    }


def _dask_workers(pid: int) -> list[int]:
    """The Dask worker processes of the command ``pid``: its nannies (in its own
    process) spawn them."""
    import psutil

    with contextlib.suppress(psutil.Error):
        return [
            c.pid
            for c in psutil.Process(pid).children(recursive=True)
            if "spawn_main" in " ".join(c.cmdline())
        ]
    return []


def run(args: argparse.Namespace) -> dict[str, Any]:
    from testkit.delayproxy import DelayProxy
    from testkit.dovecot import Dovecot

    names = [f"sim{i:03d}" for i in range(args.accounts)]
    dv = Dovecot(rawlog=False, extra_users={n: f"pw-{n}" for n in names})
    dv.start()
    work = Path(tempfile.mkdtemp(prefix="scale-sim-", dir=args.data))
    out: dict[str, Any] = {"accounts": args.accounts, "shards": args.shards}
    try:
        mail = Mail(names, args.seed)
        for account, raws in mail.batch(args.messages).items():
            dv.user(account).bulk_maildir("INBOX", raws)
        with DelayProxy(("127.0.0.1", dv.imap_port), args.delay_ms / 1000) as proxy:
            config = work / "config.toml"
            config.write_text(
                "".join(dv.account_toml(n, port=proxy.port, timeout=120) for n in names)
            )
            env = {**os.environ, **dv.password_env(), "HOME": str(work)}
            env.pop("MAILLEDGER_STORE", None)

            # -- throughput: 1 worker x 1 thread against N workers, alternating ----------
            runs: dict[int, list[dict[str, Any]]] = {1: [], args.workers: []}
            for r in range(args.runs):
                for workers in (1, args.workers):
                    root = work / f"cluster-{workers}-{r}"
                    _ml(env, "cluster", "init", str(root), "--shards", str(args.shards))
                    got = _cluster_sync(env, root, config, workers)
                    runs[workers].append(got)
                    print(
                        f"first sync, {workers} workers, run {r + 1}: {got['wall_s']:.1f} s",
                        flush=True,
                    )
                    if r < args.runs - 1 or workers != args.workers:
                        shutil.rmtree(root)
            walls = {w: [g["wall_s"] for g in gs] for w, gs in runs.items()}
            one, many = statistics.median(walls[1]), statistics.median(walls[args.workers])
            pairs = [a / b for a, b in zip(walls[1], walls[args.workers], strict=True)]
            tasks = runs[args.workers][-1]["report"].get("tasks", {})
            cpu = [t["cpu_s"] for t in tasks.values()]
            wall = [t["wall_s"] for t in tasks.values()]
            out["throughput"] = {
                "messages": sum(len(s) for s in mail.shown.values()),
                "one_worker_s": walls[1],
                "workers_s": walls[args.workers],
                "speedup_median": round(one / many, 2),
                "speedup_min_pair": round(min(pairs), 2),
                "task_cpu_s_median": round(statistics.median(cpu), 3) if cpu else None,
                "task_wall_s_median": round(statistics.median(wall), 3) if wall else None,
                "task_waiting_share": round(1 - sum(cpu) / sum(wall), 2) if wall else None,
            }

            # -- chaos on the last cluster, then the answers ------------------------------
            root = work / f"cluster-{args.workers}-{args.runs - 1}"
            single = work / "single"  # one store, synced at the same points as the cluster
            alone = _ml(env, "--store", str(single), "sync", "--config", str(config), "--apply")
            rng = random.Random(args.seed + 1)
            for account in rng.sample(names, max(1, len(names) // 10)):  # expunges of
                uids = dv.user(account).uids("INBOX")  # messages both have synced
                if uids:
                    dv.user(account).expunge("INBOX", rng.choice(uids))
            for account, raws in mail.batch(max(1, args.messages // 3)).items():
                dv.user(account).bulk_maildir("INBOX", raws)
            reset = rng.choice(names)
            dv.user(reset).set_uidvalidity("INBOX", 777_000 + args.seed)  # one reset
            argv = [
                *(sys.executable, "-m", "pipeline", "--cluster", str(root), "sync"),
                *("--config", str(config), "--apply", "--local-workers", str(args.workers)),
            ]
            logs = [open(work / f"concurrent-{i}.log", "wb") for i in (1, 2)]  # noqa: SIM115
            first, second = (
                subprocess.Popen(argv, env=env, cwd=REPO, stdout=fh, stderr=subprocess.STDOUT)
                for fh in logs
            )
            killed = 0
            deadline = time.monotonic() + 120
            while first.poll() is None and time.monotonic() < deadline and not killed:
                time.sleep(rng.uniform(1.0, 3.0))
                workers = _dask_workers(first.pid)
                if workers:
                    os.kill(rng.choice(workers), signal.SIGKILL)
                    killed += 1
            codes = [first.wait(timeout=3600), second.wait(timeout=3600)]
            for fh in logs:
                fh.close()
            last = _cluster_sync(env, root, config, args.workers)
            facts = _shard_facts(root)
            alone = _ml(env, "--store", str(single), "sync", "--config", str(config), "--apply")
            plain = _store_facts(single)
            shown = set().union(*mail.shown.values())
            out["chaos"] = {
                "worker_killed": killed,
                "concurrent_exit_codes": codes,
                "last_exit_code": last["report"]["exit_code"],
                "single_store_exit_code": alone.returncode,
                "uidvalidity_reset": reset,
                "lost": [
                    (m, sorted(a for a, ids in mail.shown.items() if m in ids))
                    for m in sorted(shown - facts["ids"])[:5]
                ],
                "lost_count": len(shown - facts["ids"]),
                "problems": facts["problems"][:5],
                "same_messages_as_one_store": facts["ids"] == plain["ids"],
                "same_locations_as_one_store": facts["locations"] == plain["locations"],
            }
            out["answers"] = _same_answers(env, root, single, names, args.seed)
    finally:
        dv.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--accounts", type=int, default=200)
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--messages", type=int, default=20, help="per account, first sync")
    ap.add_argument("--delay-ms", type=float, default=30.0)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seed", type=int, default=34)
    ap.add_argument("--data", default=None, help="where the clusters go (default: /tmp)")
    ap.add_argument("--keep", action="store_true", help="keep the clusters")
    args = ap.parse_args(argv)
    out = run(args)
    t, c = out["throughput"], out["chaos"]
    ok_speed = t["speedup_median"] >= 2.5 and t["speedup_min_pair"] >= 2.2
    ans = out["answers"]
    ok_chaos = (
        not c["lost_count"]
        and not c["problems"]
        and c["same_messages_as_one_store"]
        and c["same_locations_as_one_store"]
        and not ans["differ"]
    )
    print(
        f"\n{out['accounts']} accounts, {out['shards']} shards, {t['messages']} messages shown,"
        f" {args.delay_ms:.0f} ms a response\n"
        f"first sync: 1 worker {statistics.median(t['one_worker_s']):.1f} s,"
        f" {args.workers} workers {statistics.median(t['workers_s']):.1f} s:"
        f" speedup {t['speedup_median']}x (lowest pair {t['speedup_min_pair']}x)"
        f" -- gate >= 2.5x, none below 2.2x: {'ok' if ok_speed else 'MISSED'}\n"
        f"per task: CPU {t['task_cpu_s_median']} s of {t['task_wall_s_median']} s"
        f" (waiting {t['task_waiting_share']})\n"
        f"chaos: worker killed {c['worker_killed']}, two syncs at once exited"
        f" {c['concurrent_exit_codes']}, last {c['last_exit_code']}; lost {c['lost_count']},"
        f" problems {len(c['problems'])}, same messages as one store"
        f" {c['same_messages_as_one_store']}, same locations"
        f" {c['same_locations_as_one_store']}; answers: {ans['messages'][1]} messages"
        f" ({ans['messages'][0]} in one store), {ans['searches']} searches and"
        f" {ans['threads']} thread trees, {len(ans['differ'])} differ {ans['differ'][:3]}"
        f" -- {'ok' if ok_chaos else 'FAILED'}"
    )
    print(json.dumps(out, default=str))
    return 0 if ok_chaos else 1


if __name__ == "__main__":
    sys.exit(main())

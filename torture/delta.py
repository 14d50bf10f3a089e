"""Delta publish campaign (issue 34, gate 5): lost responses never double a row.

A cluster of three shards whose logs grow between trials (generated events,
files of uneven sizes). Each trial:

1. ``mailledger publish delta DEST --cluster DIR`` in its own process group with
   a random ``--chunk-rows``, killed with SIGKILL after a random delay: a real
   lost response (the commit in flight may or may not have landed, and the
   publisher never learns which);
2. more events, then a publish in this process whose writer loses the answer of
   one commit: the commit lands and the caller sees an error (a fault a kill
   cannot make, since the kill also ends the caller: the one fake here);
3. checked: no (shard, seq) twice in the table; each shard's rows are exactly its
   events up to the table's transaction version for it.

At the end a publish runs to completion and the table must equal the logs, row
for row and column for column; and table versions recorded along the way, read
back (``DeltaTable(DEST, version=N)``), must give each shard's events as of then.
"""

from __future__ import annotations

import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from torture import Result, cli_main, kill_group, spawn_cli

__all__ = ["FULL_TRIALS", "QUICK_TRIALS", "SEED", "main"]

FULL_TRIALS = 100
QUICK_TRIALS = 10
SEED = 34
_KILL_AFTER_S = (0.4, 2.0)  # (a run's start, imports included, is about 0.5-1 s)


class Broken(AssertionError):
    pass


def _version_of(dest: Path) -> int:
    """The table's version (-1: no table yet)."""
    from deltalake import DeltaTable

    return DeltaTable(str(dest)).version() if DeltaTable.is_deltatable(str(dest)) else -1


def _check(dest: Path, shards: list[tuple[str, Path]], version: int | None = None) -> None:
    """The table (at ``version``) holds each shard's events up to its transaction
    version, each once, equal to the log's."""
    from deltalake import DeltaTable

    from testkit.delta import log_rows, published_rows

    table = DeltaTable(str(dest), version=version)
    rows = published_rows(dest, version)
    for shard, store in shards:
        upto = table.transaction_version(f"mailledger:{shard}") or 0
        have = rows.get(shard)
        count = 0 if have is None else have.num_rows
        if count and len(set(have.column("seq").to_pylist())) != count:  # type: ignore[union-attr]
            raise Broken(f"version {version}: {shard}: duplicate seqs")
        if count != upto:
            raise Broken(f"version {version}: {shard}: {count} rows, its txn version {upto}")
        if have is not None and not have.equals(log_rows(store, upto)):
            raise Broken(f"version {version}: {shard}: rows differ from the log's events")


def _lose_one_answer(nth: int, lost: list[int]) -> Any:
    """A writer that commits, and for its ``nth`` commit then raises as if the
    answer had been lost on the way back (which commit that is varies: the shards
    that grew and the chunk size are drawn)."""
    from pipeline.cluster import publish

    calls = [0]

    def write(uri: str, rows: Any, app: str, version: int) -> None:
        publish.write_chunk(uri, rows, app, version)
        calls[0] += 1
        if calls[0] == nth:
            lost.append(version)
            raise OSError("connection reset by peer (after the commit landed)")

    return write


def _grow(rng: random.Random, shards: list[tuple[str, Path]], trial: int, step: str) -> int:
    from testkit.eventlogs import append_events

    added = 0
    for shard, path in rng.sample(shards, rng.randrange(1, len(shards) + 1)):
        n = rng.randrange(20, 400)
        append_events(path, n, batch=rng.choice([7, 60, 250]), tag=f"{shard}.{trial}{step}")
        added += n
    return added


def _trial(
    rng: random.Random, root: Path, shards: list[tuple[str, Path]], n: int
) -> dict[str, Any]:
    from pipeline.cluster.publish import publish_delta

    dest, cluster = root / "table", root / "cluster"
    got: dict[str, Any] = {"events": _grow(rng, shards, n, "a")}
    version0 = _version_of(dest)
    argv = [
        *(sys.executable, "-m", "pipeline", "publish", "delta", str(dest)),
        *("--cluster", str(cluster), "--chunk-rows", str(rng.choice([5, 13, 40]))),
    ]
    proc = spawn_cli(argv, root / f"publish-{n}.out")
    deadline = time.monotonic() + rng.uniform(*_KILL_AFTER_S)
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    got["killed"] = proc.poll() is None
    kill_group(proc)
    if not got["killed"] and proc.returncode != 0:
        out = (root / f"publish-{n}.out").read_text(errors="replace")
        raise Broken(f"publish exited {proc.returncode} unkilled: {out[-500:]}")
    version1 = _version_of(dest)
    got["killed_mid_publish"] = got["killed"] and version1 > version0  # (it had committed)
    got["commits_before_end"] = max(0, version1 - version0)
    _check(dest, shards)
    # a lost answer: the commit lands, the caller sees an error, and retries
    got["events"] += _grow(rng, shards, n, "b")
    lost: list[int] = []
    publish_delta(
        shards,
        dest,
        chunk_rows=rng.choice([25, 100, 400]),
        writer=_lose_one_answer(1, lost),
    )
    got["lost_answers"] = len(lost)
    _check(dest, shards)
    return got


def main(trials: int = FULL_TRIALS, seed: int = SEED, workdir: Path | None = None) -> Result:
    """Run ``trials`` kill + lost-answer trials on one growing table; print the figures."""
    from deltalake import DeltaTable

    from pipeline.cluster import init_cluster
    from pipeline.cluster.publish import publish_delta
    from testkit.delta import duplicates, problems

    result = Result("delta")
    t0 = time.monotonic()
    rng = random.Random(seed)
    totals = {"events": 0, "killed": 0, "killed_mid_publish": 0, "lost_answers": 0}
    history: list[int] = []
    with tempfile.TemporaryDirectory(prefix="mailledger-delta-", dir=workdir) as tmp:
        root = Path(tmp)
        catalog, _ = init_cluster(root / "cluster", 3, [])
        shards = [(s, catalog.shard_path(s)) for s in catalog.shards]
        dest = root / "table"
        for n in range(trials):
            result.trials += 1
            try:
                got = _trial(random.Random(rng.randrange(1 << 30)), root, shards, n)
            except Exception as exc:
                result.fail(f"trial {n}: {type(exc).__name__}: {exc}")
                continue
            for k in totals:
                totals[k] += int(got[k])
            result.faults += int(got["killed"]) + got["lost_answers"]
            history.append(DeltaTable(str(dest)).version())
            print(f"delta trial {n:3}: {got}", flush=True)
        final = None
        try:
            final = publish_delta(shards, dest)
            for version in rng.sample(history, min(10, len(history))):
                _check(dest, shards, version=version)  # (before a vacuum removes their files)
            committed = {Path(u).name for u in DeltaTable(str(dest)).file_uris()}
            orphans = [p for p in dest.glob("shard=*/*.parquet") if p.name not in committed]
            result.figures["uncommitted_files_left_by_kills"] = len(orphans)
            publish_delta(shards, dest, optimize=True, retention_hours=0)
            dup = duplicates(dest)
            found = problems(dest, shards)
            if dup or found:
                result.fail(f"after the last publish: {dup} duplicates; {found}")
        except Exception as exc:
            result.fail(f"final: {type(exc).__name__}: {exc}")
    result.figures = {
        **result.figures,
        **totals,
        "table_version": final.version if final else None,
        "duplicates": dup if final else None,
        "versions_read_back": min(10, len(history)),
    }
    print(
        f"delta trials={result.trials} events={totals['events']} kills={totals['killed']}"
        f" (after a commit of theirs: {totals['killed_mid_publish']})"
        f" lost-answers={totals['lost_answers']} duplicates={result.figures['duplicates']}"
        f" failures={len(result.failures)}",
        flush=True,
    )
    result.seconds = time.monotonic() - t0
    return result


if __name__ == "__main__":
    cli_main(main, FULL_TRIALS, SEED)

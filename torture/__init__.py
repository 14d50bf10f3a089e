"""Reliability campaigns: repeatable fault injection against real stores.

``python -m torture`` (``make torture``) runs every campaign module of this
package; ``python -m torture --quick`` runs the small slice that ``make test``
also runs through ``tests/reliability/``. See RELIABILITY.md.

The contract a campaign module follows (``torture/<name>.py``):

- ``main(trials: int = FULL_TRIALS, seed: int = SEED) -> Result``: run the
  campaign, print its figures, return them. Never raises for a failed trial:
  failures are counted and described in ``Result.failures``.
- ``FULL_TRIALS`` / ``QUICK_TRIALS``: the trials of the full campaign and of
  the quick slice; ``SEED``: the default seed (a run is repeatable from it).
- ``python -m torture.<name> [--trials N] [--seed S]`` runs it alone.

Everything here uses real parts: the ``mailledger`` command in its own
process group, real Parquet and DuckDB files, a real Dovecot on loopback
(``testkit/dovecot.py``), a real tmpfs for a full disk.
"""

from __future__ import annotations

import argparse
import contextlib
import email
import email.policy
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "REPO",
    "Result",
    "cli_argv",
    "cli_main",
    "dovecot_server",
    "group_pids",
    "kill_group",
    "maildir_raws",
    "run_cli",
    "search_store",
    "source_ids",
    "spawn_cli",
    "stdlib_id_count",
]

REPO = Path(__file__).resolve().parents[1]


@dataclass
class Result:
    """What a campaign did and found. ``failures`` must be empty."""

    name: str
    trials: int = 0
    faults: int = 0
    """Faults that landed where they hurt (e.g. kills mid-operation)."""
    failures: list[str] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.failures

    def fail(self, what: str) -> None:
        self.failures.append(what)
        print(f"FAIL {self.name}: {what}", file=sys.stderr, flush=True)

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "ok": self.ok}

    def summary(self) -> str:
        skipped = f" skipped={len(self.skipped)}" if self.skipped else ""
        return (
            f"{self.name}: trials={self.trials} faults={self.faults}"
            f" failures={len(self.failures)}{skipped} seconds={self.seconds:.1f}"
            f" {'OK' if self.ok else 'FAILED'}"
        )


# -- running the command ----------------------------------------------------------


def cli_argv(store: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "pipeline", "--store", str(store), *args]


def _env(extra: Mapping[str, str] | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAILLEDGER_")}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra or {})
    return env


def spawn_cli(
    argv: Sequence[str],
    out: Path,
    env: Mapping[str, str] | None = None,
    preexec: Callable[[], None] | None = None,
) -> subprocess.Popen[bytes]:
    """Start a command in its own process group (so a kill reaches its workers too),
    its output to ``out`` (a file, never a pipe a surviving helper could hold)."""
    with open(out, "wb") as fh:
        return subprocess.Popen(
            list(argv),
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=REPO,
            env=_env(env),
            preexec_fn=preexec,
        )


def run_cli(
    argv: Sequence[str],
    out: Path,
    env: Mapping[str, str] | None = None,
    timeout: float = 300,
    preexec: Callable[[], None] | None = None,
) -> tuple[int, str]:
    """Run a command to its end; returns (exit code, its output)."""
    proc = spawn_cli(argv, out, env, preexec)
    try:
        code = proc.wait(timeout=timeout)
    finally:
        kill_group(proc)
    return code, out.read_text(errors="replace")


def group_pids(pgid: int) -> list[int]:
    """Live (not zombie) processes of process group ``pgid``."""
    pids = []
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat_file.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            pids.append(int(stat_file.parent.name))
    return pids


def kill_group(proc: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
    """``kill -9`` a command's whole process group and reap it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=30)
    deadline = time.monotonic() + 10
    while group_pids(proc.pid) and time.monotonic() < deadline:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        time.sleep(0.05)


# -- sources --------------------------------------------------------------------


def source_ids(raws: Iterable[bytes]) -> set[str]:
    """The Message-IDs mailledger must hold for these messages (its own parser
    decides the normalization and the synthetic ids; durability is what is tested)."""
    from pipeline.parse import parse_message

    return {parse_message(raw).message_id for raw in raws}


def stdlib_id_count(raws: Iterable[bytes]) -> int:
    """Distinct Message-IDs as the standard library reads them: a cross-check."""
    import hashlib

    ids = set()
    for raw in raws:
        msg = email.message_from_bytes(raw, policy=email.policy.compat32)
        mid = (msg.get("Message-ID") or "").strip().strip("<>").strip()
        ids.add(mid if mid else "sha256:" + hashlib.sha256(raw).hexdigest())
    return len(ids)


def maildir_raws(root: Path) -> list[bytes]:
    return [
        p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.parent.name in ("cur", "new")
    ]


# -- a real Dovecot ---------------------------------------------------------------


@contextlib.contextmanager
def dovecot_server() -> Iterator[Any]:
    """A private Dovecot on loopback (testkit/dovecot.py); None where it is not installed."""
    from testkit.dovecot import Dovecot, find_dovecot

    if find_dovecot() is None:
        yield None
        return
    server = Dovecot()
    server.start()
    try:
        yield server
    finally:
        server.stop()


# -- searching a store for bytes ----------------------------------------------------


def search_store(root: Path, needles: Mapping[str, bytes]) -> dict[str, list[str]]:
    """Where each needle occurs in the store directory ``root``; name -> places.

    Every file is searched as raw bytes; besides that, what compression hides is
    searched decoded: blobs decompressed, Parquet files decoded column by column,
    and every table of every DuckDB file dumped. A needle compression would hide
    is found all the same.
    """
    hits: dict[str, list[str]] = {name: [] for name in needles}

    def look(where: str, data: bytes) -> None:
        for name, needle in needles.items():
            if needle and needle in data:
                hits[name].append(where)

    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = str(path.relative_to(root))
        try:
            data = path.read_bytes()
        except OSError as exc:
            hits.setdefault("_unreadable", []).append(f"{rel}: {exc}")
            continue
        look(rel, data)
        for how, decoded in _decodings(path, data):
            look(f"{rel} ({how})", decoded)
    return hits


def _decodings(path: Path, data: bytes) -> Iterator[tuple[str, bytes]]:
    if data.startswith(b"MLB1"):
        from stores.blobs import decode_blob

        with contextlib.suppress(Exception):
            yield "blob decoded", decode_blob(path.name, data, path)
    if data.startswith(b"MLR1"):  # a pack: each of its blobs decoded
        from stores.blobs import decode_blob, pack_records

        for sha, at, n in pack_records(data):
            with contextlib.suppress(Exception):
                yield f"pack blob {sha[:12]} decoded", decode_blob(sha, data[at : at + n], path)
    if data[:4] == b"PAR1" and data[-4:] == b"PAR1":
        import pyarrow.parquet as pq

        with contextlib.suppress(Exception):
            table = pq.read_table(path)
            meta = table.schema.metadata or {}
            yield "parquet metadata", b"".join(k + b"=" + v for k, v in meta.items())
            for name in table.column_names:
                text = json.dumps(table.column(name).to_pylist(), default=str, ensure_ascii=False)
                yield f"parquet column {name}", text.encode()
    if path.suffix in (".duckdb", ".rebuild") or data[8:12] == b"DUCK":
        yield from _duckdb_dump(path)
    if data.startswith(b"SQLite format 3\x00"):
        yield from _sqlite_dump(path)


def _sqlite_dump(path: Path) -> Iterator[tuple[str, bytes]]:
    """Every table of an SQLite file (the full-text index), and every term of each
    FTS5 table (its term dictionary is prefix-compressed: a word is whole only here).
    Opened immutable: the file as it lies, nothing written beside it."""
    import apsw

    try:
        con = apsw.Connection(
            f"file:{path}?immutable=1", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
        )
    except apsw.Error:
        return
    try:
        tables = list(con.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'"))
        for name, sql in tables:
            if "fts5(" in (sql or "").lower():
                con.execute(
                    f'CREATE VIRTUAL TABLE temp."{name}_terms" USING fts5vocab(main, "{name}", row)'
                )
                terms = [str(t) for (t,) in con.execute(f'SELECT term FROM temp."{name}_terms"')]
                yield f"sqlite fts5 terms of {name}", "\n".join(terms).encode()
                continue
            with contextlib.suppress(apsw.Error):  # (a virtual table's shadow: raw bytes)
                rows = list(con.execute(f'SELECT * FROM "{name}"'))
                yield (
                    f"sqlite table {name}",
                    json.dumps(rows, default=repr, ensure_ascii=False).encode(),
                )
    except apsw.Error as exc:
        yield "sqlite unreadable", str(exc).encode()
    finally:
        con.close()


def _duckdb_dump(path: Path) -> Iterator[tuple[str, bytes]]:
    import duckdb

    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.Error:
        return
    try:
        tables = con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_type = 'BASE TABLE'"
        ).fetchall()
        for (name,) in tables:
            rows = con.execute(f'SELECT * FROM "{name}"').fetchall()
            yield f"duckdb table {name}", json.dumps(rows, default=str, ensure_ascii=False).encode()
    finally:
        con.close()


# -- a module's command line ---------------------------------------------------------


def cli_main(main: Callable[..., Result], full: int, seed: int) -> None:
    """``python -m torture.<name> [--trials N] [--seed S]``: exit 0 only without failures."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=full)
    ap.add_argument("--seed", type=int, default=seed)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    result = main(trials=args.trials, seed=args.seed)
    print(result.summary())
    if args.json:
        print(json.dumps(result.as_dict(), default=str))
    sys.exit(0 if result.ok else 1)

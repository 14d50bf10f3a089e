"""Creating a store: atomic, and safe when several processes create it at once."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from pathlib import Path

import pytest

from pipeline.sources.maildir import import_maildir
from pipeline.store import MessageStore
from stores.errors import UsageError

_PROCESSES = 5
_ROUNDS = 10
_PER_MAILDIR = 3

# The command line exactly as ``python -m pipeline`` runs it (``sys.exit(main())``),
# held at a gate once its modules are loaded: starting Python and importing DuckDB
# takes far longer than creating a store, so processes merely started "at once"
# would mostly take turns. Each says it is ready, then waits for the common start.
_GATED_CLI = (
    "import os, sys\n"
    "from pipeline.cli import main\n"
    "os.write(int(os.environ['READY_FD']), b'r')\n"
    "os.read(int(os.environ['GATE_FD']), 1)\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def _maildir(root: Path, tag: str) -> set[str]:
    """A small Maildir of distinct messages; returns their Message-IDs."""
    for sub in ("cur", "new", "tmp"):
        (root / sub).mkdir(parents=True)
    ids = set()
    for n in range(_PER_MAILDIR):
        mid = f"{tag}.{n}@create.example"
        raw = (
            f"From: a@example.org\nTo: b@example.org\nSubject: {tag} {n}\n"
            f"Date: Wed, 26 Jun 2024 10:00:0{n} +0000\nMessage-ID: <{mid}>\n\nbody {tag} {n}\n"
        )
        (root / "new" / f"{n}.M{n}P1.{tag}").write_text(raw)
        ids.add(mid)
    return ids


def _run_at_once(commands: list[list[str]]) -> list[tuple[int, str]]:
    """Run the command lines together, released at one instant; (exit code, stderr) each."""
    ready_r, ready_w = os.pipe()
    gate_r, gate_w = os.pipe()
    env = {**os.environ, "READY_FD": str(ready_w), "GATE_FD": str(gate_r)}
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for argv in commands:
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-c", _GATED_CLI, *argv],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    env=env,
                    pass_fds=(ready_w, gate_r),
                )
            )
        os.close(ready_w)
        ready_w = -1
        got = b""
        while len(got) < len(procs):
            chunk = os.read(ready_r, len(procs))
            assert chunk, "a process died before it was ready"
            got += chunk
        os.write(gate_w, b"g" * len(procs))
        return [(p.wait(timeout=300), p.communicate()[1].decode()) for p in procs]
    finally:
        for fd in (ready_r, ready_w, gate_r, gate_w):
            if fd >= 0:
                os.close(fd)
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


@pytest.mark.slow
def test_concurrent_imports_into_a_new_store_all_succeed(tmp_path: Path) -> None:
    for rnd in range(_ROUNDS):
        store_dir = tmp_path / f"store{rnd}" / "nested"  # its parent does not exist either
        expected: set[str] = set()
        commands = []
        for p in range(_PROCESSES):
            src = tmp_path / f"r{rnd}p{p}"
            expected |= _maildir(src, f"r{rnd}p{p}")
            commands.append(
                ["--store", str(store_dir), "import", "maildir", str(src), "--workers", "0"]
            )
        outcomes = _run_at_once(commands)
        assert [rc for rc, _ in outcomes] == [0] * _PROCESSES, f"round {rnd}: {outcomes}"

        with MessageStore.open(store_dir, create=False) as store:
            assert set(store.message_ids()) == expected
            assert all(store.find("message-id", mid) == [mid] for mid in expected)
            assert store.stats()["messages"] == len(expected)
            assert store.verify() == []
        markers = sorted(p.name for p in store_dir.iterdir() if p.name.startswith("store.json"))
        assert markers == ["store.json"], "a creator left its temporary marker behind"


def _importer(tasks: Queue[tuple[str, str] | None], results: Queue[str], gate: Barrier) -> None:
    """A process that, for each (store, Maildir) task, waits for the others, then
    opens the store (creating it if need be) and imports the Maildir into it, as
    ``mailledger import maildir`` does; puts "" or what went wrong."""
    while (task := tasks.get()) is not None:
        root, maildir = task
        gate.wait(timeout=120)
        try:
            with MessageStore.open(root) as store:
                import_maildir(store, Path(maildir))
            results.put("")
        except Exception as exc:  # reported: the test shows each one
            results.put(f"{type(exc).__name__}: {exc}")


@pytest.mark.slow
def test_processes_importing_into_a_new_store_at_once_lose_nothing(tmp_path: Path) -> None:
    """Many rounds of the race cheaply: the processes start once and meet at a
    barrier for each new store (the store file, then the projection file, first)."""
    ctx = multiprocessing.get_context("spawn")  # (no fork of a process running DuckDB)
    gate = ctx.Barrier(_PROCESSES)
    results: Queue[str] = ctx.Queue()
    queues: list[Queue[tuple[str, str] | None]] = [ctx.Queue() for _ in range(_PROCESSES)]
    workers = [ctx.Process(target=_importer, args=(q, results, gate)) for q in queues]
    for w in workers:
        w.start()
    try:
        for rnd in range(30):
            root = tmp_path / f"s{rnd}"
            expected: set[str] = set()
            for p, q in enumerate(queues):
                src = tmp_path / f"r{rnd}p{p}"
                expected |= _maildir(src, f"r{rnd}p{p}")
                q.put((str(root), str(src)))
            errors = [e for e in (results.get(timeout=300) for _ in queues) if e]
            assert errors == [], f"round {rnd}"
            with MessageStore.open(root, create=False) as store:
                assert set(store.message_ids()) == expected
    finally:
        for q in queues:
            q.put(None)
        for w in workers:
            w.join(timeout=60)
            if w.is_alive():
                w.kill()


@pytest.fixture
def fine_grained_threads() -> Iterator[None]:
    """Switch threads every few bytecodes, so that racing threads interleave inside
    a store's creation as processes on several cores do."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def _open_at_barrier(root: Path, barrier: threading.Barrier, errors: list[BaseException]) -> None:
    barrier.wait()
    try:
        with MessageStore.open(root):
            pass
    except BaseException as exc:  # collected: the test shows each one
        errors.append(exc)


def test_threads_opening_a_new_store_at_once_all_open_it(
    tmp_path: Path, fine_grained_threads: None
) -> None:
    for rnd in range(30):
        root = tmp_path / f"s{rnd}"
        barrier = threading.Barrier(6)
        errors: list[BaseException] = []
        threads = [
            threading.Thread(target=_open_at_barrier, args=(root, barrier, errors))
            for _ in range(6)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == [], f"round {rnd}"
        assert json.loads((root / "store.json").read_text())["format"] == "mailledger-store"


def test_a_new_store_has_its_marker_and_private_modes(tmp_path: Path) -> None:
    root = tmp_path / "new"
    with MessageStore.open(root):
        pass
    marker = root / "store.json"
    assert json.loads(marker.read_text()) == {"format": "mailledger-store", "version": 1}
    assert marker.stat().st_mode & 0o777 == 0o600
    assert root.stat().st_mode & 0o777 == 0o700
    assert not [p for p in root.iterdir() if p.name.startswith("store.json.")]


def test_temporary_markers_of_a_crashed_creator_do_not_block_creation(tmp_path: Path) -> None:
    root = tmp_path / "s"
    root.mkdir()
    (root / "store.json.tmp").write_text("{")  # older versions' name, half written
    (root / "store.json.4242.0badc0de.tmp").write_text("")
    with MessageStore.open(root):
        pass
    assert json.loads((root / "store.json").read_text())["version"] == 1


def test_a_non_empty_directory_is_still_refused(tmp_path: Path) -> None:
    root = tmp_path / "s"
    root.mkdir()
    (root / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match="not empty"):
        MessageStore.open(root)
    assert not (root / "store.json").exists()
    assert sorted(p.name for p in root.iterdir()) == ["notes.txt"]

"""Worker processes read the files and write the blobs: nothing may change but the speed.

Counts, stored messages and blobs equal with and without workers; a file that
cannot be read is an error with its name; an erased message's bytes never come
back; a worker's full disk is the same named error; every blob is flushed
before the event that names it is committed.
"""

from __future__ import annotations

import json
import mailbox
import os
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import Any

import pytest

import stores.blobs
from pipeline import ingest as ingest_mod
from pipeline.cli import main
from pipeline.ingest import Incoming, Ingest, Prepared, prepare
from pipeline.sources.maildir import import_maildir
from pipeline.sources.mbox import import_mbox
from pipeline.store import MessageStore
from projections.queries import locations as locations_mod
from stores.blobs import fs as blob_fs

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "maildir"
COUNTED = (
    "uids_seen", "processed", "vanished", "errors", "bodies_fetched", "known_skipped",
    "new_messages", "duplicates", "conflicts_other_source", "malformed", "bytes_read", "events",
)  # fmt: skip


def _open(path: Path) -> MessageStore:
    return MessageStore.open(path, run_id="test-run")


def _counts(c: Any) -> dict[str, int]:
    return {k: getattr(c, k) for k in COUNTED}


def _msg(mid: str, subject: str) -> bytes:
    return (
        f"From: a@example.org\nTo: b@example.org\nSubject: {subject}\n"
        f"Date: Wed, 26 Jun 2024 10:00:00 +0000\nMessage-ID: <{mid}>\n\nbody of {subject}\n"
    ).encode()


def _put(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def _state(store: MessageStore) -> tuple[list[str], list[str], list[tuple[Any, ...]]]:
    locs = store.query(
        "SELECT folder, uidl, sha256, message_id FROM locations ORDER BY ALL"
    ).to_pylist()
    return store.message_ids(), sorted(store.blobs.shas()), [tuple(r.values()) for r in locs]


def test_counts_and_store_are_the_same_with_and_without_workers(tmp_path: Path) -> None:
    assert FIXTURES.is_dir()
    results = {}
    for workers in (0, 2):
        with _open(tmp_path / f"store-{workers}") as st:
            first = import_maildir(st, FIXTURES, workers=workers, batch_size=4)
            again = import_maildir(st, FIXTURES, workers=workers, batch_size=4)
            assert first.balanced and again.balanced and first.errors == 0
            results[workers] = (_counts(first), _counts(again), _state(st))
            assert st.verify() == []
    assert results[0] == results[2]
    first, again, (ids, shas, _) = results[2]
    assert first["processed"] == first["bodies_fetched"] + first["known_skipped"] > 0
    assert again["bodies_fetched"] == 0 and again["events"] == 0
    assert len(shas) == first["bodies_fetched"] and ids


def test_mbox_blobs_written_by_workers_count_the_same(tmp_path: Path) -> None:
    box = tmp_path / "in.mbox"
    mb = mailbox.mbox(str(box))
    for i in range(30):
        mb.add(_msg(f"m{i % 25}@x", f"s{i % 25}"))  # 5 identical bodies: known, not fetched
    mb.flush()
    results = {}
    for workers in (0, 2):
        with _open(tmp_path / f"store-{workers}") as st:
            counts = import_mbox(st, box, workers=workers, batch_size=7)
            results[workers] = (_counts(counts), _state(st))
            assert all(st.raw(m) for m in st.message_ids())
    assert results[0] == results[2]
    assert results[2][0]["bodies_fetched"] == 25 and results[2][0]["known_skipped"] == 5


@pytest.mark.parametrize("workers", [0, 2])
def test_an_unreadable_file_is_an_error_with_its_name(tmp_path: Path, workers: int) -> None:
    root = tmp_path / "md"
    _put(root / "cur" / "ok:2,", _msg("ok@x", "ok"))
    (root / "cur" / "dangling:2,").symlink_to(tmp_path / "nowhere")
    (root / "new").mkdir()
    (root / "new" / "loop").symlink_to(root / "new" / "loop")
    with _open(tmp_path / "store") as st:
        counts = import_maildir(st, root, workers=workers)
        assert (counts.uids_seen, counts.processed, counts.errors) == (3, 1, 2)
        assert counts.balanced
        assert sorted(d.split(": ", 1)[0] for d in counts.error_details) == [
            str(root / "cur" / "dangling:2,"),
            str(root / "new" / "loop"),
        ]
        assert all(": unreadable: " in d for d in counts.error_details)
        assert st.message_ids() == ["ok@x"]


def _erasable(tmp_path: Path) -> Path:
    root = tmp_path / "md"
    secret = _msg("secret@x", "secret subject")
    _put(root / "cur" / "1.A:2,S", secret)
    _put(root / ".Archive" / "cur" / "2.B:2,S", secret)  # the same bytes at a second location
    _put(root / "cur" / "3.C:2,", _msg("kept@x", "kept"))
    return root


def _no_blob_to_take_back(self: Ingest) -> None:
    raise AssertionError(f"workers wrote blobs of deleted messages: {self._unwanted}")


@pytest.mark.parametrize("workers", [0, 2])
def test_a_reimport_after_delete_and_purge_does_not_bring_the_erased_blob_back(
    tmp_path: Path, workers: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # no worker writes it in the first place (the safety net at flush is not needed)
    monkeypatch.setattr(Ingest, "drop_unwanted", _no_blob_to_take_back)
    root = _erasable(tmp_path)
    with _open(tmp_path / "store") as st:
        import_maildir(st, root, workers=workers)
        sha = st.get("secret@x")["sha256"]  # type: ignore[index]
        assert st.delete("secret@x")
        assert st.purge().blobs_erased == 1 and not st.blobs.has(sha)
        again = import_maildir(st, root, workers=workers)
        assert not st.blobs.has(sha), "an erased message's bytes came back"
        assert again.balanced and again.events == 0
        assert (again.bodies_fetched, again.known_skipped) == (0, 3)
        assert st.message_ids() == ["kept@x"] and st.verify() == []
        # seen at a new location it is stored again, with its blob
        _put(root / "cur" / "4.D:2,", (root / "cur" / "1.A:2,S").read_bytes())
        third = import_maildir(st, root, workers=workers)
        assert third.events == 1 and third.bodies_fetched == 1
        assert st.blobs.has(sha) and "secret@x" in st.message_ids() and st.verify() == []


@pytest.mark.parametrize("workers", [0, 2])
def test_a_blob_a_worker_wrote_for_a_message_deleted_meanwhile_is_erased(
    tmp_path: Path, workers: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The snapshot of deleted locations predates a delete and purge by another
    process: the worker writes the blob, the commit sees the delete, flush erases it."""
    root = _erasable(tmp_path)
    with _open(tmp_path / "store") as st:
        import_maildir(st, root, workers=workers)
        sha = st.get("secret@x")["sha256"]  # type: ignore[index]
        st.delete("secret@x")
        st.purge()
        monkeypatch.setattr(MessageStore, "deleted_contents", lambda store, source: {})
        again = import_maildir(st, root, workers=workers)
        assert not st.blobs.has(sha), "an erased message's bytes came back"
        assert (again.bodies_fetched, again.known_skipped, again.events) == (0, 3, 0)
        assert st.raw("kept@x") and st.verify() == []


class _Racing(Executor):
    """Runs ``prepare`` here, then reports every blob as written by this chunk:
    as if each chunk's worker had found it absent at the same moment."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        fut: Future[Any] = Future()
        fut.set_result([r._replace(written=r.parsed is not None) for r in fn(*args, **kwargs)])
        return fut


def _offer_files(ingest: Ingest, root: Path, names: list[str]) -> None:
    for name in names:
        path = str(root / "cur" / name)
        size = os.stat(path).st_size
        ingest.offer(Incoming(raw=b"", folder="INBOX", uidl=name, path=path, size=size))


@pytest.mark.parametrize("lookahead", [1, 3])
def test_a_blob_two_chunks_in_flight_both_wrote_is_counted_once(
    tmp_path: Path, lookahead: int
) -> None:
    root = tmp_path / "md"
    names = [f"{i}:2," for i in range(40)]
    for i, name in enumerate(names):  # each body twice in a row: same or adjacent batch
        _put(root / "cur" / name, _msg(f"m{i // 2}@x", f"s{i // 2}"))
    with _open(tmp_path / "a") as st:
        alone = Ingest(st, "import:test", batch_size=3)
        _offer_files(alone, root, names)
        alone.flush()
    with _open(tmp_path / "b") as st:
        racing = Ingest(st, "import:test", batch_size=3, pool=_Racing(), lookahead=lookahead)
        racing._CHUNK = 2
        _offer_files(racing, root, names)
        racing.flush()
    assert _counts(alone.counts) == _counts(racing.counts)
    assert racing.counts.bodies_fetched == 20 and racing.counts.known_skipped == 20


def test_batches_are_bounded_by_the_size_of_the_files(tmp_path: Path) -> None:
    root = tmp_path / "md"
    names = [f"{i}:2," for i in range(12)]
    for i, name in enumerate(names):
        _put(root / "cur" / name, _msg(f"m{i}@x", f"s{i}") + b"x" * 1000)
    with _open(tmp_path / "store") as st:
        ingest = Ingest(st, "import:test", batch_bytes=3000)
        _offer_files(ingest, root, names)
        ingest.flush()
        assert ingest.counts.events == 12
        assert ingest.counts.bytes_read == sum((root / "cur" / n).stat().st_size for n in names)
        assert len(st.log.files()) == 4  # three files of ~1.1 KB per commit


def test_every_commit_with_blobs_from_workers_flushes_them_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[int] = []
    real = blob_fs.syncfs
    store_ref: list[MessageStore] = []

    def syncfs(path: Path) -> None:
        synced.append(store_ref[0].log.last_seq())  # before the batch's file is visible
        real(path)

    monkeypatch.setattr(blob_fs, "syncfs", syncfs)
    with _open(tmp_path / "store") as st:
        store_ref.append(st)
        counts = import_maildir(st, FIXTURES, workers=2, batch_size=4)
        firsts = [f.first for f in st.log.files()]
    assert counts.events > 4 and len(firsts) > 1
    assert synced == [first - 1 for first in firsts]


def test_a_worker_that_cannot_write_a_blob_names_it_and_the_command_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    MessageStore.open(store).close()
    blocked = [store / "blobs" / "packs"]
    for f in blocked:
        f.write_bytes(b"")  # no pack directory can be made: every new blob fails
    argv = ["--store", str(store), "import", "maildir", str(FIXTURES), "--workers", "2"]
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 1, err
    assert f"{store / 'blobs' / 'packs'}" in err and "Traceback" not in err
    for f in blocked:
        f.unlink()
    assert main(argv) == 0
    with MessageStore.open(store) as st:
        assert st.verify() == [] and st.message_ids()


def test_prepare_leaves_a_held_blob_to_the_caller_and_skips_compressing_a_stored_one(
    tmp_path: Path,
) -> None:
    blobs = stores.blobs.BlobStore(tmp_path / "blobs")
    blobs.create()
    raw = _msg("a@x", "a")
    sha = stores.blobs.sha256_hex(raw)
    [held] = prepare([raw], str(blobs.root), {0: frozenset({sha})})
    assert held.blob is not None and not held.written and not blobs.has(sha)
    [first] = prepare([raw], str(blobs.root))
    [second] = prepare([raw], str(blobs.root))
    assert first == Prepared(first.parsed, True) and second == Prepared(second.parsed, False)
    assert blobs.get(sha) == raw


# Run by a fresh interpreter: its pool is its own, with a forkserver started for it
# (a forkserver lives as long as the process that started it, so a pool in this one
# would be forked from whichever server an earlier test started, preloaded as it was).
_WORKER_PROBE = """
import json, sys

def loaded(prefixes):
    return sorted(m for m, module in sys.modules.items() if m.startswith(prefixes) and module)

if __name__ == "__main__":  # (the workers import this file too, as __mp_main__)
    from pipeline.store import MessageStore  # what the run's process loads to commit
    from pipeline.ingest import worker_pool

    with worker_pool(1) as pool:
        print(json.dumps({
            "worker": pool.submit(loaded, ("pyarrow", "duckdb")).result(),  # (None: left out)
            "worker_pipeline": pool.submit(loaded, ("pipeline.",)).result(),
            "run": [m for m in ("duckdb", "pyarrow") if m in sys.modules],
        }))
"""


def test_a_worker_process_loads_neither_pyarrow_nor_duckdb(tmp_path: Path) -> None:
    """What a worker runs (fetch, parse, compress, store) needs neither library, and
    each would cost every worker (and the fork server) tens of MB and its import time."""
    probe = tmp_path / "probe.py"  # (a file: the workers import the callables from it)
    probe.write_text(_WORKER_PROBE)
    done = subprocess.run(
        [sys.executable, str(probe)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["worker"] == []
    # the worker has what it runs (these are the callables the pool is given)
    assert {"pipeline.sources.imap.fetch", "pipeline.prepare"} <= set(seen["worker_pipeline"])
    # and the process that commits does load them: the check above is not vacuous
    assert seen["run"] == ["duckdb", "pyarrow"]


def test_prepare_asks_the_blob_index_once_for_a_chunk_not_once_a_message(tmp_path: Path) -> None:
    import importlib

    prepare_mod = importlib.import_module("pipeline.prepare")
    blobs = stores.blobs.BlobStore(tmp_path / "blobs")
    blobs.create()
    raws = [_msg(f"m{i}@x", f"s{i}") for i in range(50)]
    prepare(raws[:1], str(blobs.root))  # the index exists now, holding the first
    index = prepare_mod.blobs_at(str(blobs.root)).index.connection()
    asked: list[str] = []
    index.set_trace_callback(lambda sql: asked.append(sql) if "WHERE sha" in sql else None)
    try:
        out = prepare(raws, str(blobs.root))
    finally:
        index.set_trace_callback(None)
    assert [r.written for r in out] == [False] + [True] * 49
    # one look before compressing, one in put_many before the pack is written
    assert len(asked) == 2, asked
    reader = stores.blobs.BlobStore(blobs.root)
    assert all(reader.get(stores.blobs.sha256_hex(r)) == r for r in raws)


def _counting_lookups(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    asked: list[str] = []
    for name in ("stored_ids", "locations_at"):
        real = getattr(MessageStore, name)

        def counted(
            self: MessageStore, *a: Any, _real: Any = real, _name: str = name, **k: Any
        ) -> Any:
            asked.append(_name)
            return _real(self, *a, **k)

        monkeypatch.setattr(MessageStore, name, counted)
    return asked


@pytest.mark.parametrize("workers", [0, 2])
def test_an_import_into_an_empty_store_asks_the_projections_nothing(
    tmp_path: Path, workers: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Everything on record is what the run recorded itself: no lookup can learn more."""
    root = tmp_path / "md"
    for i in range(10):  # each message twice, five files apart: in another batch
        _put(root / "cur" / f"{i}:2,", _msg(f"m{i % 5}@x", f"s{i % 5}"))
    asked = _counting_lookups(monkeypatch)
    with _open(tmp_path / "store") as st:
        first = import_maildir(st, root, workers=workers, batch_size=2)
        assert first.balanced and first.events == 10 and asked == []
        assert (first.new_messages, first.duplicates) == (5, 5)
        assert (first.bodies_fetched, first.known_skipped) == (5, 5)
        again = import_maildir(st, root, workers=workers, batch_size=2)
        assert again.balanced and again.events == 0 and asked  # a store with messages: asked
        assert (again.duplicates, again.known_skipped) == (10, 10)
        assert st.verify() == [] and len(st.message_ids()) == 5


def test_another_writer_during_an_import_into_an_empty_store_is_seen(tmp_path: Path) -> None:
    root = tmp_path / "md"
    names = [f"{i}:2," for i in range(6)]
    for i, name in enumerate(names):
        _put(root / "cur" / name, _msg(f"m{i}@x", f"s{i}"))
    with _open(tmp_path / "store") as st:
        ingest = Ingest(st, "import:test", batch_size=2)
        _offer_files(ingest, root, names[:4])  # the first batch is committed
        assert st.log.last_seq() == 2
        with _open(tmp_path / "store") as other:
            other.add(None, (root / "cur" / names[4]).read_bytes(), source="other")
        _offer_files(ingest, root, names[4:])
        ingest.flush()
        c = ingest.counts
        assert c.balanced and (c.new_messages, c.conflicts_other_source) == (5, 1)
        assert st.verify() == []


def test_an_import_into_a_new_store_builds_its_projections_once_at_the_end(
    tmp_path: Path,
) -> None:
    """No fold into tables that grow with each one: one build from the log, as a
    replay makes, when the run is done; a store that has projections folds as before."""
    root = tmp_path / "md"
    names = [f"{i}:2," for i in range(12)]
    for i, name in enumerate(names):
        _put(root / "cur" / name, _msg(f"m{i % 9}@x", f"s{i % 9}"))
    with _open(tmp_path / "store") as st:
        st.projector.fold_every = 2  # a fold would be due after every batch
        ingest = Ingest(st, "import:test", batch_size=2)
        _offer_files(ingest, root, names[:8])
        assert len(st.log.files()) >= 3 and not st.projector.db_path.exists()
        _offer_files(ingest, root, names[8:])
        ingest.flush()
        assert st.projector.db_path.exists() and ingest.counts.balanced
        assert (ingest.counts.new_messages, ingest.counts.duplicates) == (9, 3)
        assert len(st.message_ids()) == 9 and st.verify() == []
        # the projections exist now: a later run folds as it goes, when a fold is due
        more = tmp_path / "more"
        for i in range(3):
            _put(more / "cur" / f"{i}:2,", _msg(f"n{i}@x", f"t{i}"))
        ingest = Ingest(st, "import:more", batch_size=1)
        _offer_files(ingest, more, [f"{i}:2," for i in range(3)])  # two batches committed
        assert st.projector.unfolded == 0
        ingest.flush()
        assert len(st.message_ids()) == 12 and st.verify() == []


def _ids_asked(st: MessageStore, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The ids ``st.stored_ids`` is asked about from now on, as they are asked."""
    asked: list[str] = []
    real = st.stored_ids

    def spy(ids: list[str], **kw: Any) -> dict[str, str]:
        asked.extend(ids)
        return real(ids, **kw)

    monkeypatch.setattr(st, "stored_ids", spy)
    return asked


def test_ids_seen_absent_are_not_asked_again_until_another_writer_commits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sync tells its run which envelope ids the store holds none of (one scan):
    the run's batches do not probe them again, unless another writer has committed
    since (then they are asked as before, and the other writer's id is found)."""
    root = tmp_path / "md"
    names = [f"{i}:2," for i in range(6)]
    for i, name in enumerate(names):
        _put(root / "cur" / name, _msg(f"m{i}@x", f"s{i}"))
    with _open(tmp_path / "store") as st:
        st.add(None, _msg("seed@x", "seed"), source="other")  # not empty: lookups are made
        asked = _ids_asked(st, monkeypatch)
        ingest = Ingest(st, "import:test", batch_size=2)
        ingest.absent([f"m{i}@x" for i in range(6)], st.projector.caught_up_seq)
        _offer_files(ingest, root, names[:4])  # the first batch is committed
        assert st.log.last_seq() > 1 and asked == []
        with _open(tmp_path / "store") as other:
            other.add(None, _msg("m5@x", "s5"), source="other")
        _offer_files(ingest, root, names[4:])
        ingest.flush()
        assert sorted(asked) == ["m2@x", "m3@x", "m4@x", "m5@x"]
        c = ingest.counts
        assert c.balanced and (c.new_messages, c.conflicts_other_source) == (5, 1)
        assert st.verify() == []


@pytest.mark.parametrize("few", [10**9, 0], ids=["semi-join", "anti-join"])
def test_the_deleted_contents_of_a_source_are_read_either_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, few: int
) -> None:
    """A source's locations whose message is no longer stored, read by the query for
    a few locations or by the one for many; another source's are not."""
    monkeypatch.setattr(locations_mod, "FEW_PLACES", few)
    root = _erasable(tmp_path)
    with _open(tmp_path / "store") as st:
        import_maildir(st, root)
        sha = st.get("secret@x")["sha256"]  # type: ignore[index]
        st.add("u1", _msg("other@x", "other"), source="other")
        (source,) = {r["source"] for r in st.query("SELECT source FROM locations").to_pylist()} - {
            "other"
        }
        assert st.deleted_contents(source) == {}
        st.delete("secret@x")
        st.delete("other@x")
        got = st.deleted_contents(source)
        assert sorted(got.values(), key=repr) == [{sha}, {sha}] and len(got) == 2
        assert st.deleted_contents("nobody") == {}


@pytest.mark.parametrize("workers", [0, 2])
def test_a_run_told_what_is_on_record_at_its_places_probes_none_and_decides_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int
) -> None:
    """A sync of many UIDs asks what the store holds at all of them in one query
    (``Ingest.on_record``): its batches then probe none of those places, and decide
    as a run that probes them: a deleted and purged message's bytes stay erased
    (no worker writes them), a known place adds nothing, a new one is stored."""
    root = _erasable(tmp_path)
    names = ["1.A:2,S", "3.C:2,", "4.D:2,"]
    outcomes = []
    for told in (False, True):
        with _open(tmp_path / f"store-{told}") as st:
            first = Ingest(st, "import:test", batch_size=2)
            _offer_files(first, root, names[:2])
            first.flush()
            sha = st.get("secret@x")["sha256"]  # type: ignore[index]
            assert st.delete("secret@x") and st.purge().blobs_erased == 1
            _put(root / "cur" / names[2], _msg("new@x", "new"))
            probed: list[Any] = []

            def probe(*a: Any, probed: list[Any] = probed, **k: Any) -> list[Any]:
                probed.append(a)
                return []

            with ingest_mod.worker_pool(workers) as pool, monkeypatch.context() as m:
                again = Ingest(st, "import:test", batch_size=2, pool=pool)
                if told:
                    places = [("INBOX", None, None, n) for n in names]
                    again.on_record(places, st.locations_at("import:test", places))
                    m.setattr(st, "locations_at", probe)
                m.setattr(Ingest, "drop_unwanted", _no_blob_to_take_back)
                _offer_files(again, root, names)
                again.flush()
            assert probed == []
            assert not st.blobs.has(sha), "an erased message's bytes came back"
            assert again.counts.balanced and st.verify() == []
            outcomes.append((_counts(again.counts), sorted(st.message_ids())))
            (root / "cur" / names[2]).unlink()
    assert outcomes[0] == outcomes[1]
    counts, ids = outcomes[1]
    assert ids == ["kept@x", "new@x"]
    assert (counts["bodies_fetched"], counts["known_skipped"], counts["events"]) == (1, 2, 1)


def test_ids_told_held_with_their_owner_are_not_asked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sync's one scan of its envelope ids also says which the store holds and
    whose they are: the run's batches do not ask about those either."""
    root = tmp_path / "md"
    _put(root / "cur" / "1:2,", _msg("seed@x", "seed"))
    _put(root / "cur" / "2:2,", _msg("m1@x", "s1"))
    with _open(tmp_path / "store") as st:
        st.add(None, _msg("seed@x", "seed"), source="other")
        asked = _ids_asked(st, monkeypatch)
        ingest = Ingest(st, "import:test", batch_size=2)
        ingest.absent(["m1@x"], st.projector.caught_up_seq, {"seed@x": "other"})
        _offer_files(ingest, root, ["1:2,", "2:2,"])
        ingest.flush()
        assert asked == []
        c = ingest.counts
        assert c.balanced and (c.new_messages, c.conflicts_other_source) == (1, 1)
        assert st.verify() == []


def test_prepare_asks_the_kernel_to_read_a_chunks_files_before_reading_the_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a maildir not in the page cache: each read waits for the disk unless the
    # kernel was asked for the whole chunk first (a cold 100,000-message import
    # 54 -> 39 s); a path that cannot be opened is still the read's error
    import builtins

    blobs = stores.blobs.BlobStore(tmp_path / "blobs")
    blobs.create()
    paths = []
    for i in range(3):
        _put(tmp_path / "md" / f"{i}:2,", _msg(f"m{i}@x", f"s{i}"))
        paths.append(str(tmp_path / "md" / f"{i}:2,"))
    asked: list[tuple[int, int]] = []
    asked_at_first_read: list[int] = []
    real_advise, real_open = os.posix_fadvise, builtins.open

    def advise(fd: int, offset: int, length: int, advice: int) -> None:
        asked.append((os.fstat(fd).st_ino, advice))
        real_advise(fd, offset, length, advice)

    def opened(file: Any, *a: Any, **k: Any) -> Any:
        if str(file) in paths and not asked_at_first_read:
            asked_at_first_read.append(len(asked))
        return real_open(file, *a, **k)

    monkeypatch.setattr(os, "posix_fadvise", advise)
    monkeypatch.setattr(builtins, "open", opened)
    out = prepare([*paths, str(tmp_path / "nowhere")], str(blobs.root))
    assert [ino for ino, _ in asked] == [os.stat(p).st_ino for p in paths]
    assert {advice for _, advice in asked} == {os.POSIX_FADV_WILLNEED}
    assert asked_at_first_read == [3]  # the whole chunk asked for before the first read
    assert [r.parsed.message_id if r.parsed else (r.error or "")[:10] for r in out] == [
        "m0@x", "m1@x", "m2@x", "unreadable"
    ]  # fmt: skip


def test_an_import_spaces_out_the_cyclic_collector_and_puts_it_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a full collection walks the run's whole record (a set entry per message):
    # at the default thresholds they came so often that 1,000,000 messages spent
    # 27 s in them; the caller's thresholds are back after the run, failed or not
    import gc

    from pipeline import importing

    root = tmp_path / "md"
    for i in range(3):
        _put(root / "cur" / f"{i}:2,", _msg(f"m{i}@x", f"s{i}"))
    seen: list[tuple[int, int, int]] = []
    real_offer = Ingest.offer

    def offer(self: Ingest, item: Incoming) -> None:
        seen.append(gc.get_threshold())
        real_offer(self, item)

    monkeypatch.setattr(Ingest, "offer", offer)
    before = gc.get_threshold()
    assert before != importing._GC_THRESHOLDS
    with _open(tmp_path / "store") as st:
        import_maildir(st, root, workers=0)
        assert seen == [importing._GC_THRESHOLDS] * 3
        assert gc.get_threshold() == before

        def failing(self: Ingest, item: Incoming) -> None:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(Ingest, "offer", failing)
        with pytest.raises(OSError):
            import_maildir(st, root, workers=0)
        assert gc.get_threshold() == before

"""The full-text projection (``STORE/fulltext.sqlite``): built by replay, kept up
by every fold, equal either way, checked by ``verify``, and a deleted message's
text gone from its files (then a purge leaves no byte of it in the store)."""

from __future__ import annotations

import secrets
import shutil
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import apsw
import pytest

from pipeline.sources.maildir import import_maildir
from pipeline.store import MessageStore
from projections.fulltext.index import TEXT_VERSION, FullText
from projections.queries import compile_query
from projections.search import parse
from tests.conftest import StepClock
from torture import search_store

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def _message(token: str, n: int = 0, words: dict[str, str] | None = None) -> bytes:
    words = words or {f: f"{token}{f}" for f in ("subject", "body", "file")}
    return (
        f"From: Zoë Canary <zoe.{n}@people.example>\r\n"
        f"To: Bob <bob@people.example>\r\n"
        f"Subject: Motörhead tickets {words['subject']}\r\n"
        f"Message-ID: <canary-{n}.{token}@people.example>\r\n"
        "MIME-Version: 1.0\r\n"
        'Content-Type: multipart/mixed; boundary="b"\r\n\r\n'
        "--b\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n"
        f"Dear Bob, the secret word is {words['body']} and the rest is prose.\r\n"
        "--b\r\nContent-Type: application/pdf\r\n"
        f'Content-Disposition: attachment; filename="{words["file"]}.pdf"\r\n\r\n%PDF\r\n'
        "--b--\r\n"
    ).encode()


def _ids(store: MessageStore, query: str) -> set[str]:
    table = store.search(compile_query(parse(query, now=datetime.now(UTC))), "messages")
    return set(table.column("message_id").to_pylist())


def _fingerprint(store: MessageStore) -> dict[str, object]:
    fulltext = store.projector.fulltext
    assert fulltext is not None
    with fulltext.connection() as con:
        return fulltext.fingerprint(con)


def _seq(store: MessageStore) -> int:
    with apsw.Connection(str(store.root / "fulltext.sqlite")) as con:
        return int(next(con.execute("SELECT value FROM meta WHERE key = 'applied_seq'"))[0])


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MessageStore]:
    with MessageStore.open(tmp_path / "store", clock=StepClock(), run_id="t") as st:
        yield st


def test_each_fold_updates_the_index_and_equals_a_replay(
    store: MessageStore, notmuch_corpus: Path
) -> None:
    import_maildir(store, FIXTURES / "maildir")  # (a new store: built as a replay builds it)
    assert (store.root / "fulltext.sqlite").exists()
    import_maildir(store, notmuch_corpus / "lkml")  # folded into the index as it stands
    token = secrets.token_hex(6)
    kept = store.add(None, _message(token, 1))
    gone = store.add(None, _message(token, 2))
    assert _seq(store) == store.log.last_seq()  # each add folded at once, text included
    assert _ids(store, f"{token}body") == {kept, gone}
    assert _ids(store, "motorhead tickets") == {kept, gone}  # diacritics folded
    assert _ids(store, f"filename:{token}file.pdf") == {kept, gone}
    assert store.delete(gone)
    assert store.delete("plan-2@example.org")
    assert _ids(store, f"{token}body") == {kept}
    assert _ids(store, "migration") == set()  # plan-2's body word
    again = store.add(None, _message(token, 2))  # seen again after its delete: back
    assert _ids(store, f"{token}body") == {kept, again}

    folded = _fingerprint(store)
    assert store.verify(blobs=False) == []
    store.reindex(text=True)
    assert _fingerprint(store) == folded  # incremental == replay
    assert _ids(store, f"{token}body") == {kept, again}


def test_an_index_that_lagged_over_deletes_and_a_return_catches_up_to_a_rebuild(
    store: MessageStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One catch-up over a message deleted and seen again, one deleted for good and
    one new: the documents taken out are those of the messages the deletions
    removed (``removals``, by seq), and the index equals one built afresh."""
    import_maildir(store, FIXTURES / "maildir")
    token = secrets.token_hex(6)
    back = store.add(None, _message(token, 1))
    gone = store.add(None, _message(token, 2))
    held = _seq(store)

    def lag(self: FullText, duck: Any) -> int:
        raise RuntimeError("the index is busy")

    with monkeypatch.context() as m:
        m.setattr(FullText, "sync", lag)
        assert store.delete(back) and store.delete(gone)
        assert store.add(None, _message(token, 1)) == back  # seen again: wins anew
        new = store.add(None, _message(token, 3))
    assert _seq(store) == held  # (the folds went on without the text)

    assert _ids(store, f"{token}body") == {back, new}  # (a search catches up first)
    assert _seq(store) == store.log.last_seq()
    caught_up = _fingerprint(store)
    store.reindex(text=True)
    assert _fingerprint(store) == caught_up
    assert _ids(store, f"{token}body") == {back, new}


def _indexes(store: MessageStore) -> set[str]:
    fulltext = store.projector.fulltext
    assert fulltext is not None
    with fulltext.connection() as con:
        return {
            str(name)
            for (name,) in con.execute(
                "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'docs'"
                " AND sql IS NOT NULL"
            )
        }


def test_an_index_made_with_an_index_of_message_ids_drops_it_at_its_next_catch_up(
    store: MessageStore,
) -> None:
    """Files made before ``removals`` kept ``docs`` indexed by Message-ID: no read
    needs it now, and each write paid for it. The next catch-up drops it, and
    removes by seq what a deletion took out."""
    import_maildir(store, FIXTURES / "maildir")
    token = secrets.token_hex(6)
    gone = store.add(None, _message(token, 1))
    fulltext = store.projector.fulltext
    assert fulltext is not None
    assert _indexes(store) == set()  # (a new file is made without it)
    with fulltext.connection() as con:
        con.execute("CREATE INDEX docs_message_id ON docs(message_id)")
    assert _indexes(store) == {"docs_message_id"}
    assert store.delete(gone)
    assert _indexes(store) == set()
    assert _ids(store, f"{token}body") == set()
    caught_up = _fingerprint(store)
    store.reindex(text=True)
    assert _fingerprint(store) == caught_up


def test_one_message_fold_costs_little_beside_a_store_of_many(
    store: MessageStore, notmuch_corpus: Path
) -> None:
    import_maildir(store, notmuch_corpus)
    fulltext = store.projector.fulltext
    assert fulltext is not None
    times = []
    for n in range(5):
        raw = _message(secrets.token_hex(6), n)
        store.add(None, raw)  # (blob, log and DuckDB fold: not what is timed)
        with store.projector.hold():
            con = store.projector.reader()
            start = time.perf_counter()
            fulltext.sync(con)
            times.append(time.perf_counter() - start)
    assert _seq(store) == store.log.last_seq()
    # (already synced by the add: what is timed is the check; the add's own sync is
    # timed by bench.run) a generous bound, on a shared machine
    assert sorted(times)[2] < 0.5


def test_a_replay_builds_a_new_file_and_keeps_the_old_on_failure(
    store: MessageStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    import_maildir(store, FIXTURES / "maildir")
    before = _fingerprint(store)
    fulltext = store.projector.fulltext
    assert fulltext is not None

    def fail(*_: object) -> None:
        raise RuntimeError("killed midway")

    monkeypatch.setattr(fulltext, "_swap_in", fail)
    with pytest.raises(RuntimeError):
        store.reindex(text=True)
    monkeypatch.undo()
    assert _fingerprint(store) == before
    assert not list(store.root.glob("fulltext.sqlite.rebuild*"))
    (store.root / "fulltext.sqlite").unlink()  # a missing index: made again when read
    assert _ids(store, "friday") == {"plan-1@example.org"}


def test_verify_reports_an_index_that_drifted(store: MessageStore) -> None:
    import_maildir(store, FIXTURES / "maildir")
    assert store.verify(blobs=False) == []
    with apsw.Connection(str(store.root / "fulltext.sqlite")) as con:
        con.execute("INSERT INTO text(rowid, body) VALUES (999999, 'stray words')")
    assert store.verify(blobs=False) == [
        "the full-text index differs from one built afresh from the messages"
    ]


def test_a_deleted_message_leaves_no_byte_of_its_text_in_the_index(
    store: MessageStore,
) -> None:
    import_maildir(store, FIXTURES / "maildir")
    # a word each, none sharing a prefix with another
    words = {f: f"q{secrets.token_hex(8)}" for f in ("subject", "body", "file")}
    # FTS5 keeps a term after the prefix it shares with the term before it:
    # search for each word less its first 3 bytes
    needles = {name: w[3:].encode() for name, w in words.items()}
    victim = store.add(None, _message(secrets.token_hex(4), 1, words))
    store.add(None, _message(secrets.token_hex(8), 2))

    def in_index() -> dict[str, list[str]]:
        hits = search_store(store.root, needles)
        return {n: [p for p in places if p.startswith("fulltext")] for n, places in hits.items()}

    assert all(in_index().values())  # the control: the search sees the terms
    assert store.delete(victim)
    assert not any(in_index().values())  # gone with the delete (blob still kept)
    report = store.purge()
    assert report.messages == 1
    assert not any(search_store(store.root, needles).values())
    assert store.verify() == []


def test_an_unreadable_blob_is_indexed_without_text_and_removed_exactly(
    store: MessageStore,
) -> None:
    token = secrets.token_hex(6)
    mid = store.add(None, _message(token, 1))
    fulltext = store.projector.fulltext
    assert isinstance(fulltext, FullText)
    sha = store.get(mid)["sha256"]  # type: ignore[index]
    store.blobs.delete(sha)
    store.reindex(text=True)  # the replay still succeeds
    assert _ids(store, f"{token}body") == set()
    assert store.delete(mid)
    with fulltext.connection() as con:
        con.execute("INSERT INTO text(text, rank) VALUES ('integrity-check', 0)")
        assert list(con.execute("SELECT count(*) FROM docs")) == [(0,)]


def test_a_large_build_extracts_in_worker_processes_as_the_writer_would(
    store: MessageStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from concurrent.futures import ProcessPoolExecutor

    from testkit.corpus import write_maildir

    write_maildir(tmp_path / "mail", 1_300, seed=3)
    import_maildir(store, tmp_path / "mail", workers=0)
    submitted: list[object] = []
    submit = ProcessPoolExecutor.submit

    def counting(self: ProcessPoolExecutor, fn: Any, /, *args: Any, **kw: Any) -> Any:
        submitted.append(fn)
        return submit(self, fn, *args, **kw)

    monkeypatch.setattr(ProcessPoolExecutor, "submit", counting)
    store.reindex(text=True)
    monkeypatch.undo()
    assert len(submitted) == 6  # about 1,300 messages, 256 a chunk: all to the workers
    fulltext = store.projector.fulltext
    assert fulltext is not None
    pooled = _fingerprint(store)
    fulltext.workers = 1  # the same build in this process only
    store.reindex(text=True)
    assert _fingerprint(store) == pooled
    with fulltext.connection() as con:
        stored = len(store.message_ids())  # (the generator repeats a few ids)
        assert stored > 1_250
        assert list(con.execute("SELECT count(*) FROM docs")) == [(stored,)]
        # built without merging as it went, then FTS5's merge settings put back for
        # the syncs that follow
        config = dict(con.execute("SELECT k, v FROM text_config"))
        assert (config["automerge"], config["crisismerge"], config["hashsize"]) == (4, 16, 16 << 20)


def test_a_plain_replay_keeps_an_index_in_step_and_rebuilds_a_missing_one(
    store: MessageStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The text's rebuild reads every blob again (ten times a DuckDB replay): a
    replay brings an index in step along instead, and rebuilds it only when it is
    missing (or of another version), or when asked (``replay --text``)."""
    import_maildir(store, FIXTURES / "maildir")
    fulltext = store.projector.fulltext
    assert fulltext is not None
    before = _fingerprint(store)
    rebuilt: list[int] = []
    rebuild = FullText.rebuild

    def counting(self: FullText, duck: Any) -> int:
        rebuilt.append(1)
        return rebuild(self, duck)

    monkeypatch.setattr(FullText, "rebuild", counting)
    store.reindex()
    assert rebuilt == [] and _fingerprint(store) == before
    (store.root / "fulltext.sqlite").unlink()
    store.reindex()
    assert rebuilt == [1] and _fingerprint(store) == before
    store.reindex(text=True)
    assert rebuilt == [1, 1] and _fingerprint(store) == before


def test_a_store_made_again_at_the_same_place_has_its_text_read_from_its_own_blobs(
    tmp_path: Path,
) -> None:
    """A store removed and made again at the same path, in one process, with the
    same mail: the import writes every body into the new store (a writer kept from
    the old one believed them stored and skipped them: bodies lost, and their text
    unread), and the text is read through the store's own blob store."""
    root = tmp_path / "store"
    token = secrets.token_hex(6)  # (the same mail both times: the same sha256, other packs)
    for round_ in range(2):
        mail = tmp_path / f"mail{round_}" / "cur"
        mail.mkdir(parents=True)
        for n in (1, 2, 3):  # (imported: their bodies share a pack)
            (mail / f"{n}:2,S").write_bytes(_message(token, n))
        with MessageStore.open(root, clock=StepClock(), run_id=f"r{round_}") as store:
            import_maildir(store, mail.parent, workers=0)
            found = _ids(store, f"{token}body")
            assert found == {f"canary-{n}.{token}@people.example" for n in (1, 2, 3)}, round_
            assert store.verify() == []
        shutil.rmtree(root)


def test_an_index_made_before_the_display_names_is_rebuilt_with_them(tmp_path: Path) -> None:
    """An index of text version 3 (no from_names/to_names columns) is made again
    at the store's next use, and then a From name finds its mail."""
    root = tmp_path / "store"
    with MessageStore.open(root, clock=StepClock(), run_id="r1") as store:
        import_maildir(store, FIXTURES / "maildir")
    with apsw.Connection(str(root / "fulltext.sqlite")) as con:  # (version 3's layout)
        con.execute(
            "DROP TABLE text; CREATE VIRTUAL TABLE text USING fts5(subject, body, names,"
            " filenames, flags, content='', tokenize='unicode61 remove_diacritics 2');"
            " UPDATE meta SET value = 3 WHERE key = 'text_version'"
        )
    with MessageStore.open(root, clock=StepClock(), run_id="r2") as store:
        assert _ids(store, "from:Kowalska") == {"plan-4@example.pl"}  # (zofia@: the name only)
        assert _ids(store, 'from:"Grace Hopper"') == _ids(store, "from:grace@example.org") != set()
    with apsw.Connection(str(root / "fulltext.sqlite")) as con:
        version = next(con.execute("SELECT value FROM meta WHERE key = 'text_version'"))[0]
    assert version == TEXT_VERSION == 4

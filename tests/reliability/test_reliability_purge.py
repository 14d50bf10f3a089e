"""``compact --purge``: deleted messages erased for good, skeleton and cursors kept.

In-process and fast; the campaigns in ``torture/erasure.py`` (byte search of a
whole store, real sync and import) and ``torture/crash.py`` (kill -9 during a
purge) run the same promises against the real command.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from pipeline.cli import main
from pipeline.store import MessageStore
from projections.tables import fingerprint
from stores.errors import LogIntegrityError
from stores.events import CursorMoved
from stores.purge import PSEUDONYM
from torture import search_store


def _raw(i: int, *, subject: str | None = None, extra: str = "") -> bytes:
    return (
        f"From: Person {i} <person.{i}@people.example>\r\nTo: me@here.example\r\n"
        f"Subject: {subject or f'secret subject {i}'}\r\n"
        f"Date: Mon, 0{1 + i % 9} Jun 2026 10:00:00 +0200\r\n"
        f"Message-ID: <person.{i}.id@laptop.example>\r\n{extra}\r\n"
        f"secret body {i}\r\n"
    ).encode()


def _fill(store: MessageStore, n: int = 8) -> None:
    for i in range(n):
        store.add(f"uidl-{i}", _raw(i), source="pop:acct", folder="INBOX")
    store.commit(
        [
            CursorMoved(run_id="r", recorded_at=store.clock.now(), source="acct", folder="INBOX",
                        uidvalidity=7, cursor_from=None, cursor_to=n, mode="full",
                        reason="first contact"),
        ]
    )  # fmt: skip


def _skeleton(store: MessageStore) -> list[dict[str, object]]:
    return store.query(
        "SELECT seq, type, run_id, recorded_at, source, folder, uidvalidity, uid, uidl, sha256,"
        " size, actor, cursor_from, cursor_to FROM events ORDER BY seq"
    ).to_pylist()


def _tables(store: MessageStore) -> dict[str, str]:
    with store.session():
        return fingerprint(store.projector.reader())


def test_purge_erases_bytes_and_headers_and_keeps_skeleton_cursors_and_the_rest(
    store: MessageStore,
) -> None:
    _fill(store)
    store.delete("person.3.id@laptop.example", reason="request of person 3")
    before = _skeleton(store)
    kept = {m: store.raw(m) for m in store.message_ids()}
    cursor_log = store.cursor_log("acct", "INBOX")
    needles = {
        "subject": b"secret subject 3",
        "body": b"secret body 3",
        "id": b"person.3.id@laptop.example",
        "sender": b"person.3@people.example",
        "reason": b"request of person 3",
    }
    assert all(search_store(store.root, needles).values())  # visible before

    report = store.purge()

    assert (report.messages, report.blobs_erased) == (1, 1)
    assert report.events_rewritten == 2  # its message-seen and its message-deleted
    assert search_store(store.root, needles) == {k: [] for k in needles}
    after = _skeleton(store)
    assert after[: len(before)] == before  # type, seq, location, hash, size: all kept
    [extra] = after[len(before) :]
    assert extra["type"] == "message-deleted" and extra["actor"] == "mailledger-purge"
    assert {m: store.raw(m) for m in store.message_ids()} == kept
    assert store.cursor_log("acct", "INBOX") == cursor_log
    assert store.verify() == []
    assert not store.purge_journal.exists()
    ids = store.query("SELECT DISTINCT message_id FROM events WHERE message_id LIKE 'purged-%'")
    [pseudonym] = ids.column("message_id").to_pylist()
    assert PSEUDONYM.match(pseudonym)
    # the location still answers "downloaded already": no second download after a purge
    assert store.contains_uidl("uidl-3")


def test_purge_leaves_every_projection_row_of_kept_data_as_it_was(store: MessageStore) -> None:
    _fill(store)
    store.delete("person.5.id@laptop.example")
    before = _tables(store)
    store.purge()
    after = _tables(store)
    changed = {t for t in before if before[t] != after[t]}
    # only the purged location's id became its pseudonym (and meta: one more seq applied)
    assert changed <= {"locations", "meta"}
    rows = store.query("SELECT message_id FROM locations WHERE uidl = 'uidl-5'").to_pylist()
    assert PSEUDONYM.match(rows[0]["message_id"])


def test_a_message_seen_again_after_its_delete_is_not_purged(store: MessageStore) -> None:
    _fill(store, 3)
    store.delete("person.1.id@laptop.example")
    store.add("uidl-again", _raw(1), source="pop:other", folder="INBOX")
    report = store.purge()
    assert report.messages == 0 and report.blobs_erased == 0
    assert store.raw("person.1.id@laptop.example") == _raw(1)


def test_a_blob_another_stored_message_holds_is_kept(store: MessageStore) -> None:
    _fill(store, 3)
    store.add(None, _raw(2), source="gdbm", folder="", message_id="synthetic-uidl-9@local")
    store.delete("person.2.id@laptop.example")
    report = store.purge()
    assert (report.messages, report.blobs_erased) == (1, 0)
    assert store.raw("synthetic-uidl-9@local") == _raw(2)
    left = store.query("SELECT count(*) AS n FROM events WHERE message_id = ?",
                       ["person.2.id@laptop.example"])  # fmt: skip
    assert left.to_pylist() == [{"n": 0}]


def test_a_second_purge_does_nothing(store: MessageStore) -> None:
    _fill(store, 4)
    store.delete("person.0.id@laptop.example")
    assert store.purge().messages == 1
    seq = store.log.last_seq()
    again = store.purge()
    assert not again.changed and store.log.last_seq() == seq


def test_a_purge_killed_midway_replays_consistently_and_a_rerun_finishes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = MessageStore.open(tmp_path / "s", run_id="r")
    for i in range(6):  # one file per event: the purge rewrites several files
        store.add(f"u{i}", _raw(i))
    for i in (0, 4):
        store.delete(f"person.{i}.id@laptop.example")
    ids = set(store.message_ids())
    real = store.log.rewrite
    calls = 0

    def dies_on_the_second(f: object, table: object) -> None:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise KeyboardInterrupt("killed")  # stands in for kill -9 between two rewrites
        real(f, table)  # type: ignore[arg-type]

    monkeypatch.setattr(store.log, "rewrite", dies_on_the_second)
    with pytest.raises(KeyboardInterrupt):
        store.purge()
    monkeypatch.undo()
    assert store.purge_journal.exists()
    half = MessageStore.open(tmp_path / "s")
    assert half.verify() == []  # the half-purged log replays: nothing resurrects
    assert set(half.message_ids()) == ids
    report = half.purge()
    assert report.resumed and not half.purge_journal.exists()
    assert half.verify() == [] and set(half.message_ids()) == ids
    needles = {f"id {i}": f"person.{i}.id@laptop.example".encode() for i in (0, 4)}
    assert search_store(half.root, needles) == {k: [] for k in needles}


def test_purge_refuses_to_launder_a_tampered_file(store: MessageStore) -> None:
    _fill(store, 3)
    store.delete("person.0.id@laptop.example")
    path = store.log.files()[0].path
    table = pq.read_table(path)
    i = table.column_names.index("subject")
    table = table.set_column(i, "subject", pc.utf8_upper(table.column(i)))
    pq.write_table(table, path)  # rows changed behind mailledger's back, metadata kept
    seq = store.log.last_seq()
    with pytest.raises(LogIntegrityError, match=re.escape(path.name)):
        store.purge()
    assert store.log.last_seq() == seq and not store.purge_journal.exists()  # nothing began


def test_purge_rebuilds_the_projection_file_from_scratch(
    store: MessageStore, tmp_path: Path
) -> None:
    _fill(store, 3)
    store.delete("person.2.id@laptop.example")
    old = store.projector.db_path.stat().st_ino
    # a link keeps the old file's inode taken: ext4 could give it to the new file
    os.link(store.projector.db_path, tmp_path / "old-projections")
    store.purge()
    assert store.projector.db_path.stat().st_ino != old
    names = sorted(p.name for p in store.root.iterdir())
    # (the cursor snapshot and the full-text index are projections too: rewritten by
    # the rebuild; fence/ holds the commit protocol's writer epoch and cursors)
    assert names == [
        "blobs",
        "cursors.json",
        "fence",
        "fulltext.sqlite",
        "log",
        "projections.duckdb",
        "projections.duckdb.intent",  # (the lock a writer announces itself by)
        "store.json",
    ]


def test_compact_purge_on_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "s"
    with MessageStore.open(root) as s:
        _fill(s, 3)
    assert main(["--store", str(root), "delete", "<person.1.id@laptop.example>"]) == 0
    assert main(["--store", str(root), "compact", "--purge"]) == 0
    out = capsys.readouterr().out
    assert "purged: messages=1" in out and "blobs_erased=1" in out
    assert main(["--store", str(root), "compact", "--purge", "--json"]) == 0
    assert '"messages": 0' in capsys.readouterr().out

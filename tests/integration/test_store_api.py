"""The ``MessageStore`` API of SPEC §4, method by method, on a real store in tmp_path."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from email.message import EmailMessage
from pathlib import Path

import pyarrow as pa
import pytest
from freezegun import freeze_time

from pipeline.store import MessageStore
from stores.errors import NotFoundError, UsageError
from stores.events import MessageDeleted


class StepClock:
    def __init__(self) -> None:
        self.t = datetime(2026, 6, 30, 12, 0, tzinfo=UTC)

    def now(self) -> datetime:
        self.t += timedelta(seconds=1)
        return self.t


LIVE = (
    b"Message-ID: <Live.Wire@Example.ORG>\r\n"
    b'From: "Joe Bloggs" <JOE@Example.COM>\r\n'
    b"To: Ann <ann@example.com>, bob@example.com\r\n"
    b"Cc: Carol (work) <CAROL@Example.com>\r\n"
    b"Subject: Re: Live wire\r\n"
    b"Date: Fri, 26 Jun 2026 23:30:00 +0000\r\n"
    b"List-Id: Fedora devel <fedora-devel-list.redhat.com>\r\n"
    b"In-Reply-To: <parent@example.org>\r\n"
    b"References: <root@example.org> <parent@example.org>\r\n"
    b"\r\n"
    b"Hello Joe,  \r\n\r\nthe wire is live.\r\n"
)
LIVE_ID = "Live.Wire@Example.ORG"

OTHER = (
    b"Message-ID: <other@example.org>\n"
    b"From: ann@example.com\n"
    b"To: joe@example.com\n"
    b"Subject: Lunch\n"
    b"Date: Sat, 27 Jun 2026 09:00:00 +0200\n"
    b"\n"
    b"Noon?\n"
)

NO_ID = b"From: nobody@example.com\r\nSubject: who am I\r\n\r\nno Message-ID here\r\n"


@pytest.fixture
def store(tmp_path: Path):  # type: ignore[no-untyped-def]
    s = MessageStore.open(tmp_path / "store", clock=StepClock())
    yield s
    s.close()


@pytest.fixture
def filled(store: MessageStore) -> MessageStore:
    assert store.add("u-live", LIVE) == LIVE_ID
    assert store.add("u-other", OTHER) == "other@example.org"
    return store


# -- add / get / message / raw ------------------------------------------------------


def test_add_returns_the_normalized_message_id_keeping_its_case(store: MessageStore) -> None:
    assert store.add("u1", LIVE) == "Live.Wire@Example.ORG"
    assert store.message_ids() == ["Live.Wire@Example.ORG"]


@pytest.mark.parametrize("bad", ["", "a b@x", "a\tb@x", " a@x"])
def test_an_overriding_message_id_with_whitespace_is_refused_before_anything_is_written(
    store: MessageStore, bad: str
) -> None:
    with pytest.raises(UsageError, match="whitespace"):
        store.add("u1", LIVE, message_id=bad)
    assert store.stats()["events"] == 0


def test_get_returns_the_primary_record(filled: MessageStore) -> None:
    rec = filled.get(LIVE_ID)
    assert rec is not None
    assert rec["message_id"] == LIVE_ID
    assert (rec["source"], rec["folder"], rec["uidl"]) == ("api", "", "u-live")
    assert rec["size"] == len(LIVE)
    assert rec["sha256"] == hashlib.sha256(LIVE).hexdigest()
    assert rec["date_iso"] == "2026-06-26T23:30:00Z"
    assert rec["from_addr"] == "joe@example.com"
    assert rec["to_addrs"] == ["ann@example.com", "bob@example.com", "carol@example.com"]
    assert rec["in_reply_to"] == "parent@example.org"
    assert rec["references"] == ["root@example.org", "parent@example.org"]
    assert rec["list_id"] == "fedora-devel-list.redhat.com"
    assert rec["synthetic_id"] is False
    assert ("Subject", "Re: Live wire") in rec["headers"]
    assert rec["headers"][0] == ("Message-ID", "<Live.Wire@Example.ORG>")
    assert rec["indexed_at"] == datetime(2026, 6, 30, 12, 0, 2, tzinfo=UTC)


def test_get_accepts_angle_brackets_and_returns_none_for_unknown_ids(filled: MessageStore) -> None:
    assert filled.get(f"<{LIVE_ID}>") == filled.get(LIVE_ID)
    assert filled.get(f"  <{LIVE_ID}> ") == filled.get(LIVE_ID)
    assert filled.get("nobody@example.org") is None
    assert filled.get(LIVE_ID.lower()) is None  # Message-IDs keep their case


def test_indexed_at_is_the_time_of_the_event_from_the_clock(tmp_path: Path) -> None:
    with freeze_time("2026-11-30 07:15:00"):
        s = MessageStore.open(tmp_path / "store")  # the system clock, frozen
        mid = s.add("u1", LIVE)
    with freeze_time("2027-01-01"):
        s.add("u2", LIVE)  # a later sighting adds a location, not a new record
        rec = s.get(mid)
    s.close()
    assert rec is not None
    assert rec["indexed_at"] == datetime(2026, 11, 30, 7, 15, tzinfo=UTC)
    assert rec["uidl"] == "u1"


def test_get_of_a_message_without_message_id_returns_its_synthetic_record(
    store: MessageStore,
) -> None:
    sha = hashlib.sha256(NO_ID).hexdigest()
    mid = store.add("u1", NO_ID)
    assert mid == f"sha256-{sha[:40]}@synthetic.mailledger"
    rec = store.get(mid)
    assert rec is not None
    assert (rec["message_id"], rec["synthetic_id"], rec["sha256"]) == (mid, True, sha)
    assert store.add("u2", NO_ID) == mid  # the same bytes always get the same id
    assert store.message_ids() == [mid]
    assert store.raw(mid) == NO_ID


def test_raw_get_returns_the_exact_bytes_given(store: MessageStore) -> None:
    odd = (
        b"\xef\xbb\xbfMessage-ID: <odd@x>\n"
        b"Subject: =?utf-8?q?caf=C3=A9?=  \r\n"
        b"X-Latin: \xe9t\xe9\n\n"
        b"body with trailing blanks \t \r\n\x00\xff"
    )
    assert store.add("u1", odd) == "odd@x"
    assert store.add("u2", LIVE) == LIVE_ID
    assert store.raw("odd@x") == odd
    assert store.raw(f"<{LIVE_ID}>") == LIVE
    with pytest.raises(NotFoundError):
        store.raw("nobody@x")


def test_message_returns_an_email_message(filled: MessageStore) -> None:
    msg = filled.message(LIVE_ID)
    assert isinstance(msg, EmailMessage)
    assert msg["Subject"] == "Re: Live wire"
    assert msg["Message-ID"] == "<Live.Wire@Example.ORG>"
    assert "the wire is live." in msg.get_content()
    with pytest.raises(NotFoundError):
        filled.message("nobody@x")


# -- find -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value", ["Fwd: Re: Live Wire", "live wire", "RE: re:  LIVE\tWIRE ", "Re[2]: Live wire"]
)
def test_find_subject_uses_the_index_normalization(filled: MessageStore, value: str) -> None:
    assert filled.find("subject", value) == [LIVE_ID]


def test_find_subject_does_not_match_a_different_subject(filled: MessageStore) -> None:
    assert filled.find("subject", "live") == []
    assert filled.find("Subject:", "lunch") == ["other@example.org"]


@pytest.mark.parametrize("value", ["Joe <JOE@Example.COM>", "joe@example.com", "JOE@EXAMPLE.COM"])
def test_find_from_matches_the_addr_spec_only(filled: MessageStore, value: str) -> None:
    assert filled.find("from", value) == [LIVE_ID]


def test_find_to_also_finds_cc_addresses(filled: MessageStore) -> None:
    assert filled.find("to", "carol@example.com") == [LIVE_ID]  # it was a Cc
    assert filled.find("To", "Carol <Carol@Example.com>") == [LIVE_ID]
    assert filled.find("cc", "bob@example.com") == [LIVE_ID]  # Cc searches the same index
    assert filled.find("to", "joe@example.com") == ["other@example.org"]
    assert filled.find("to", "nobody@example.com") == []


def test_find_returns_ids_in_code_point_order(store: MessageStore) -> None:
    ids = ["zed@x", "Zed@x", "\u0105b@x", "\u00c4@x", "a\U0001f600@x", "abc@x", "A1@x"]
    for i, mid in enumerate(ids):
        raw = f"Message-ID: <{mid}>\nFrom: same@example.com\nSubject: s\n\n{i}\n".encode()
        store.add(f"u{i}", raw)
    assert store.find("from", "same@example.com") == sorted(ids)


def test_find_date_by_day_and_by_a_full_rfc2822_date(filled: MessageStore) -> None:
    assert filled.find("date", "2026-06-26") == [LIVE_ID]
    # 27 Jun 09:00 +0200 is 07:00 UTC on the 27th
    assert filled.find("date", "2026-06-27") == ["other@example.org"]
    # a full date is converted to its UTC day like an indexed one: 01:30 +0200 -> 26th UTC
    assert filled.find("date", "Sat, 27 Jun 2026 01:30:00 +0200") == [LIVE_ID]
    assert filled.find("date", "Fri, 26 Jun 2026 23:30:00 +0000") == [LIVE_ID]
    assert filled.find("date", "2026-06-28") == []
    assert filled.find("date", "not a date") == []


def test_a_missing_or_bad_date_is_indexed_as_nothing_never_1970(store: MessageStore) -> None:
    store.add("u1", b"Message-ID: <d1@x>\r\nDate: garbage\r\n\r\nx")
    store.add("u2", b"Message-ID: <d2@x>\r\n\r\nx")
    assert store.get("d1@x")["date_iso"] is None  # type: ignore[index]
    assert store.find("date", "1970-01-01") == []
    assert store.query("select * from header_index where header = 'date'").num_rows == 0


def test_find_list_id_from_the_phrase_form(filled: MessageStore) -> None:
    want = [LIVE_ID]
    assert filled.find("list-id", "Fedora devel <fedora-devel-list.redhat.com>") == want
    assert filled.find("List-Id", "<Fedora-Devel-List.redhat.com>") == want
    assert filled.find("list-id", "fedora-devel-list.redhat.com") == want


def test_find_message_id_with_or_without_brackets(filled: MessageStore) -> None:
    assert filled.find("message-id", "<Live.Wire@Example.ORG>") == [LIVE_ID]
    assert filled.find("message-id", "Live.Wire@Example.ORG") == [LIVE_ID]
    assert filled.find("Message-ID", " <Live.Wire@Example.ORG> (comment)") == [LIVE_ID]
    assert filled.find("message-id", "live.wire@example.org") == []


def test_find_in_reply_to_and_references(filled: MessageStore) -> None:
    assert filled.find("in-reply-to", "<parent@example.org>") == [LIVE_ID]
    assert filled.find("references", "root@example.org") == [LIVE_ID]
    assert filled.find("references", "<parent@example.org>") == [LIVE_ID]


@pytest.mark.parametrize("header", ["X-Mailer", "body", "", "Received"])
def test_find_on_an_unindexed_header_is_a_usage_error(filled: MessageStore, header: str) -> None:
    with pytest.raises(UsageError):
        filled.find(header, "anything")


def test_find_returns_several_matches_sorted(store: MessageStore) -> None:
    for i in (3, 1, 2):
        store.add(f"u{i}", f"Message-ID: <m{i}@x>\r\nSubject: Same\r\n\r\n{i}".encode())
    assert store.find("subject", "re: same") == ["m1@x", "m2@x", "m3@x"]


def _listed(store: MessageStore, header: str, value: str) -> str:
    return "".join(store.find_listing(header, value).to_pylist())


@pytest.mark.parametrize("index_max", [1000, 0], ids=["probed", "joined"])
def test_find_listing_prints_what_listing_of_find_prints(
    store: MessageStore, monkeypatch: pytest.MonkeyPatch, index_max: int
) -> None:
    """A line per hit in find's (code point) order, an undated one with ``-``;
    whether the hits are listed through the index or joined in one scan."""
    import projections.queries.messages

    monkeypatch.setattr(projections.queries.messages, "INDEX_KEYS_MAX", index_max)
    ids = ["zed@x", "Zed@x", "\u0105b@x", "a\U0001f600@x", "A1@x"]
    for i, mid in enumerate(ids):
        date = f"Date: Fri, 26 Jun 2026 0{i}:00:00 +0000\n" if i % 2 else ""
        raw = f"Message-ID: <{mid}>\nFrom: same@example.com\n{date}Subject: \u017c {i}\n\n.\n"
        store.add(f"u{i}", raw.encode())
    want = "".join(f"{line}\n" for line in store.listing(store.find("from", "same@example.com")))
    assert want.count("\t-\t") == 3  # (the undated ones)
    assert _listed(store, "from", "same@example.com") == want
    assert _listed(store, "From", "nobody@example.com") == ""
    assert _listed(store, "message-id", "<A1@x>") == "A1@x\t-\t\u017c 4\n"
    with pytest.raises(UsageError):
        store.find_listing("X-Mailer", "anything")


@pytest.mark.parametrize("index_max", [1000, 0], ids=["probed", "joined"])
def test_find_listing_leaves_out_another_key_of_the_same_hash(
    filled: MessageStore, monkeypatch: pytest.MonkeyPatch, index_max: int
) -> None:
    """A header_index row of another key with the key's hash (a collision: made by
    hand, no real pair of keys is known to collide) is not a hit of the key."""
    import projections.queries.messages
    from projections.fold import key_hash

    monkeypatch.setattr(projections.queries.messages, "INDEX_KEYS_MAX", index_max)
    with filled.session():
        con = filled.projector.writer()
        kh = key_hash(con, "subject", "lunch")
        con.execute(
            "INSERT INTO header_index_delta VALUES"
            " (?, 'subject', 'dinner', ?), (?, 'from', 'lunch', ?)",
            [kh, LIVE_ID, kh, LIVE_ID],
        )
    assert filled.find("subject", "Lunch") == ["other@example.org"]
    assert _listed(filled, "subject", "Lunch") == "other@example.org\t2026-06-27T07:00:00Z\tLunch\n"


def test_a_reader_whose_log_listing_is_stale_looks_again_before_blaming_the_log(
    filled: MessageStore, tmp_path: Path
) -> None:
    """The log's listing is kept while its directory's mtime stays; a file system
    whose attributes lag (NFS) can show an old mtime after another process
    committed and folded. The projections then look ahead of the log: the log is
    listed afresh before that is called damage."""
    import os
    import time

    log_dir = filled.root / "log"
    old = time.time() - 60
    os.utime(log_dir, (old, old))
    assert filled.find("subject", "lunch") == ["other@example.org"]  # (listed, kept)
    with MessageStore.open(filled.root) as other:
        other.add("u-3", b"Message-ID: <third@x>\r\nSubject: Lunch\r\n\r\nx")
    os.utime(log_dir, (old, old))  # (the attributes as a stale cache shows them)
    assert filled.find("subject", "lunch") == ["other@example.org", "third@x"]


@pytest.mark.parametrize("key", ["projection_version", "hash_probe"])
def test_projections_of_another_version_or_hash_are_rebuilt_before_a_read(
    filled: MessageStore, key: str
) -> None:
    """A reader reads the projections' own values in one query (``meta_values``);
    tables built by another version's rules, or by a DuckDB hashing keys another
    way, are still rebuilt before they answer."""
    import duckdb

    from projections.fold import applied_seq, hash_matches, meta_values, projection_version
    from projections.tables import PROJECTION_VERSION

    filled.close()
    con = duckdb.connect(str(filled.projector.db_path))
    con.execute("UPDATE meta SET value = value + 1 WHERE key = ?", [key])
    con.close()
    assert filled.find("subject", "lunch") == ["other@example.org"]
    with filled.session():
        con = filled.projector.reader()
        meta = meta_values(con)
        assert meta["projection_version"] == projection_version(con) == PROJECTION_VERSION
        assert hash_matches(con)
        assert meta["applied_seq"] == applied_seq(con) == filled.log.last_seq()
    assert meta_values(duckdb.connect()) == {}


# -- walk_thread ----------------------------------------------------------------------


def test_walk_thread_follows_replies(filled: MessageStore) -> None:
    reply = (
        b"Message-ID: <reply@x>\r\nIn-Reply-To: <Live.Wire@Example.ORG>\r\n"
        b"Date: Sun, 28 Jun 2026 10:00:00 +0000\r\n\r\nok"
    )
    filled.add("u-reply", reply)
    assert filled.walk_thread(f"<{LIVE_ID}>") == [LIVE_ID, "reply@x"]
    assert filled.walk_thread("root@example.org") == [LIVE_ID, "reply@x"]  # a ghost
    assert filled.walk_thread("other@example.org") == ["other@example.org"]
    with pytest.raises(NotFoundError):
        filled.walk_thread("nobody@x")


# -- delete ---------------------------------------------------------------------------


def test_delete_drops_the_message_from_every_read(filled: MessageStore) -> None:
    assert filled.delete(f"<{LIVE_ID}>", reason="handled") is True
    assert filled.get(LIVE_ID) is None
    assert filled.message_ids() == ["other@example.org"]
    assert filled.find("subject", "live wire") == []
    assert filled.find("message-id", LIVE_ID) == []
    with pytest.raises(NotFoundError):
        filled.raw(LIVE_ID)
    deletes = filled.query(
        "select message_id, actor, reason from events where type = 'message-deleted'"
    ).to_pylist()
    assert deletes == [{"message_id": LIVE_ID, "actor": "api", "reason": "handled"}]


def test_delete_of_an_absent_message_returns_false_and_records_nothing(
    filled: MessageStore,
) -> None:
    assert filled.delete("nobody@x") is False
    assert filled.delete(LIVE_ID) is True
    assert filled.delete(LIVE_ID) is False
    assert filled.query("select count(*) from events").column(0)[0].as_py() == 3


def test_a_deleted_message_added_again_comes_back(filled: MessageStore) -> None:
    filled.delete(LIVE_ID)
    assert filled.add("u-again", LIVE) == LIVE_ID
    rec = filled.get(LIVE_ID)
    assert rec is not None
    assert rec["uidl"] == "u-again"
    assert filled.find("subject", "live wire") == [LIVE_ID]


# -- contains_uidl / uidls / message_ids ------------------------------------------------


def test_contains_uidl_and_uidls_remember_every_uidl_ever_downloaded(
    filled: MessageStore,
) -> None:
    filled.add("u-dup", LIVE)  # the same message under another UIDL
    filled.add(None, b"Message-ID: <no-uidl@x>\r\n\r\nx")
    assert filled.contains_uidl("u-live")
    assert filled.contains_uidl("u-dup")
    assert not filled.contains_uidl("u-never")
    assert filled.uidls() == ["u-dup", "u-live", "u-other"]
    filled.delete(LIVE_ID)
    # a deleted message was still downloaded: a POP3 loop must not fetch it again
    assert filled.contains_uidl("u-live")
    assert filled.uidls() == ["u-dup", "u-live", "u-other"]


def test_message_ids_lists_stored_ids_sorted(store: MessageStore) -> None:
    assert store.message_ids() == []
    store.add("u1", OTHER)
    store.add("u2", LIVE)
    store.add("u3", LIVE)
    assert store.message_ids() == sorted([LIVE_ID, "other@example.org"])


# -- reindex / query ------------------------------------------------------------------


def test_reindex_rebuilds_the_same_answers(filled: MessageStore) -> None:
    filled.delete("other@example.org")
    filled.add("u-3", b"Message-ID: <third@x>\r\nIn-Reply-To: <Live.Wire@Example.ORG>\r\n\r\nx")
    before = (
        filled.message_ids(), filled.get(LIVE_ID), filled.uidls(),
        filled.walk_thread("third@x"), filled.find("to", "carol@example.com"),
    )  # fmt: skip
    assert filled.reindex() == 4
    after = (
        filled.message_ids(), filled.get(LIVE_ID), filled.uidls(),
        filled.walk_thread("third@x"), filled.find("to", "carol@example.com"),
    )  # fmt: skip
    assert after == before
    assert filled.verify() == []


def test_query_returns_arrow_over_the_projections_and_the_events_view(
    filled: MessageStore,
) -> None:
    t = filled.query("select message_id, subject from messages order by message_id")
    assert isinstance(t, pa.Table)
    assert t.to_pylist() == [
        {"message_id": LIVE_ID, "subject": "Re: Live wire"},
        {"message_id": "other@example.org", "subject": "Lunch"},
    ]
    t = filled.query("select seq, type from events order by seq")
    assert t.to_pylist() == [
        {"seq": 1, "type": "message-seen"},
        {"seq": 2, "type": "message-seen"},
    ]
    t = filled.query("select message_id from messages where from_addr = ?", ["ann@example.com"])
    assert t.column("message_id").to_pylist() == ["other@example.org"]
    for view in ("header_index", "thread_edges", "locations", "cursors"):
        assert isinstance(filled.query(f"select * from {view}"), pa.Table)


def test_query_works_on_an_empty_store(store: MessageStore) -> None:
    assert store.query("select count(*) as n from events").to_pylist() == [{"n": 0}]
    assert store.query("select count(*) as n from messages").to_pylist() == [{"n": 0}]


def test_a_reopened_store_reads_what_was_written(tmp_path: Path) -> None:
    s = MessageStore.open(tmp_path / "store", clock=StepClock())
    s.add("u1", LIVE)
    s.close()
    s = MessageStore.open(tmp_path / "store", create=False)
    assert s.message_ids() == [LIVE_ID]
    assert s.raw(LIVE_ID) == LIVE
    assert s.query("select count(*) as n from events").to_pylist() == [{"n": 1}]
    assert s.query(f"select message_id from thread('{LIVE_ID}')").num_rows == 1
    s.close()
    with pytest.raises(NotFoundError):
        MessageStore.open(tmp_path / "elsewhere", create=False)


_TRY_READ = """
import sys, duckdb
try:
    duckdb.connect(sys.argv[1], read_only=True).close()
except duckdb.IOException as exc:
    sys.exit(f"locked out: {exc}")
"""


def test_another_process_can_read_the_projections_while_a_writer_store_stays_open(
    store: MessageStore,
) -> None:
    store.add("u1", LIVE)  # the store object stays open, as in `sync --watch`
    done = subprocess.run(
        [sys.executable, "-c", _TRY_READ, str(store.projector.db_path)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr


_HOLD_READ = """
import sys, duckdb
con = duckdb.connect(sys.argv[1], read_only=True)
print("holding", flush=True)
sys.stdin.read()
"""


def test_a_catch_up_with_nothing_to_fold_does_not_wait_for_another_process_reading(
    store: MessageStore,
) -> None:
    """The end of every sync, an idle one too, asks the store to catch up. With
    nothing to fold it used to take the write hold anyway, and so wait for any
    other process reading the store (a `find`, a `stats`) to let go, up to 30 s."""
    store.add("u1", LIVE)
    assert store.get(LIVE_ID) is not None  # (the projections seen at the log's end)
    reader = subprocess.Popen(
        [sys.executable, "-c", _HOLD_READ, str(store.projector.db_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert reader.stdin is not None and reader.stdout is not None
    try:
        assert reader.stdout.readline().strip() == "holding"
        t0 = time.monotonic()
        assert store.catch_up() == store.log.last_seq() == 1
        assert time.monotonic() - t0 < 5
    finally:
        reader.stdin.close()
        reader.wait()


def test_a_catch_up_folds_what_another_store_committed_without_folding(
    store: MessageStore,
) -> None:
    store.add("u1", LIVE)
    assert store.get(LIVE_ID) is not None
    other = MessageStore.open(store.root)
    deleted = MessageDeleted(
        run_id="r", recorded_at=datetime(2026, 7, 1, tzinfo=UTC), message_id=LIVE_ID, actor="test"
    )
    other.commit([deleted], apply=False)  # (as a writer killed before its fold)
    assert store.catch_up() == store.log.last_seq() == 2
    assert store.get(LIVE_ID) is None


def test_a_read_whose_catch_up_fails_leaves_no_stale_hold_and_the_next_read_catches_up(
    store: MessageStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fold that fails while a read catches up (DuckDB out of memory at COMMIT,
    raised here: a real one needs a store far larger than a test) must not leave
    the writer held: the next read of the session used to get it back as it was
    and answer from projections that never saw the events (a message just added:
    not found)."""
    import duckdb

    import projections.projector as store_module

    assert store.add("u-live", LIVE) == LIVE_ID
    real, failures = store_module.apply_chunks, [2]

    def failing(con: duckdb.DuckDBPyConnection, chunks: object) -> int:
        if failures[0]:
            failures[0] -= 1
            raise duckdb.TransactionException("Failed to commit: could not allocate block")
        return real(con, chunks)  # type: ignore[arg-type]

    monkeypatch.setattr(store_module, "apply_chunks", failing)
    assert store.add("u-other", OTHER) == "other@example.org"  # (its fold: failure 1)
    with store.session():  # (a script's many lookups: the database stays held between them)
        with pytest.raises(duckdb.TransactionException):
            store.get("other@example.org")  # the read's catch-up: failure 2
        rec = store.get("other@example.org")
    assert rec is not None and rec["subject"] == "Lunch"


def test_known_records_names_the_owner_of_every_asked_id_it_holds(tmp_path: Path) -> None:
    """A record only for an id at its size; ``owners`` gets every held id's source."""
    raws = {
        mid: f"Message-ID: <{mid}>\nFrom: a@example.org\nSubject: {mid}\n\nbody\n".encode()
        for mid in ("a@x", "b@x")
    }
    with MessageStore.open(tmp_path / "store") as st:
        st.add("u1", raws["a@x"], source="one")
        st.add("u2", raws["b@x"], source="two")
        owners: dict[str, str] = {}
        pairs = [("a@x", len(raws["a@x"])), ("b@x", len(raws["b@x"]) + 1), ("c@x", 9)]
        known = st.known_records(pairs, owners=owners)
        assert list(known) == [("a@x", len(raws["a@x"]))]
        assert known[("a@x", len(raws["a@x"]))]["subject"] == "a@x"
        assert owners == {"a@x": "one", "b@x": "two"}
        assert st.known_records(pairs[1:]) == {}

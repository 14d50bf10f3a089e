"""Hostile and broken mail (the make-test slice of `torture/hostile.py`).

Property tests over `MessageStore.add` (any bytes, and header blocks built from
hostile pieces): it never raises, stores the exact bytes, and indexes only
what the parser gives. Then a 400-message slice of the generated corpus
through `mailledger import maildir`, and a small one through a real IMAP sync.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.parse import parse_message
from pipeline.store import MessageStore
from torture.hostile import (
    ADDRESSES,
    BAD_2047,
    CHARSET_LIES,
    DATES,
    MUTATORS,
    QUICK_TRIALS,
    SEED,
    Figures,
    expected_entries,
    generate,
    run_imap_slice,
    run_import,
    shape,
)

_HOSTILE_VALUES = [*ADDRESSES, *BAD_2047, *CHARSET_LIES, *DATES]
_NAMES = ["From", "To", "Cc", "Subject", "Date", "Message-ID", "In-Reply-To", "References",
          "List-Id", "Content-Type", "X-Junk"]  # fmt: skip


def _bytes_of(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")  # lone surrogates: invalid UTF-8 on purpose


_value = st.one_of(
    st.text(max_size=120).map(_bytes_of),
    st.binary(max_size=120),
    st.sampled_from(_HOSTILE_VALUES).map(lambda v: v[:3000]),
)
_name = st.one_of(st.sampled_from(_NAMES).map(str.encode), st.binary(min_size=0, max_size=12))
_header_block = st.lists(st.tuples(_name, _value), max_size=12)


@st.composite
def messages(draw: Any) -> bytes:
    """Arbitrary bytes, or a header block of hostile names and values."""
    if draw(st.integers(0, 4)) == 0:
        return bytes(draw(st.binary(max_size=3000)))
    eol = draw(st.sampled_from([b"\r\n", b"\n", b"\r"]))
    lines = [k + b": " + v for k, v in draw(_header_block)]
    return eol.join(lines) + eol + eol + bytes(draw(st.binary(max_size=500)))


@pytest.fixture(scope="module")
def shared_store() -> Iterator[MessageStore]:
    """One store for every example of a property (a store per example costs more
    than the property)."""
    with tempfile.TemporaryDirectory() as d:
        store = MessageStore.open(Path(d) / "store")
        yield store
        store.close()


def _entries_of(store: MessageStore, mid: str) -> set[tuple[str, str]]:
    rows = store.query(
        "SELECT header, value FROM header_index WHERE message_id = ?", [mid]
    ).to_pylist()
    return {(r["header"], r["value"]) for r in rows}


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(raw=messages())
def test_add_stores_any_bytes_and_indexes_only_what_the_parser_gives(
    shared_store: MessageStore, raw: bytes
) -> None:
    mid = shared_store.add(None, raw)
    parsed = parse_message(raw)
    assert mid == parsed.message_id
    assert shared_store.blobs.get(parsed.sha256) == raw
    [row] = shared_store.query(
        "SELECT sha256 FROM messages WHERE message_id = ?", [mid]
    ).to_pylist()
    entries = _entries_of(shared_store, mid)
    if row["sha256"] == parsed.sha256:  # (an id seen before keeps its first record)
        assert entries == expected_entries(parsed)
    assert [(h, v) for h, v in entries if shape(h, v)] == []
    assert not any(c in mid for c in "<> \t\r\n\x00")


@settings(max_examples=8, deadline=None)
@given(batch=st.lists(messages(), min_size=1, max_size=6))
def test_the_same_bytes_twice_add_nothing_and_verify_holds(batch: list[bytes]) -> None:
    with tempfile.TemporaryDirectory() as d:
        store = MessageStore.open(Path(d) / "store")
        with store.session():
            ids = [store.add("u", raw) for raw in batch]
            before = store.query("SELECT count(*) AS n FROM messages").to_pylist()[0]["n"]
            again = [store.add("u", raw) for raw in batch]
            after = store.query("SELECT count(*) AS n FROM messages").to_pylist()[0]["n"]
        assert again == ids and before == after == len(set(ids))
        assert store.verify() == []
        store.close()


def test_a_utf7_word_that_decodes_to_surrogates_is_stored_not_a_crash(
    store: MessageStore,
) -> None:
    raw = b"Subject: =?utf-7?q?+2ADYAA-?=\r\nMessage-ID: <u7@x>\r\n\r\nbody\r\n"
    assert store.add(None, raw) == "u7@x"
    rec = store.get("u7@x")
    assert rec is not None and rec["subject"] == "=?utf-7?q?+2ADYAA-?="
    assert "bad-encoding:Subject" in rec["defects"]


def test_addresses_with_a_blank_or_a_control_character_are_not_indexed(
    store: MessageStore,
) -> None:
    raw = (
        "From: a\u3000b@c.example\r\nTo: x\x00y@z.example, ok@z.example, p\u00a0q@z.example\r\n"
        "Message-ID: <addr@x>\r\n\r\n"
    ).encode()
    store.add(None, raw)
    rec = store.get("addr@x")
    assert rec is not None and rec["from_addr"] is None and rec["to_addrs"] == ["ok@z.example"]
    assert {"bad-address:From", "bad-address:To"} <= set(rec["defects"])
    assert store.find("to", "ok@z.example") == ["addr@x"]


def test_the_generator_is_repeatable_and_makes_every_kind_of_damage() -> None:
    first = [(g.name, g.raw) for g in generate(1500, SEED)]
    assert first == [(g.name, g.raw) for g in generate(1500, SEED)]
    tags = {t for g in generate(1500, SEED) for t in g.tags}
    assert set(MUTATORS) | {"no-headers", "refs-loop", "exact-dup", "clean"} <= tags


def test_a_generated_corpus_imports_with_every_message_stored_and_honest_indices(
    tmp_path: Path,
) -> None:
    figs = Figures()
    problems = run_import(tmp_path, QUICK_TRIALS, SEED, figs)
    assert problems == []
    assert figs.exit_code == 0 and figs.generated >= QUICK_TRIALS
    assert figs.stored == figs.generated and not figs.errors
    assert figs.loops > 0


def test_every_stored_message_id_fetches_its_own_message(store: MessageStore) -> None:
    mid = store.add(None, b"Message-ID: <a b, c;d@x>\r\n\r\nbody\r\n")
    assert mid == "ab,c;d@x"
    assert store.get(mid) is not None
    assert store.raw(mid).startswith(b"Message-ID")
    assert store.walk_thread(mid) == [mid]
    assert store.delete(mid) and store.get(mid) is None


def test_hostile_mail_synced_over_imap(dovecot: Any, imap_user: Any, tmp_path: Path) -> None:
    imap_user("fastmail")
    figs = Figures()
    assert run_imap_slice(dovecot, tmp_path, 60, SEED, figs) == []
    assert figs.imap["stored"] == figs.imap["uids"] == 60


def test_a_utf8_message_id_is_known_from_its_envelope(
    dovecot: Any, imap_user: Any, tmp_path: Path
) -> None:
    """The envelope's Message-ID is decoded as the parser decodes it: a message
    whose id holds UTF-8 is recognized in a second folder without its body."""
    from torture.network import SyncDriver

    user = imap_user("fastmail")
    raw = "From: a@x.example\r\nMessage-ID: <ünï-cödé@x.example>\r\n\r\nbody\r\n".encode()
    user.save("INBOX", raw)
    drv = SyncDriver(dovecot, tmp_path, dovecot.imap_port, folders=("INBOX", "Archive"))
    assert drv.sync("--apply").code == 0
    user.save("Archive", raw)
    mark = dovecot.log_mark()
    run = drv.sync("--apply")
    assert run.code == 0
    archive = run.folder(drv.account, "Archive")
    assert (archive["known"], archive["bodies"]) == (1, 0)
    # (the session of this run only: the first sync's may end after the mark)
    sessions = user.sessions_since(mark, 1)
    assert sessions and sum(s.body_count for s in sessions) == 0


def test_a_message_whose_id_only_the_server_finds_is_confirmed_without_its_body(
    dovecot: Any, imap_user: Any, tmp_path: Path
) -> None:
    """A line that is no header field ends the header for our parser (the message
    gets a synthetic id), while the server still reads the Message-ID below it.
    The idle check of known UIDs compared the two, never equal, and downloaded
    the body on every run that sampled it (the hostile slice's flaky
    'idle re-run: bodies downloaded')."""
    from torture.network import SyncDriver

    user = imap_user("fastmail")
    raw = (
        b"From: a@x.example\r\nJust a line without a colon\r\n"
        b"Message-ID: <only-the-server@x.example>\r\nSubject: s\r\n\r\nbody\r\n"
    )
    user.save("INBOX", raw)
    drv = SyncDriver(dovecot, tmp_path, dovecot.imap_port, folders=("INBOX",))
    assert drv.sync("--apply").code == 0
    mark = dovecot.log_mark()
    for _ in range(3):  # one UID held: every idle run samples it
        run = drv.sync("--apply")
        assert run.code == 0
        assert run.folder(drv.account, "INBOX")["bodies"] == 0
    # (the sessions of the three idle runs: the first sync's may end after the mark)
    idle = user.sessions_since(mark, 3)
    assert len(idle) == 3 and sum(s.body_count for s in idle) == 0

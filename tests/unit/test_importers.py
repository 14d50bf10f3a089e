"""Maildir and mbox importers: what is walked, what is stored, what a re-run adds."""

from __future__ import annotations

import email
import hashlib
import re
from email import policy
from pathlib import Path

import pytest

from pipeline.sources.maildir import import_maildir, iter_maildir
from pipeline.sources.mbox import import_mbox, iter_mbox
from pipeline.store import MessageStore
from stores.errors import UsageError


def _msg(mid: str | None, subject: str = "hello", extra: str = "") -> bytes:
    head = f"From: a@example.org\nTo: b@example.org\nSubject: {subject}\n"
    head += "Date: Wed, 26 Jun 2024 10:00:00 +0000\n"
    if mid:
        head += f"Message-ID: <{mid}>\n"
    return (head + extra + "\nbody of " + subject + "\n").encode()


def _put(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


@pytest.fixture
def maildir(tmp_path: Path) -> Path:
    root = tmp_path / "Maildir"
    _put(root / "cur" / "1.M1P1.host:2,S", _msg("one@x", "one"))
    _put(root / "new" / "2.M2P1.host", _msg("two@x", "two"))
    _put(root / "tmp" / "3.M3P1.host", _msg("partial@x", "being delivered"))
    _put(root / ".Archive" / "cur" / "4.M4P1.host:2,RS", _msg("four@x", "four"))
    _put(root / ".Archive" / "tmp" / "5.M5P1.host", _msg("five@x", "five"))
    _put(root / ".lists.dev" / "cur" / "6.M6P1.host:2,", _msg("six@x", "six"))
    _put(root / "loose" / "7.eml", _msg("seven@x", "loose file"))
    _put(root / ".Archive" / "dovecot-uidlist", b"3 V1 N5\n")
    _put(root / ".Archive" / "maildirfolder", b"")
    return root


def test_maildir_walk_takes_cur_new_and_loose_files_and_skips_tmp(maildir: Path) -> None:
    found = {(folder, unique) for folder, unique, _ in iter_maildir(maildir)}
    assert found == {
        ("INBOX", "1.M1P1.host"),
        ("INBOX", "2.M2P1.host"),
        ("Archive", "4.M4P1.host"),
        ("lists.dev", "6.M6P1.host"),
        ("loose", "7.eml"),
    }


def test_maildir_import_stores_every_message_with_its_folder(
    store: MessageStore, maildir: Path
) -> None:
    counts = import_maildir(store, maildir)
    assert counts.balanced
    assert (counts.uids_seen, counts.new_messages, counts.errors) == (5, 5, 0)
    assert store.message_ids() == ["four@x", "one@x", "seven@x", "six@x", "two@x"]
    rec = store.get("<four@x>")
    assert rec is not None and rec["folder"] == "Archive" and rec["uidl"] == "4.M4P1.host"
    assert store.raw("four@x") == (maildir / ".Archive/cur/4.M4P1.host:2,RS").read_bytes()


def test_reimport_adds_no_event_and_a_flag_change_is_not_a_new_location(
    store: MessageStore, maildir: Path
) -> None:
    import_maildir(store, maildir)
    events = store.log.last_seq()
    same = import_maildir(store, maildir)
    assert same.events == 0 and store.log.last_seq() == events
    (maildir / "cur" / "1.M1P1.host:2,S").rename(maildir / "cur" / "1.M1P1.host:2,RS")
    again = import_maildir(store, maildir)
    assert again.balanced
    assert again.duplicates == 5 and again.bodies_fetched == 0
    # one flags-changed event, no message-seen: the location is the same
    assert again.events == again.flags_changed == 1 and store.log.last_seq() == events + 1
    assert store.query(
        "select type, uidl, flags from events where seq = ?", [events + 1]
    ).to_pylist() == [
        {"type": "flags-changed", "uidl": "1.M1P1.host", "flags": ["\\Answered", "\\Seen"]}
    ]


def test_moved_message_costs_a_location_not_a_body(store: MessageStore, maildir: Path) -> None:
    import_maildir(store, maildir)
    (maildir / "cur" / "1.M1P1.host:2,S").rename(maildir / ".Archive" / "cur" / "1.M1P1.host:2,S")
    again = import_maildir(store, maildir)
    assert again.events == 1 and again.bodies_fetched == 0 and again.known_skipped == 5
    folders = (
        store.query("select folder from locations where message_id = 'one@x' order by folder")
        .column("folder")
        .to_pylist()
    )
    assert folders == ["Archive", "INBOX"]


def test_malformed_and_idless_messages_are_stored_and_counted(
    store: MessageStore, tmp_path: Path
) -> None:
    root = tmp_path / "md"
    _put(root / "cur" / "a:2,", b"\x00\xff garbage with no header block at all")
    _put(root / "cur" / "b:2,", _msg(None, "no id"))
    counts = import_maildir(store, root)
    assert counts.new_messages == 2 and counts.errors == 0 and counts.malformed >= 1
    ids = store.message_ids()
    assert len(ids) == 2 and all(i.endswith("@synthetic.mailledger") for i in ids)


def test_unreadable_file_is_an_error_with_its_name_not_a_silent_skip(
    store: MessageStore, tmp_path: Path
) -> None:
    root = tmp_path / "md"
    _put(root / "cur" / "ok:2,", _msg("ok@x"))
    (root / "cur" / "dangling:2,").symlink_to(tmp_path / "nowhere")
    counts = import_maildir(store, root)
    assert counts.errors == 1 and counts.balanced
    assert "dangling" in counts.error_details[0]
    assert store.message_ids() == ["ok@x"]


def test_mbox_import_streams_messages_with_exact_bytes(store: MessageStore, tmp_path: Path) -> None:
    one = _msg("m1@x", "first")
    two = _msg("m2@x", "second", extra="")
    mbox = tmp_path / "box.mbox"
    mbox.write_bytes(
        b"From a@example.org Wed Jun 26 10:00:00 2024\n" + one + b"\n"
        b"From b@example.org Wed Jun 26 11:00:00 2024\n" + two
    )
    assert [raw for _, raw in iter_mbox(mbox)] == [one, two]
    counts = import_mbox(store, mbox)
    assert counts.new_messages == 2 and counts.balanced
    assert store.raw("m1@x") == one
    assert import_mbox(store, mbox).events == 0


def test_mbox_that_is_not_an_mbox_is_a_usage_error(store: MessageStore, tmp_path: Path) -> None:
    bad = tmp_path / "notes.txt"
    bad.write_text("just some notes\n")
    with pytest.raises(UsageError):
        import_mbox(store, bad)


def _independent_id(raw: bytes) -> str:
    """The Message-ID as the stdlib's full parser sees it; content hash when absent."""
    msg = email.message_from_bytes(raw, policy=policy.compat32)
    value = str(msg.get("Message-ID") or "")
    m = re.search(r"<([^<>]+)>", value)
    if m:
        return re.sub(r"\s+", "", m.group(1))
    return "sha:" + hashlib.sha256(raw).hexdigest()


@pytest.mark.corpus
def test_notmuch_corpus_imports_whole_and_counts_distinct_message_ids(
    store: MessageStore, notmuch_corpus: Path
) -> None:
    files = [p for _, _, p in iter_maildir(notmuch_corpus)]
    assert len(files) > 300
    counts = import_maildir(store, notmuch_corpus)
    assert counts.errors == 0 and counts.balanced
    assert counts.uids_seen == len(files)
    distinct = {_independent_id(p.read_bytes()) for p in files}
    assert len(store.message_ids()) == len(distinct)
    assert store.verify() == []

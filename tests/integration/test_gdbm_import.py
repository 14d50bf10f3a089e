"""`mailledger import gdbm`: the legacy UIDL-keyed GDBM store, read for real.

The fixture files are real GDBM databases made by the test itself: with
``dbm.gnu`` where this Python has it, else with ``gdbm_load`` (Debian package
``gdbmtool``, installed by .ci/run) from a dump the test writes.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pipeline.cli import main
from pipeline.sources.gdbm import import_gdbm, iter_gdbm, legacy_bytes, synthetic_uidl_id
from pipeline.sources.maildir import import_maildir
from pipeline.store import MessageStore
from testkit.gdbm import have_gnu, make_gdbm


def as_old_program_stored(raw: bytes) -> bytes:
    """What the old program wrote: the mail decoded as latin-1 into a str, which
    dbm stores as UTF-8."""
    return raw.decode("latin-1").encode("utf-8")


# The originals: what the old program downloaded.
LATIN1 = (
    "From: =?iso-8859-1?q?Jos=E9?= <jose@legacy.example>\r\nTo: me@legacy.example\r\n"
    "Subject: =?iso-8859-1?q?Caf=E9_und_Stra=DFe?=\r\n"
    "Content-Type: text/plain; charset=iso-8859-1\r\n"
    "Message-ID: <latin1@legacy.example>\r\n\r\nCaf\xe9, Stra\xdfe, na\xefve.\r\n"
).encode("latin-1")
# A UTF-8 mail: the old program's latin-1 decoding turned ł (C5 82) into "Å\x82".
UTF8 = (
    "From: piotr@legacy.example\r\nTo: me@legacy.example\r\n"
    "Subject: =?utf-8?q?=C5=81=C3=B3d=C5=BA?=\r\n"
    "Content-Type: text/plain; charset=utf-8\r\n"
    "Message-ID: <utf8@legacy.example>\r\n\r\nZa\u017c\u00f3\u0142\u0107 g\u0119\u015bl\u0105"
    " ja\u017a\u0144, \u0142\u00f3d\u017a.\r\n"
).encode("utf-8")
BOM = b"\xef\xbb\xbfFrom: bom@legacy.example\r\nMessage-ID: <bom@legacy.example>\r\n\r\nbom\r\n"
# A str that began with U+FEFF (e.g. read with utf-8-sig): the BOM goes too.
BOM_CHAR = ("\ufeff" + LATIN1.decode("latin-1")).encode("utf-8").replace(b"<latin1@", b"<bomchar@")
NO_ID = b"From: noid@legacy.example\r\nSubject: no id here\r\n\r\nno message-id\r\n"


def _records() -> list[tuple[bytes, bytes]]:
    return [
        (b"UIDL-latin1", as_old_program_stored(LATIN1)),
        (b"UIDL-utf8", as_old_program_stored(UTF8)),
        (b"UIDL-bom", as_old_program_stored(BOM)),
        (b"UIDL-bom-char", BOM_CHAR),
        (b"UIDL-noid", as_old_program_stored(NO_ID)),
        # the same message under a second UIDL: one message, two locations
        (b"UIDL-latin1-again", as_old_program_stored(LATIN1)),
    ]


@pytest.fixture
def legacy(tmp_path: Path) -> Path:
    return make_gdbm(tmp_path / "email3.mail.gdbm", _records())


# -- reconstructing the bytes ------------------------------------------------------------


def test_legacy_bytes_undo_the_old_programs_latin1_str() -> None:
    assert legacy_bytes(as_old_program_stored(LATIN1)) == LATIN1
    assert legacy_bytes(as_old_program_stored(UTF8)) == UTF8  # ł comes back as C5 82
    assert legacy_bytes(as_old_program_stored(BOM)) == BOM[3:]
    assert legacy_bytes(b"\xef\xbb\xbfplain") == b"plain"  # a str starting with U+FEFF


def test_legacy_bytes_keep_what_no_latin1_str_can_have_made() -> None:
    # A character beyond U+00FF (ł is U+0142) cannot come from latin-1 decoding:
    # whoever wrote it stored UTF-8 text, and those bytes are the message.
    text = "Subject: \u0142\r\n\r\n\u0142\r\n".encode()
    assert legacy_bytes(text) == text
    # Not UTF-8 at all (raw bytes written by some other version): kept as they are.
    assert legacy_bytes(b"Subject: caf\xe9\r\n\r\n\xe9\r\n") == b"Subject: caf\xe9\r\n\r\n\xe9\r\n"


def test_a_synthetic_id_never_holds_whitespace_and_no_two_uidls_share_one() -> None:
    assert synthetic_uidl_id("UIDL-1") == "synthetic-uidl-UIDL-1@local"  # as the seed gives
    uidls = ["a b", "a%20b", "a\tb", "a\nb", "x-a b", "a  b"]
    ids = [synthetic_uidl_id(u) for u in uidls]
    assert not any(ch.isspace() for i in ids for ch in i)
    assert len(set(ids)) == len(uidls)


def test_the_fixture_is_a_real_gdbm_file_read_back_exactly(legacy: Path) -> None:
    assert legacy.read_bytes()[:4] != b"# GD"  # a database, not a dump
    assert sorted(iter_gdbm(legacy)) == sorted(_records())


# -- the import ----------------------------------------------------------------------------


def test_import_restores_bytes_ids_and_uidls(store: MessageStore, legacy: Path) -> None:
    counts = import_gdbm(store, legacy)
    assert counts.balanced and counts.errors == 0
    assert (counts.uids_seen, counts.new_messages, counts.duplicates) == (6, 5, 1)
    assert store.raw("latin1@legacy.example") == LATIN1
    assert store.raw("utf8@legacy.example") == UTF8
    assert store.raw("bom@legacy.example") == BOM[3:]
    assert store.raw("bomchar@legacy.example").startswith(b"From: =?iso")
    assert store.message("utf8@legacy.example").get_content().startswith("Zażółć gęślą")
    assert store.message("latin1@legacy.example").get_content().startswith("Café, Straße")

    rec = store.get("<synthetic-uidl-UIDL-noid@local>")
    assert rec is not None and rec["synthetic_id"] and rec["uidl"] == "UIDL-noid"
    assert store.raw("synthetic-uidl-UIDL-noid@local") == NO_ID
    both = ["bomchar@legacy.example", "latin1@legacy.example"]
    assert store.find("subject", "Café und Straße") == both
    assert store.find("subject", "RE: łódź") == ["utf8@legacy.example"]

    assert store.uidls() == sorted(k.decode() for k, _ in _records())
    assert store.contains_uidl("UIDL-latin1-again")
    src = store.query("select distinct source, folder from locations").to_pylist()
    assert src == [{"source": f"import:gdbm:{legacy.resolve()}", "folder": legacy.name}]


def test_import_twice_adds_nothing(store: MessageStore, legacy: Path) -> None:
    import_gdbm(store, legacy)
    events = store.log.last_seq()
    again = import_gdbm(store, legacy)
    assert again.balanced and again.events == 0 and again.new_messages == 0
    assert again.duplicates == 6
    assert store.log.last_seq() == events


def test_message_ids_already_stored_are_skipped_but_their_uidls_recorded(
    store: MessageStore, legacy: Path, tmp_path: Path
) -> None:
    md = tmp_path / "Maildir"
    for sub in ("cur", "new", "tmp"):
        (md / sub).mkdir(parents=True)
    (md / "cur" / "1.maildir:2,S").write_bytes(LATIN1)
    import_maildir(store, md)
    counts = import_gdbm(store, legacy)
    assert counts.conflicts_other_source == 2 and counts.new_messages == 4
    assert store.get("latin1@legacy.example")["source"].startswith("import:maildir:")
    assert store.contains_uidl("UIDL-latin1") and store.contains_uidl("UIDL-latin1-again")


def test_cli_import_gdbm(legacy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "cli-store"
    code = main(["--store", str(store), "import", "gdbm", str(legacy), "--json"], env={})
    out, _ = capsys.readouterr()
    assert code == 0 and json.loads(out)["new_messages"] == 5
    code = main(["--store", str(store), "import", "gdbm", str(legacy)], env={})
    out, _ = capsys.readouterr()
    assert code == 0 and "new=0 duplicates=6" in out and "events=0" in out


def test_not_a_gdbm_file_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if not have_gnu() and shutil.which("gdbm_dump") is None:
        pytest.skip("no GDBM reader here")
    bogus = tmp_path / "not.gdbm"
    bogus.write_bytes(b"From: x\r\n\r\nan mbox, perhaps\r\n")
    code = main(["--store", str(tmp_path / "s"), "import", "gdbm", str(bogus)], env={})
    _, err = capsys.readouterr()
    assert code == 2 and "not a readable GDBM file" in err


def test_without_any_gdbm_reader_the_error_names_the_remedy(
    legacy: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "dbm.gnu", None)  # import dbm.gnu -> ImportError
    real_which = shutil.which
    monkeypatch.setattr(
        shutil, "which", lambda name, *a, **k: None if name == "gdbm_dump" else real_which(name)
    )
    code = main(["--store", str(tmp_path / "s"), "import", "gdbm", str(legacy)], env={})
    _, err = capsys.readouterr()
    assert code == 2 and "apt-get install gdbmtool" in err


# -- after the migration, the POP3 loop skips the migrated UIDLs -------------------------


@pytest.mark.usefixtures("dovecot")
def test_pop3_sync_does_not_retr_migrated_uidls(
    imap_user: Callable[[str], Any],
    dovecot: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    user = imap_user("plain")
    originals = [
        (b"From: a@legacy.example\r\nMessage-ID: <pop-%d@legacy.example>\r\n\r\n"
         b"Gr\xfc\xdfe %d\r\n") % (i, i)
        for i in range(4)
    ]  # fmt: skip
    for raw in originals:
        user.save("INBOX", raw)
    mark = dovecot.log_mark()
    conn = user.pop3()
    try:
        _, lines, _ = conn.uidl()
    finally:
        conn.quit()
    user.sessions_since(mark, protocol="pop3")  # its logout line is in before the next mark
    uidls = [ln.split()[1] for ln in lines]
    # The old program stored three of them: two as the server sent them, one with
    # LF line endings (its own byte layout); the fourth arrived after the migration.
    records = [
        (uidls[0], as_old_program_stored(originals[0])),
        (uidls[1], as_old_program_stored(originals[1])),
        (uidls[2], as_old_program_stored(originals[2].replace(b"\r\n", b"\n"))),
    ]
    legacy = make_gdbm(tmp_path / "email3.mail.gdbm", records)
    store = tmp_path / "store"
    assert main(["--store", str(store), "import", "gdbm", str(legacy)], env={}) == 0
    config = tmp_path / "config.toml"
    config.write_text(dovecot.account_toml("plain", name="pop", type="pop3"))
    env = {**dovecot.password_env(), "HOME": str(tmp_path)}
    capsys.readouterr()

    mark = dovecot.log_mark()
    args = ["--store", str(store), "sync", "--apply", "--config", str(config), "--json"]
    code = main(args, env=env)
    report = json.loads(capsys.readouterr().out)
    inbox = report["accounts"]["pop"]["folders"]["INBOX"]
    assert code == 0 and (inbox["skipped"], inbox["bodies"]) == (3, 1)
    [s] = user.sessions_since(mark, protocol="pop3")
    assert s.retr_count == 1  # Dovecot's own count: only the message never migrated

    # delete_after = "stored": what this account fetched, and migrated messages whose
    # stored size is the listed one, are deleted; the one the old program kept with
    # other line endings is left on the server (its UIDL alone does not prove it).
    config.write_text(dovecot.account_toml("plain", name="pop", type="pop3", delete_after="stored"))
    mark = dovecot.log_mark()
    code = main(args, env=env)
    capsys.readouterr()
    [s] = user.sessions_since(mark, protocol="pop3")
    assert code == 0 and (s.retr_count, s["del_count"]) == (0, 3)
    conn = user.pop3()
    try:
        _, left, _ = conn.uidl()
    finally:
        conn.quit()
    assert [ln.split()[1] for ln in left] == [uidls[2]]

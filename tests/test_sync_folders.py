"""Which folders a sync takes, and where mail lives after the server moved it.

Issue 13, interoperability: a folder named by name is synced whatever its
SPECIAL-USE; a SPECIAL-USE entry that matches nothing is a folder error; the
locations under an old UIDVALIDITY or an old folder name are marked vanished.
Against a real Dovecot on loopback (tests/dovecot.py); the LIST failure through
the fault proxy.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_sync_imap import Env

from pipeline import imap
from pipeline.imap import FolderInfo

pytestmark = pytest.mark.usefixtures("dovecot")

_DEFAULT_EXCLUDE = ("\\Junk", "\\Trash", "\\Drafts")


def _msg(i: int, folder: str = "f") -> bytes:
    return (
        f"From: a{i}@folders.example\r\nTo: me@folders.example\r\nSubject: {folder} {i}\r\n"
        f"Date: Tue, 02 Jun 2026 10:00:00 +0000\r\n"
        f"Message-ID: <{folder}-{i}@folders.example>\r\n\r\nbody {i}\r\n"
    ).encode()


def _folders(report: dict[str, Any], account: str) -> dict[str, dict[str, Any]]:
    return report["accounts"][account]["folders"]  # type: ignore[no-any-return]


def _where(env: Env) -> list[tuple[str, int, int, str]]:
    """(folder, uidvalidity, uid, message_id) of every location still present."""
    with env.open() as s:
        rows = s.query(
            "SELECT folder, uidvalidity, uid, message_id FROM locations WHERE NOT vanished"
            " ORDER BY ALL"
        ).to_pylist()
    return [(r["folder"], r["uidvalidity"], r["uid"], r["message_id"]) for r in rows]


def _vanished(env: Env) -> list[tuple[str, int, int]]:
    with env.open() as s:
        rows = s.query(
            "SELECT folder, uidvalidity, uid FROM locations WHERE vanished ORDER BY ALL"
        ).to_pylist()
    return [(r["folder"], r["uidvalidity"], r["uid"]) for r in rows]


# -- folder selection ----------------------------------------------------------


def test_a_folder_named_by_name_is_synced_whatever_its_special_use(
    imap_user: Callable[[str], Any],
    dovecot: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    user = imap_user("fastmail")  # its Trash is \Trash, a default exclude
    env = Env(tmp_path, dovecot, {"fastmail": {"folders": ["Sent", "Trash"]}})
    user.save("Sent", _msg(1, "sent"))
    user.save("Trash", _msg(2, "trash"))
    code, report = env.sync("--apply", capsys=capsys)
    folders = _folders(report, "fastmail")
    assert code == 0, report
    assert sorted(folders) == ["Sent", "Trash"]
    assert (folders["Trash"]["new"], folders["Trash"]["bodies"]) == (1, 1)
    with env.open() as s:
        assert sorted(s.message_ids()) == ["sent-1@folders.example", "trash-2@folders.example"]


def test_the_default_scope_takes_every_folder_but_junk_trash_and_drafts(
    imap_user: Callable[[str], Any],
    dovecot: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """No ``folders`` key means ``*``: every selectable folder, less the default
    excludes; a folder named beside ``*`` is taken though its attribute is one."""
    user = imap_user("fastmail")
    for i, folder in enumerate(["INBOX", "Archive", "Sent", "Trash", "Spam", "Drafts"]):
        user.save(folder, _msg(i, folder.lower()))
    env = Env(tmp_path, dovecot, {"fastmail": {}})
    code, report = env.sync("--apply", capsys=capsys)
    assert code == 0, report
    assert sorted(_folders(report, "fastmail")) == ["Archive", "INBOX", "Sent"]

    (tmp_path / "named").mkdir()
    env = Env(tmp_path / "named", dovecot, {"fastmail": {"folders": ["*", "Trash"]}})
    code, report = env.sync("--apply", capsys=capsys)
    assert code == 0, report
    assert sorted(_folders(report, "fastmail")) == ["Archive", "INBOX", "Sent", "Trash"]


def test_selection_rules_on_a_listing() -> None:
    """Names beat attribute exclusions; a name in ``exclude`` beats everything."""
    listing = [
        FolderInfo("INBOX", frozenset(), "."),
        FolderInfo("INBOX.Sent", frozenset({"\\Sent"}), "."),
        FolderInfo("INBOX.Trash", frozenset({"\\Trash"}), "."),
        FolderInfo("INBOX.Junk", frozenset({"\\Junk"}), "."),
        FolderInfo("INBOX.Lists", frozenset({"\\Noselect"}), "."),
    ]

    def names(wanted: tuple[str, ...], exclude: tuple[str, ...] = _DEFAULT_EXCLUDE) -> list[str]:
        return [f.name for f in imap.select_folders(listing, wanted, exclude)]

    assert names(("INBOX.Sent", "INBOX.Trash")) == ["INBOX.Sent", "INBOX.Trash"]
    assert names(("*",)) == ["INBOX", "INBOX.Sent"]
    assert names(("*",), ()) == ["INBOX", "INBOX.Sent"]  # the defaults hold without a key
    assert names(("\\Trash",), ("\\Junk", "\\Drafts")) == ["INBOX.Trash"]
    assert names(("INBOX.Trash",), ("\\Trash",)) == ["INBOX.Trash"]
    assert names(("INBOX.Trash", "*"), ("INBOX.Trash",)) == ["INBOX", "INBOX.Sent"]
    assert names(("inbox",)) == ["INBOX"]
    assert imap.missing_attributes(listing, ("INBOX", "\\Sent", "\\Archive", "\\Junk")) == [
        "\\Archive"
    ]


def test_a_special_use_entry_matching_no_folder_is_a_folder_error(
    imap_user: Callable[[str], Any],
    dovecot: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    user = imap_user("gmail")  # has \Sent ([Gmail]/Wysłane), no \Archive
    env = Env(tmp_path, dovecot, {"gmail": {"folders": ["INBOX", "\\Sent", "\\Archive"]}})
    user.save("INBOX", _msg(1, "inbox"))
    user.save("[Gmail]/Wysłane", _msg(2, "sent"))
    code, report = env.sync("--apply", capsys=capsys)
    folders = _folders(report, "gmail")
    assert code == 1
    assert report["accounts"]["gmail"]["folder_errors"] == 1
    assert folders["\\Archive"]["mode"] == "missing"
    assert folders["\\Archive"]["error"] == "no folder has this SPECIAL-USE attribute"
    # the other folders still sync
    assert folders["INBOX"]["bodies"] == 1 and folders["[Gmail]/Wysłane"]["bodies"] == 1
    with env.open() as s:
        assert len(s.message_ids()) == 2

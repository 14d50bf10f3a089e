"""Which folders a sync takes, and where mail lives after the server moved it.

Issue 13, interoperability: a folder named by name is synced whatever its
SPECIAL-USE; a SPECIAL-USE entry that matches nothing is a folder error; the
locations under an old UIDVALIDITY or an old folder name are marked vanished.
Against a real Dovecot on loopback (testkit/dovecot.py); the LIST failure through
the fault proxy.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pipeline.parse import parse_message
from pipeline.sources import imap
from pipeline.sources.imap import FolderInfo
from pipeline.store import MessageStore
from stores.events import CursorMoved, Event, LocationVanished
from testkit.cli import SyncEnv
from testkit.faultproxy import Fault, FaultProxy

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


def _where(env: SyncEnv) -> list[tuple[str, int, int, str]]:
    """(folder, uidvalidity, uid, message_id) of every location still present."""
    with env.open() as s:
        rows = s.query(
            "SELECT folder, uidvalidity, uid, message_id FROM locations WHERE NOT vanished"
            " ORDER BY ALL"
        ).to_pylist()
    return [(r["folder"], r["uidvalidity"], r["uid"], r["message_id"]) for r in rows]


def _vanished(env: SyncEnv) -> list[tuple[str, int, int]]:
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
    env = SyncEnv(tmp_path, dovecot, {"fastmail": {"folders": ["Sent", "Trash"]}})
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
    env = SyncEnv(tmp_path, dovecot, {"fastmail": {}})
    code, report = env.sync("--apply", capsys=capsys)
    assert code == 0, report
    assert sorted(_folders(report, "fastmail")) == ["Archive", "INBOX", "Sent"]

    (tmp_path / "named").mkdir()
    env = SyncEnv(tmp_path / "named", dovecot, {"fastmail": {"folders": ["*", "Trash"]}})
    code, report = env.sync("--apply", capsys=capsys)
    assert code == 0, report
    assert sorted(_folders(report, "fastmail")) == ["Archive", "INBOX", "Sent", "Trash"]


def test_selection_rules_on_a_listing() -> None:
    """Names beat attribute exclusions; a name in ``exclude`` beats everything."""
    listing = [
        FolderInfo("INBOX", frozenset()),
        FolderInfo("INBOX.Sent", frozenset({"\\Sent"})),
        FolderInfo("INBOX.Trash", frozenset({"\\Trash"})),
        FolderInfo("INBOX.Junk", frozenset({"\\Junk"})),
        FolderInfo("INBOX.Lists", frozenset({"\\Noselect"})),
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
    env = SyncEnv(tmp_path, dovecot, {"gmail": {"folders": ["INBOX", "\\Sent", "\\Archive"]}})
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


# -- where mail lives after the server moved it --------------------------------


@pytest.mark.parametrize("how", ["renumbered", "same-uids"])
def test_a_uidvalidity_change_marks_the_old_locations_vanished(
    imap_user: Callable[[str], Any],
    dovecot: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    how: str,
) -> None:
    """The sync that sees the change marks them: the old UIDs name nothing now."""
    user = imap_user("fastmail")
    env = SyncEnv(tmp_path, dovecot, {"fastmail": {"folders": ["INBOX", "\\Archive"]}})
    for i in range(4):
        user.save("INBOX", _msg(i, "inbox"))
    user.save("Archive", _msg(9, "archive"))
    user.expunge("INBOX", 2)  # the server's UIDs 1, 3, 4
    env.sync("--apply", capsys=capsys)
    old = user.status("INBOX")["uidvalidity"]
    archive_uv = user.status("Archive")["uidvalidity"]
    if how == "renumbered":
        new = env.dv.lose_state("fastmail", "INBOX")  # UIDs 1, 2, 3
    else:
        new = old + 1000
        env.dv.set_uidvalidity("fastmail", "INBOX", new)  # UIDs 1, 3, 4
    code, report = env.sync("--apply", capsys=capsys)
    inbox = _folders(report, "fastmail")["INBOX"]
    assert code == 3 and inbox["vanished"] == 3 and inbox["bodies"] == 0
    present = _where(env)
    assert {(f, uv) for f, uv, _, _ in present} == {("INBOX", new), ("Archive", archive_uv)}
    assert sorted(uid for f, _, uid, _ in present if f == "INBOX") == user.uids("INBOX")
    assert _vanished(env) == [("INBOX", old, 1), ("INBOX", old, 3), ("INBOX", old, 4)]
    with env.open() as s:
        assert len(s.message_ids()) == 4  # the archive keeps the mail
        events = s.log.read(columns=["type", "folder", "uidvalidity", "reason"]).to_pylist()
    gone = [e for e in events if e["type"] == "location-vanished"]
    assert len(gone) == 3 and all(e["uidvalidity"] == old for e in gone)
    assert all("UIDVALIDITY" in e["reason"] for e in gone)
    code, report = env.sync("--apply", "--reconcile", capsys=capsys)
    assert code == 0 and _folders(report, "fastmail")["INBOX"]["vanished"] == 0


def _projects(user: Any) -> None:
    with user.imap() as c:
        c.create_folder("Projects")
    for i in range(3):
        user.save("Projects", _msg(i, "projects"))


def _rename(user: Any, old: str, new: str) -> None:
    with user.imap() as c:
        c.rename_folder(old, new)


def test_reconcile_marks_a_renamed_folders_old_locations_vanished(
    imap_user: Callable[[str], Any],
    dovecot: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    user = imap_user("fastmail")
    _projects(user)
    user.save("INBOX", _msg(1, "inbox"))
    env = SyncEnv(tmp_path, dovecot, {"fastmail": {}})  # every folder
    code, report = env.sync("--apply", capsys=capsys)
    assert code == 0 and _folders(report, "fastmail")["Projects"]["bodies"] == 3
    _rename(user, "Projects", "Projects 2025")

    code, report = env.sync("--apply", capsys=capsys)  # a plain sync leaves them be
    assert code == 0 and _folders(report, "fastmail")["Projects 2025"]["known"] == 3
    code, report = env.sync("--apply", "--reconcile", capsys=capsys)
    folders = _folders(report, "fastmail")
    assert code == 0, report
    assert (folders["Projects"]["mode"], folders["Projects"]["vanished"]) == ("gone", 3)
    present = _where(env)
    assert sorted({f for f, _, _, _ in present}) == ["INBOX", "Projects 2025"]
    assert [(f, uid) for f, _, uid in _vanished(env)] == [
        ("Projects", 1),
        ("Projects", 2),
        ("Projects", 3),
    ]
    with env.open() as s:
        assert len(s.message_ids()) == 4

    code, report = env.sync("--apply", "--reconcile", capsys=capsys)
    assert code == 0 and "Projects" not in _folders(report, "fastmail")  # said once


def test_reconcile_marks_a_named_folder_gone_from_the_server_and_says_so(
    imap_user: Callable[[str], Any],
    dovecot: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    user = imap_user("fastmail")
    _projects(user)
    env = SyncEnv(tmp_path, dovecot, {"fastmail": {"folders": ["INBOX", "Projects"]}})
    env.sync("--apply", capsys=capsys)
    with user.imap() as c:
        c.delete_folder("Projects")
    code, report = env.sync("--apply", "--reconcile", capsys=capsys)
    projects = _folders(report, "fastmail")["Projects"]
    assert code == 1  # a missing named folder stays an error
    assert (projects["mode"], projects["vanished"]) == ("missing", 3)
    assert _where(env) == []
    with env.open() as s:
        assert len(s.message_ids()) == 3


def test_a_dry_run_reconcile_counts_a_gone_folder_and_writes_nothing(
    imap_user: Callable[[str], Any],
    dovecot: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    user = imap_user("fastmail")
    _projects(user)
    env = SyncEnv(tmp_path, dovecot, {"fastmail": {}})
    env.sync("--apply", capsys=capsys)
    _rename(user, "Projects", "Old projects")
    code, report = env.sync("--reconcile", capsys=capsys)
    assert code == 0 and _folders(report, "fastmail")["Projects"]["vanished"] == 3
    assert _vanished(env) == []


def test_a_failed_list_never_marks_a_folder_gone(
    imap_user: Callable[[str], Any],
    dovecot: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    user = imap_user("fastmail")
    _projects(user)
    with FaultProxy(("127.0.0.1", dovecot.imap_port)) as proxy:
        env = SyncEnv(tmp_path, dovecot, {"fastmail": {"port": proxy.port}})
        env.sync("--apply", capsys=capsys)
        _rename(user, "Projects", "Elsewhere")
        proxy.schedule([Fault("drop", conn=None, on_command="LIST")])
        code, report = env.sync("--apply", "--reconcile", capsys=capsys)
        assert code == 1 and report["accounts"]["fastmail"]["error"]
        assert _vanished(env) == []


def test_a_list_without_inbox_is_not_taken_for_every_folder_gone() -> None:
    listing = [FolderInfo("Archive", frozenset({"\\Archive"}))]
    assert imap.gone_folders(listing, ["INBOX", "Projects"]) == []
    listing.append(FolderInfo("inbox", frozenset()))
    assert imap.gone_folders(listing, ["INBOX", "Projects", "Archive"]) == ["Projects"]


def test_locations_in_reads_a_folders_rows_alike_by_probe_and_by_one_pass(
    store: MessageStore,
) -> None:
    """``locations_in`` probes a few UIDs and reads many in one pass; both give
    the rows of that folder and UIDVALIDITY only, vanished ones included."""
    parsed = parse_message(_msg(0, "loc"))
    events: list[Event] = []
    for folder, uv, n in [("A", 7, 1500), ("A", 8, 20), ("B", 7, 30)]:
        for uid in range(1, n + 1):
            p = dataclasses.replace(parsed, message_id=f"{folder}-{uv}-{uid}@loc")
            events.append(
                store.events.seen(p, source="acct", folder=folder, uidvalidity=uv, uid=uid)
            )
    events.append(store.events.seen(parsed, source="other", folder="A", uidvalidity=7, uid=1))
    events.append(
        LocationVanished(
            run_id=store.run_id,
            recorded_at=store.clock.now(),
            source="acct",
            folder="A",
            uidvalidity=7,
            uid=3,
            message_id="A-7-3@loc",
        )
    )
    store.commit(events)

    def keys(rows: list[dict[str, Any]]) -> list[tuple[str, int, int, bool]]:
        return sorted((r["folder"], r["uidvalidity"], r["uid"], r["vanished"]) for r in rows)

    probed = keys(store.locations_in("acct", [("A", 7, 40), ("B", 7, 10)]))
    assert probed == [("A", 7, u, u == 3) for u in range(1, 41)] + [
        ("B", 7, u, False) for u in range(1, 11)
    ]
    whole = keys(store.locations_in("acct", [("A", 7, 1500)]))  # past INDEX_KEYS_MAX
    assert whole == [("A", 7, u, u == 3) for u in range(1, 1501)]
    assert keys(store.locations_in("acct", [("A", 8, None)])) == [
        ("A", 8, u, False) for u in range(1, 21)
    ]
    store.commit(
        [
            CursorMoved(
                run_id=store.run_id,
                recorded_at=store.clock.now(),
                source=source,
                folder=folder,
                uidvalidity=7,
                cursor_from=None,
                cursor_to=top,
                uidnext=top + 1,
                mode="full",
                reason="test",
            )
            for source, folder, top in [("acct", "B", 30), ("acct", "A", 1500), ("other", "A", 1)]
        ]
    )
    assert [
        (c["folder"], c["uidvalidity"], c["last_uid"]) for c in store.folder_cursors("acct")
    ] == [
        ("A", 7, 1500),
        ("B", 7, 30),
    ]


def test_a_sync_into_a_large_store_folds_less_often() -> None:
    """Every 5,000 events, or every hundredth of the store's events (a fold's cost
    there follows the store), at most 20,000; a store set to fold more often keeps it."""
    from pipeline.sync.accounts import sync_fold_every

    assert sync_fold_every(10_000, 0) == 5_000
    assert sync_fold_every(10_000, 100_000) == 5_000
    assert sync_fold_every(10_000, 1_000_000) == 10_000
    assert sync_fold_every(10_000, 10_000_000) == 20_000
    assert sync_fold_every(2, 1_000_000) == 2

"""``mailledger import files DIR``: any tree of one-message files (a notmuch root
that is not Maildir, MH folders, a folder of saved ``.eml``) imports as ``notmuch
new`` walks its root, with the counts, ``not_mail`` reporting and idempotence of
the other imports. Real files in ``tmp_path``, the notmuch corpus read in place, the
command line as people run it.
"""

from __future__ import annotations

import email
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pipeline.cli import main
from testkit.corpus import generate_messages
from tests.conftest import stderr_on_a_terminal

MAILLEDGER = [sys.executable, "-m", "pipeline"]


def _import(store: Path, tree: Path, *extra: str) -> dict[str, Any]:
    """``import files TREE --json`` in its own process (a pipe or a device in the tree
    must never hang it: the deadline is the guard); its counts."""
    done = subprocess.run(
        [*MAILLEDGER, "--store", str(store), "import", "files", str(tree), "--json", *extra],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    counts: dict[str, Any] = json.loads(done.stdout)
    assert counts["balanced"] and counts["errors"] == 0
    return counts


def _query(capsys: pytest.CaptureFixture[str], store: Path, sql: str) -> list[dict[str, Any]]:
    code = main(["--store", str(store), "query", sql, "--json"], env={})
    out, err = capsys.readouterr()
    assert code == 0, err
    rows: list[dict[str, Any]] = json.loads(out)
    return rows


def _locations(capsys: pytest.CaptureFixture[str], store: Path) -> set[tuple[str, str, str]]:
    """(folder, uidl, message_id) of every location on record."""
    rows = _query(capsys, store, "select folder, uidl, message_id from locations")
    return {(r["folder"], r["uidl"], r["message_id"]) for r in rows}


def _mail() -> Iterator[tuple[str, bytes]]:
    """Generated messages (their Message-ID, their bytes), each distinct."""
    for _, raw in generate_messages(40, seed=35):
        yield str(email.message_from_bytes(raw)["Message-ID"]).strip().strip("<>"), raw


def _put(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def _regular_files(root: Path) -> list[Path]:
    return [Path(d, f) for d, _, files in os.walk(root) for f in files]


@pytest.mark.corpus
def test_a_notmuch_root_imports_in_place_every_file_one_message_and_a_rerun_stores_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], notmuch_corpus: Path
) -> None:
    files = _regular_files(notmuch_corpus)
    store = tmp_path / "store"
    first = _import(store, notmuch_corpus)
    assert first["uids_seen"] == len(files) and first["not_mail"] == 0
    assert first["events"] == len(files)  # one location per file
    shas = {r["sha256"] for r in _query(capsys, store, "select sha256 from locations")}
    assert shas == {hashlib.sha256(p.read_bytes()).hexdigest() for p in files}
    folders = {
        r["folder"]: r["n"]
        for r in _query(capsys, store, "select folder, count(*) n from locations group by 1")
    }
    # a flat folder, and a Maildir's cur/ counted as its parent's mail
    assert folders["broken/loop"] == len(list((notmuch_corpus / "broken/loop").iterdir()))
    assert folders["lkml"] == len(list((notmuch_corpus / "lkml/cur").iterdir()))

    again = _import(store, notmuch_corpus)
    assert (again["uids_seen"], again["events"], again["new_messages"]) == (len(files), 0, 0)
    assert again["bodies_fetched"] == 0 and again["duplicates"] == len(files)


def test_a_notmuch_root_leaves_out_its_database_hidden_directories_and_tmp(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mail = list(_mail())
    root = tmp_path / "mail"
    kept = {
        _put(root / "1", mail[0][1]): (".", "1", mail[0][0]),
        _put(root / "lists" / "dev" / "42", mail[1][1]): ("lists/dev", "42", mail[1][0]),
        # a Maildir below the root: its cur/ and new/ are its mail, without the flags
        _put(root / "box" / "cur" / "7.M1P1.h:2,RS", mail[2][1]): ("box", "7.M1P1.h", mail[2][0]),
        _put(root / "box" / "new" / "8.M2P1.h", mail[3][1]): ("box", "8.M2P1.h", mail[3][0]),
    }
    left_out = [
        _put(root / ".notmuch" / "xapian" / "iamglass", b"\x00glass"),
        _put(root / ".notmuch" / "xapian" / "postlist.glass", b"\x00\x01"),
        _put(root / ".notmuch" / "xapian" / "flintlock", b""),
        _put(root / "mu" / "xapian" / "termlist.glass", b"\x00\x02"),
        # a Xapian database under any name: its version file gives it away
        _put(root / "index" / "iamchert", b"\x00chert"),
        _put(root / "index" / "record.DB", mail[4][1]),
        _put(root / ".archive" / "9", mail[5][1]),  # a hidden directory
        _put(root / "box" / "tmp" / "10.M3P1.h", mail[6][1]),  # a delivery in progress
    ]
    store = tmp_path / "store"
    counts = _import(store, root)
    assert (counts["uids_seen"], counts["new_messages"], counts["not_mail"]) == (4, 4, 0)
    assert _locations(capsys, store) == set(kept.values())
    assert all(p.exists() for p in left_out)

    # the delivery moves new/ to cur/ with a flag: the same location
    (root / "box" / "new" / "8.M2P1.h").rename(root / "box" / "cur" / "8.M2P1.h:2,S")
    moved = _import(store, root)
    assert (moved["events"], moved["new_messages"], moved["bodies_fetched"]) == (0, 0, 0)

    # a message moved to another folder: a new location of content held, no second blob
    blobs = len(_regular_files(store / "blobs"))
    (root / "1").rename(root / "lists" / "dev" / "1")
    moved = _import(store, root)
    assert (moved["events"], moved["new_messages"], moved["bodies_fetched"]) == (1, 0, 0)
    assert len(_regular_files(store / "blobs")) == blobs
    assert ("lists/dev", "1", mail[0][0]) in _locations(capsys, store)


def test_an_mh_folder_imports_its_numbered_messages_and_names_its_bookkeeping(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mail = list(_mail())
    root = tmp_path / "Mail"
    for n in range(1, 6):
        _put(root / "inbox" / str(n), mail[n][1])
    _put(root / "work" / "projects" / "1", mail[6][1])
    bookkeeping = [
        _put(root / "context", b"Current-Folder: inbox\n"),  # nmh: it looks like a header
        _put(root / "inbox" / ".mh_sequences", b"unseen: 3-5\ncur: 2\n"),
        _put(root / "work" / "projects" / ".mh_sequences", b"cur: 1\n"),
        _put(root / "inbox" / ".xmhcache", b"1 2 3\n"),
    ]
    store = tmp_path / "store"
    code = main(["--store", str(store), "import", "files", str(root)], env={})
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out.startswith(f"import files {root}: seen=6 new=6 ")
    assert out.rstrip().endswith(f"not_mail={len(bookkeeping)}")
    expected = {("inbox", str(n), mail[n][0]) for n in range(1, 6)}
    expected.add(("work/projects", "1", mail[6][0]))
    assert _locations(capsys, store) == expected

    again = _import(store, root)
    assert {f["path"]: f["reason"] for f in again["not_mail_files"]} == {
        str(p): "MH bookkeeping" for p in bookkeeping
    }
    assert (again["uids_seen"], again["events"], again["new_messages"]) == (6, 0, 0)


def test_a_folder_of_eml_files_stores_the_mail_names_the_rest_and_never_leaves_the_tree(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mail = list(_mail())
    root = tmp_path / "saved"
    outside = _put(tmp_path / "elsewhere" / "secret.eml", mail[9][1])
    for n in range(1, 4):
        _put(root / f"message-{n}.eml", mail[n][1])
    (root / "linked.eml").symlink_to(root / "message-1.eml")  # inside: read, a duplicate
    (root / "again").symlink_to(root)  # a loop, never followed
    not_mail = {
        _put(root / "photo.png", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"): "binary, no header lines",
        _put(root / "empty.eml", b""): "empty file",
        root / "queue": "not a regular file",
        root / "stolen.eml": "symlink out of the tree",
        root / "zero.eml": "symlink out of the tree",
        root / "elsewhere": "symlink out of the tree",
    }
    os.mkfifo(root / "queue")
    (root / "stolen.eml").symlink_to(outside)
    (root / "zero.eml").symlink_to("/dev/zero")
    (root / "elsewhere").symlink_to(outside.parent)
    store = tmp_path / "store"
    counts = _import(store, root)
    assert {f["path"]: f["reason"] for f in counts["not_mail_files"]} == {
        str(p): why for p, why in not_mail.items()
    }
    assert (counts["uids_seen"], counts["new_messages"], counts["duplicates"]) == (4, 3, 1)
    assert {mid for _, _, mid in _locations(capsys, store)} == {mail[n][0] for n in range(1, 4)}

    again = _import(store, root)
    assert (again["uids_seen"], again["events"], again["new_messages"]) == (4, 0, 0)
    assert again["not_mail"] == len(not_mail)


def test_import_files_of_what_is_not_a_directory_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    single = _put(tmp_path / "one.eml", next(_mail())[1])
    store = tmp_path / "store"
    for path in (single, tmp_path / "no-such-dir"):
        code = main(["--store", str(store), "import", "files", str(path)], env={})
        out, err = capsys.readouterr()
        assert code == 2
        assert f"{path}: not a directory" in err and out == ""
    assert not store.exists()  # refused before anything was made


def test_a_directory_that_cannot_be_listed_is_an_error_of_the_run_never_silence(
    tmp_path: Path,
) -> None:
    # a tree deeper than PATH_MAX: its last directories cannot be listed by path (the
    # fault a real file system gives anyone, root too, unlike a chmod)
    mail = list(_mail())
    root = tmp_path / "deep"
    _put(root / "1.eml", mail[0][1])
    fd = os.open(root, os.O_RDONLY)
    for _ in range(20):  # 20 x 251 bytes > 4096
        os.mkdir("d" * 250, dir_fd=fd)
        fd, up = os.open("d" * 250, os.O_RDONLY, dir_fd=fd), fd
        os.close(up)
    out = os.open("2.eml", os.O_WRONLY | os.O_CREAT, dir_fd=fd)
    os.write(out, mail[1][1])
    os.close(out)
    os.close(fd)
    done = subprocess.run(
        [*MAILLEDGER, "--store", str(tmp_path / "store"), "import", "files", str(root), "--json"],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    counts = json.loads(done.stdout)
    assert counts["balanced"] and (counts["new_messages"], counts["errors"]) == (1, 1)
    [detail] = counts["error_details"]
    assert detail.startswith(str(root / ("d" * 250))) and "directory not read" in detail


def test_import_files_shows_its_progress_on_a_terminal(tmp_path: Path) -> None:
    root = tmp_path / "saved"
    for n, (_, raw) in enumerate(_mail()):
        _put(root / f"{n}.eml", raw)
    code, seen = stderr_on_a_terminal(
        [*MAILLEDGER, "--store", str(tmp_path / "s"), "import", "files", str(root),
         "--workers", "0"]
    )  # fmt: skip
    assert code == 0 and b"import files" in seen and b"/40" in seen  # done/total

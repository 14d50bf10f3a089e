"""Flags people curate: read from Maildir file names on import, recorded as events
(a change is a ``flags-changed``, never a new location), searched as ``is:``/``flag:``,
known to ``--as-of``, written back on a Maildir export; real stores in tmp_path,
the commands as a user runs them."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.cli import main
from pipeline.store import MessageStore
from stores.digest import table_digest
from stores.log.files import DIGEST_KEY
from tests.conftest import StepClock


def run(capsys: pytest.CaptureFixture[str], store: Path, *argv: str) -> tuple[int, str, str]:
    code = main(["--store", str(store), *argv], env={})
    out, err = capsys.readouterr()
    return code, out, err


def _mail(n: str) -> bytes:
    return (
        f"Message-ID: <{n}@example.org>\nFrom: ada@example.org\nTo: bob@example.org\n"
        f"Subject: message {n}\nDate: Mon, 1 Jul 2024 10:0{len(n)}:00 +0000\n\nbody {n}\n"
    ).encode()


# file name in the Maildir -> the message it holds
MAILDIR = {
    "cur/1719828000.a.host:2,S": "a",
    "cur/1719828000.b.host:2,FS": "b",
    "new/1719828000.c.host": "c",
    "cur/1719828000.d.host:2,RS": "d",
    "cur/1719828000.e.host:2,": "e",
    ".Archive/cur/1719828000.f.host:2,ST": "f",
}


@pytest.fixture
def maildir(tmp_path: Path) -> Path:
    root = tmp_path / "Maildir"
    for sub in ("cur", "new", "tmp"):
        (root / sub).mkdir(parents=True)
    for name, n in MAILDIR.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(_mail(n))
    return root


def ids(capsys: pytest.CaptureFixture[str], store: Path, query: str, *opts: str) -> set[str]:
    code, out, err = run(capsys, store, "search", query, "--format=ids", *opts)
    assert code == 0, err
    return {line.split("@")[0] for line in out.split()}


def events_of(store: Path, kind: str) -> list[dict[str, object]]:
    with MessageStore.open(store, clock=StepClock(), run_id="check") as s:
        rows: list[dict[str, object]] = s.query(
            "SELECT seq, folder, uidl, message_id, flags FROM events WHERE type = ? ORDER BY seq",
            [kind],
        ).to_pylist()
    return rows


def test_maildir_import_records_each_files_flags_and_search_reads_them(
    tmp_path: Path, maildir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    assert run(capsys, store, "import", "maildir", str(maildir))[0] == 0
    seen = {e["message_id"]: e["flags"] for e in events_of(store, "message-seen")}
    assert seen == {
        "a@example.org": ["\\Seen"],
        "b@example.org": ["\\Flagged", "\\Seen"],
        "c@example.org": [],  # new/: delivered, nothing set
        "d@example.org": ["\\Answered", "\\Seen"],
        "e@example.org": [],
        "f@example.org": ["\\Deleted", "\\Seen"],
    }
    assert ids(capsys, store, "is:unread") == {"c", "e"}
    assert ids(capsys, store, "is:seen") == {"a", "b", "d", "f"}
    assert ids(capsys, store, "flag:flagged") == {"b"}
    assert ids(capsys, store, "is:replied") == {"d"}
    assert ids(capsys, store, "is:trashed") == {"f"}
    assert ids(capsys, store, "is:unread OR is:flagged") == {"b", "c", "e"}
    assert ids(capsys, store, "folder:INBOX -is:seen") == {"c", "e"}
    code, out, _ = run(capsys, store, "search", "is:draft", "--output=count")
    assert (code, out.strip()) == (0, "0")


def test_a_renamed_file_is_one_flags_changed_event_that_search_and_as_of_follow(
    tmp_path: Path, maildir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    assert run(capsys, store, "import", "maildir", str(maildir))[0] == 0
    before = events_of(store, "message-seen")
    code, out, _ = run(capsys, store, "query", "select max(seq) from events", "--json")
    last_before = json.loads(out)[0]["max(seq)"]

    # a mail program replies to a, and reads c (moving it to cur/ as it does)
    (maildir / "cur/1719828000.a.host:2,S").rename(maildir / "cur/1719828000.a.host:2,RS")
    (maildir / "new/1719828000.c.host").rename(maildir / "cur/1719828000.c.host:2,S")
    code, out, err = run(capsys, store, "import", "maildir", str(maildir), "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["new_messages"] == 0 and report["flags_changed"] == 2
    assert report["balanced"]

    assert events_of(store, "message-seen") == before  # no new location
    changed = events_of(store, "flags-changed")
    assert [(e["message_id"], e["uidl"], e["flags"]) for e in changed] == [
        ("a@example.org", "1719828000.a.host", ["\\Answered", "\\Seen"]),
        ("c@example.org", "1719828000.c.host", ["\\Seen"]),
    ]
    assert ids(capsys, store, "is:replied") == {"a", "d"}
    assert ids(capsys, store, "is:unread") == {"e"}
    # the store as it stood before: the old flags
    assert ids(capsys, store, "is:replied", f"--as-of={last_before}") == {"d"}
    assert ids(capsys, store, "is:unread", f"--as-of={last_before}") == {"c", "e"}

    # the same tree again: nothing changed, nothing recorded
    code, out, _ = run(capsys, store, "import", "maildir", str(maildir), "--json")
    assert code == 0 and json.loads(out)["flags_changed"] == 0 == json.loads(out)["events"]
    assert run(capsys, store, "verify")[0] == 0


def test_a_message_in_two_folders_is_read_if_either_copy_is_and_trashed_only_if_both_are(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "Maildir"
    for name in ("cur/x:2,T", ".Archive/cur/x:2,S", ".Sent/cur/y:2,T", ".Sent/new/y2"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(_mail("x" if name.endswith(("x:2,T", "x:2,S")) else "y"))
    store = tmp_path / "store"
    assert run(capsys, store, "import", "maildir", str(root))[0] == 0
    assert ids(capsys, store, "is:seen") == {"x"}
    assert ids(capsys, store, "is:unread") == {"y"}
    assert ids(capsys, store, "is:trashed") == set()  # each has a copy not marked deleted


def test_maildir_export_writes_the_flags_back_and_an_import_of_it_reads_them(
    tmp_path: Path, maildir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    assert run(capsys, store, "import", "maildir", str(maildir))[0] == 0
    out_dir = tmp_path / "out"
    assert run(capsys, store, "export", "*", "--format=maildir", str(out_dir))[0] == 0
    names = sorted(os.listdir(out_dir / "cur"))
    flags = {
        (out_dir / "cur" / n).read_bytes().split(b"@")[0].split(b"<")[1].decode(): n.split(":2,")[1]
        for n in names
    }
    assert flags == {"a": "S", "b": "FS", "c": "", "d": "RS", "e": "", "f": "ST"}

    # flags changed since: exported again into the same Maildir, each file is replaced
    (maildir / "cur/1719828000.b.host:2,FS").rename(maildir / "cur/1719828000.b.host:2,S")
    assert run(capsys, store, "import", "maildir", str(maildir))[0] == 0
    assert run(capsys, store, "export", "*", "--format=maildir", "--append", str(out_dir))[0] == 0
    again = sorted(os.listdir(out_dir / "cur"))
    assert len(again) == len(names)
    assert sum(n.endswith(":2,S") for n in again) == 2  # a, and b now

    copy = tmp_path / "copy"
    assert run(capsys, copy, "import", "maildir", str(out_dir))[0] == 0
    assert ids(capsys, copy, "is:unread") == {"c", "e"}
    assert ids(capsys, copy, "is:flagged") == set()


def test_a_log_written_before_flags_replays_and_verifies(
    tmp_path: Path, maildir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its files lack the column: read as no flags known, beside newer files that
    have it, by replay, the ``events`` view and verify alike."""
    store = tmp_path / "store"
    assert run(capsys, store, "import", "maildir", str(maildir))[0] == 0
    (old,) = sorted((store / "log").glob("*.parquet"))
    table = pq.read_table(old).drop_columns(["flags"])
    meta = dict(table.schema.metadata or {})
    meta[DIGEST_KEY] = table_digest(table).encode()
    pq.write_table(table.replace_schema_metadata(meta), old, compression="zstd")
    assert pa.types.is_int64(pq.read_schema(old).field("seq").type)
    assert "flags" not in pq.read_schema(old).names

    (maildir / "cur/1719828000.e.host:2,").rename(maildir / "cur/1719828000.e.host:2,F")
    assert run(capsys, store, "replay")[0] == 0
    code, out, err = run(capsys, store, "import", "maildir", str(maildir), "--json")
    assert code == 0, err
    # every place on record had no flags known: each is recorded once now
    assert json.loads(out)["flags_changed"] == len(MAILDIR)
    assert ids(capsys, store, "is:flagged") == {"b", "e"}
    code, out, _ = run(capsys, store, "query", "select count(flags) from events", "--json")
    assert json.loads(out)[0]["count(flags)"] == len(MAILDIR)
    assert run(capsys, store, "replay")[0] == 0
    assert ids(capsys, store, "is:flagged") == {"b", "e"}
    code, out, err = run(capsys, store, "verify")
    assert code == 0, out + err
    # a compaction merges the old file with the new: one file, the column NULL there
    assert run(capsys, store, "compact")[0] == 0
    (merged,) = sorted((store / "log").glob("*.parquet"))
    merged_flags = pq.read_table(merged).column("flags")
    assert (len(merged_flags), merged_flags.null_count) == (2 * len(MAILDIR), len(MAILDIR))
    assert ids(capsys, store, "is:flagged") == {"b", "e"}
    code, out, err = run(capsys, store, "verify")
    assert code == 0, out + err

"""What the command line prints: a message as people read it, plain output free of
Python reprs, pipes closed early, tables that fit a terminal, Maildir trees that are
not one, and a projection file that stock DuckDB can query as ``mailledger query`` does.
"""

from __future__ import annotations

import json
import logging
import os
import pty
import re
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pipeline.cli import main
from pipeline.cli.output import format_table, write_column
from pipeline.store import MessageStore

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "fixtures"
MAILLEDGER = [sys.executable, "-m", "pipeline"]
# what a Python repr leaks into plain output: a list or dict of strings, a None
REPR = re.compile(r"\['|\{'|\bNone\b")


def run(capsys: pytest.CaptureFixture[str], store: Path, *argv: str) -> tuple[int, str, str]:
    code = main(["--store", str(store), *argv], env={})
    out, err = capsys.readouterr()
    return code, out, err


def _put(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def _maildir(root: Path) -> Path:
    for sub in ("cur", "new", "tmp"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    return root


ENCODED = (
    b"From: =?UTF-8?Q?Zofia_Kowalsk=C4=85?= <zofia@example.pl>\r\n"
    b"To: =?ISO-8859-2?Q?J=F3zef?= <jozef@example.pl>, team@example.org\r\n"
    b"Cc: grace@example.org\r\n"
    b"Date: Wed, 26 Jun 2024 13:00:00 +0200\r\n"
    b"Subject: =?UTF-8?B?WmHFvMOzxYLEhyBnxJnFm2zEhSBqYcW6xYQ=?=\r\n"
    b"Message-ID: <encoded@example.pl>\r\n"
    b"X-Mailer: not shown\r\n"
    b"MIME-Version: 1.0\r\n"
    b'Content-Type: multipart/mixed; boundary="b1"\r\n'
    b"\r\n"
    b"--b1\r\n"
    b'Content-Type: multipart/alternative; boundary="b2"\r\n'
    b"\r\n"
    b"--b2\r\n"
    b"Content-Type: text/plain; charset=iso-8859-2\r\n"
    b"Content-Transfer-Encoding: quoted-printable\r\n"
    b"\r\n"
    b"Pos=B3a=B3em plan migracji. =A3=F3d=BC w pi=B1tek.\r\n"
    b"--b2\r\n"
    b"Content-Type: text/html; charset=utf-8\r\n"
    b"\r\n"
    b"<p>HTML twin of the plain text</p>\r\n"
    b"--b2--\r\n"
    b"--b1\r\n"
    b'Content-Type: application/pdf; name="plan.pdf"\r\n'
    b'Content-Disposition: attachment; filename="plan.pdf"\r\n'
    b"Content-Transfer-Encoding: base64\r\n"
    b"\r\n"
    b"JVBERi0xLjQKJcOkw7zDtsOfCjIgMCBvYmoKPDwvTGVuZ3RoIDMgMCBSPj4Kc3RyZWFtCg==\r\n"
    b"--b1--\r\n"
)

HTML_ONLY = (
    b"From: news@example.org\r\nTo: me@example.org\r\n"
    b"Subject: Weekly\r\nMessage-ID: <html-only@example.org>\r\n"
    b"Content-Type: text/html; charset=utf-8\r\n\r\n"
    b"<html><head><title>ignored title</title><style>p {color: red}</style></head>"
    b"<body><h1>This week</h1><p>Fish &amp; chips, caf\xc3\xa9 &lt;open&gt;.</p>"
    b"<script>alert('no')</script><ul><li>one</li><li>two</li></ul></body></html>\r\n"
)


@pytest.fixture
def filled(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    store = tmp_path / "store"
    src = _maildir(tmp_path / "extra")
    _put(src / "cur" / "1.M1P1.t:2,S", ENCODED)
    _put(src / "cur" / "2.M2P1.t:2,S", HTML_ONLY)
    for argv in (
        ("import", "maildir", str(FIXTURES / "maildir")),
        ("import", "mbox", str(FIXTURES / "lists.mbox")),
        ("import", "maildir", str(src)),
    ):
        code, _, err = run(capsys, store, *argv)
        assert code == 0, err
    return store


# -- show ------------------------------------------------------------------------


def test_show_prints_decoded_headers_and_the_charset_decoded_text_body(
    filled: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, filled, "show", "<encoded@example.pl>")
    assert code == 0, err
    head, _, body = out.partition("\n\n")
    assert head.splitlines() == [
        "From: Zofia Kowalską <zofia@example.pl>",
        "To: Józef <jozef@example.pl>, team@example.org",
        "Cc: grace@example.org",
        "Date: Wed, 26 Jun 2024 13:00:00 +0200",
        "Subject: Zażółć gęślą jaźń",
        "Message-ID: <encoded@example.pl>",
        "Attachment: plan.pdf (application/pdf, 52 B, part 5)",
    ]
    assert body == "Posłałem plan migracji. Łódź w piątek.\n"


def test_show_reduces_an_html_only_body_to_readable_text(
    filled: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, filled, "show", "html-only@example.org")
    assert code == 0
    body = out.split("\n\n", 1)[1]
    assert body.splitlines() == [
        "This week",
        "",
        "Fish & chips, café <open>.",
        "",
        "- one",
        "- two",
    ]
    assert "<" not in body.replace("<open>", "") and "alert" not in body and "red" not in body
    assert "HTML only" in out.split("\n\n", 1)[0]


def test_show_never_passes_terminal_control_sequences_through(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = _maildir(tmp_path / "md")
    _put(
        src / "cur" / "1:2,",
        b"Subject: =?UTF-8?Q?hi_=1B]0;owned=07?= there\r\nMessage-ID: <esc@x>\r\n\r\n"
        b"body \x1b[2J cleared?\tTab kept\r\n",
    )
    store = tmp_path / "store"
    assert run(capsys, store, "import", "maildir", str(src))[0] == 0
    code, out, _ = run(capsys, store, "show", "esc@x")
    assert code == 0 and "\x1b" not in out and "\x07" not in out
    assert "owned" in out and "cleared?\tTab kept" in out


def test_show_raw_keeps_the_exact_bytes(tmp_path: Path, filled: Path) -> None:
    done = subprocess.run(
        [*MAILLEDGER, "--store", str(filled), "show", "--raw", "encoded@example.pl"],
        capture_output=True,
        cwd=REPO,
        check=True,
    )
    assert done.stdout == ENCODED


def test_show_json_carries_the_body_and_the_attachments(
    filled: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, filled, "show", "encoded@example.pl", "--json")
    rec = json.loads(out)
    assert code == 0 and rec["body"] == "Posłałem plan migracji. Łódź w piątek."
    assert rec["attachments"] == [
        {"filename": "plan.pdf", "content_type": "application/pdf", "size": 52, "part": 5}
    ]


# -- no Python reprs in plain output ---------------------------------------------------


def test_no_python_repr_in_the_plain_output_of_any_store_command(
    filled: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    commands = [
        ("show", "plan-1@example.org"),  # (To and Cc: a list; List-Id: none)
        ("show", "plan-4@example.pl"),
        ("find", "subject", "live wire: release plan"),
        ("thread", "plan-2@example.org"),
        ("stats",),
        ("query", "select * from messages"),  # lists, nulls, timestamps
        ("query", "select * from events"),  # lists of structs (the headers)
        ("query", "select * from locations"),
        ("cursor", "log", "nobody", "INBOX"),
        ("verify",),
        ("replay",),
        ("compact",),
        ("import", "maildir", str(FIXTURES / "maildir")),
        ("import", "mbox", str(FIXTURES / "lists.mbox")),
        ("delete", "plan-5@example.org"),
    ]
    for argv in commands:
        code, out, err = run(capsys, filled, *argv)
        assert code == 0, (argv, err)
        assert out.strip(), argv
        assert not REPR.search(out), (argv, REPR.search(out), out)


def _msg(i: int) -> bytes:
    return (
        f"From: sender@sync.example\r\nTo: me@sync.example, you@sync.example\r\n"
        f"Subject: message {i}\r\nDate: Mon, 01 Jun 2026 10:00:00 +0200\r\n"
        f"Message-ID: <m{i}@sync.example>\r\n\r\nbody {i}\r\n"
    ).encode()


def _sync(
    tmp_path: Path, dovecot: Any, capsys: pytest.CaptureFixture[str], toml: str, *argv: str
) -> tuple[int, str]:
    config = tmp_path / "config.toml"
    config.write_text(toml)
    env = {**dovecot.password_env(), "HOME": str(tmp_path)}
    code = main(
        ["--store", str(tmp_path / "store"), "sync", "--config", str(config), *argv], env=env
    )
    out, _ = capsys.readouterr()
    return code, out


def test_no_python_repr_in_sync_and_cursor_log_output(
    tmp_path: Path,
    dovecot: Any,
    imap_user: Callable[[str], Any],
    capsys: pytest.CaptureFixture[str],
) -> None:
    user = imap_user("fastmail")
    for i in range(3):
        user.save("INBOX", _msg(i))
    imap = dovecot.account_toml("fastmail", folders=["INBOX"])
    pop3 = dovecot.account_toml("fastmail", name="pop", type="pop3")
    outputs = []
    for argv in (("--measure",), (), ("--apply",), ("--apply",)):
        code, out = _sync(tmp_path, dovecot, capsys, imap + pop3, *argv)
        assert code == 0, out
        outputs.append(out)
    # a folder list that matches nothing on the server: an account error, named plainly
    code, out = _sync(
        tmp_path, dovecot, capsys, dovecot.account_toml("fastmail", folders=["Nope", "Nix"])
    )
    assert code == 1 and "Nope, Nix" in out
    outputs.append(out)
    code, out, _ = run(capsys, tmp_path / "store", "cursor", "log", "fastmail", "INBOX")
    assert code == 0 and "cursor=-->3" in out  # (no cursor before the first move: "-")
    outputs.append(out)
    for out in outputs:
        assert out.strip() and not REPR.search(out), out


# -- a reader that stops early -----------------------------------------------------------


def _piped_to_head(argv: list[str]) -> tuple[int, bytes, bytes, bytes]:
    """Run mailledger into a real pipe read by ``head -1``: (mailledger's exit status,
    its stderr, what head printed, head's stderr)."""
    ml = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
    head = subprocess.Popen(
        ["head", "-1"], stdin=ml.stdout, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert ml.stdout is not None and ml.stderr is not None
    ml.stdout.close()  # (head alone holds the read end: its exit closes the pipe)
    first, head_err = head.communicate(timeout=120)
    err = ml.stderr.read()
    ml.stderr.close()
    return ml.wait(timeout=120), err, first, head_err


def test_query_into_head_exits_0_with_nothing_on_stderr(filled: Path) -> None:
    # 300,000 rows: megabytes, far more than a pipe holds, so the write does break
    code, err, first, _ = _piped_to_head(
        [*MAILLEDGER, "--store", str(filled), "query", "select * from range(300000) t(n)"]
    )
    assert first.split() == [b"n"]
    assert (code, err) == (0, b"")


def test_show_raw_of_a_large_message_into_head_exits_0(tmp_path: Path) -> None:
    store = tmp_path / "store"
    src = _maildir(tmp_path / "md")
    big = b"Subject: big\r\nMessage-ID: <big@x>\r\n\r\n" + b"line of a long body\r\n" * 200_000
    _put(src / "cur" / "big:2,", big)
    assert main(["--store", str(store), "import", "maildir", str(src)], env={}) == 0
    code, err, first, _ = _piped_to_head(
        [*MAILLEDGER, "--store", str(store), "show", "--raw", "big@x"]
    )
    assert first == b"Subject: big\r\n"
    assert (code, err) == (0, b"")


# -- the query table -------------------------------------------------------------------


def test_table_cut_for_a_terminal_marks_each_cut_cell_and_fits_the_width() -> None:
    rows = [("a" * 80, "short", 1), ("b" * 10, "x" * 50, None)]
    table = format_table(["long", "other", "n"], rows, width=40)
    lines = table.splitlines()
    assert all(len(line) <= 40 for line in lines), table
    assert lines[2].startswith("a" * 10) and "…" in lines[2]  # the cut cell says so
    assert lines[3].startswith("b" * 10 + " ")  # a cell that fits is whole, unmarked
    assert "…" in lines[3] and lines[3].rstrip().endswith("NULL")


def test_table_not_for_a_terminal_prints_every_value_whole() -> None:
    long = "word " * 60
    table = format_table(["v", "l"], [(long.strip(), ["a@x", "b@y"])], width=None)
    assert long.strip() in table and "…" not in table
    assert "[a@x, b@y]" in table


def test_query_in_a_pipe_prints_values_whole(filled: Path) -> None:
    value = "z" * 300
    done = subprocess.run(
        [*MAILLEDGER, "--store", str(filled), "query", f"select '{value}' as v, 1 as n"],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
    )
    assert value in done.stdout and "…" not in done.stdout


def test_query_on_a_terminal_cuts_to_its_width_with_a_mark(filled: Path) -> None:
    controller, terminal = pty.openpty()
    env = {**os.environ, "COLUMNS": "50", "LINES": "20"}
    try:
        proc = subprocess.Popen(
            [*MAILLEDGER, "--store", str(filled), "query", "select message_id, subject, to_addrs"
             " from messages order by message_id"],
            stdout=terminal, stderr=subprocess.PIPE, cwd=REPO, env=env,
        )  # fmt: skip
        os.close(terminal)
        chunks = []
        while True:
            try:
                data = os.read(controller, 65536)
            except OSError:  # EIO: the terminal's last writer has gone
                break
            if not data:
                break
            chunks.append(data)
        assert proc.wait(timeout=60) == 0
    finally:
        os.close(controller)
    lines = b"".join(chunks).decode().replace("\r\n", "\n").splitlines()
    rows = [line for line in lines if line and not line.startswith("(")]
    assert len(rows) > 3 and all(len(line) <= 50 for line in rows), lines
    assert any("…" in line for line in rows)


# -- Maildir trees ----------------------------------------------------------------------


def test_import_maildir_of_a_tree_that_is_not_a_maildir_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = tmp_path / "Documents"
    _put(docs / "notes.txt", b"Subject: looks like a header\n\nbut this is no Maildir\n")
    _put(docs / "photos" / "cat.jpg", b"\xff\xd8\xff\xe0\x00\x10JFIF\x00")
    store = tmp_path / "store"
    code, out, err = run(capsys, store, "import", "maildir", str(docs))
    assert code == 2
    assert f"{docs}: not a Maildir" in err and "cur/" in err
    assert out == "" and not store.exists()  # refused before anything was made


def test_a_pipe_or_a_device_among_the_messages_is_named_not_read(tmp_path: Path) -> None:
    # a FIFO in cur/ held the worker that opened it forever (no writer ever comes),
    # and /dev/zero never ends; each is named as not mail and the import goes on
    # (in its own process, with a deadline: the failure this guards is a hang)
    src = _maildir(tmp_path / "Maildir")
    _put(src / "cur" / "1.M1P1.h:2,S", b"From: a@x\nMessage-ID: <ok@x>\n\nhello\n")
    os.mkfifo(src / "cur" / "2.M2P1.h:2,S")
    (src / "new" / "3.M3P1.h").symlink_to("/dev/zero")
    done = subprocess.run(
        [*MAILLEDGER, "--store", str(tmp_path / "store"), "import",
         "maildir", str(src), "--json"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    counts = json.loads(done.stdout)
    assert {f["path"]: f["reason"] for f in counts["not_mail_files"]} == {
        str(src / "cur" / "2.M2P1.h:2,S"): "not a regular file",
        str(src / "new" / "3.M3P1.h"): "not a regular file",
    }
    assert (counts["uids_seen"], counts["new_messages"], counts["errors"]) == (1, 1, 0)


def test_files_that_are_not_mail_are_named_counted_and_listed_never_stored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    src = _maildir(tmp_path / "Maildir")
    good = b"From: a@x\nDate: Wed, 26 Jun 2024 10:00:00 +0000\nMessage-ID: <ok@x>\n\nhello\n"
    _put(src / "cur" / "1.M1P1.h:2,S", good)
    # a delivered file, however broken, is a message: stored as malformed
    _put(src / "cur" / "2.M2P1.h:2,S", b"\x00\xff garbage with no header block at all")
    _put(src / "loose-notes.txt", b"no header, but text: kept as a malformed message\n")
    _put(src / "new" / "3.M3P1.h", b"")  # delivered empty: a malformed message too
    not_mail = {
        _put(src / "cur" / ".DS_Store", b"\x00\x00\x00\x01Bud1\x00"): "hidden file",
        _put(src / "dovecot.index", b"\x07\x02\x00\x00binary"): "control file",
        _put(src / "dovecot-uidlist", b"3 V1 N5\n"): "control file",
        _put(src / "maildirfolder", b""): "control file",
        _put(src / "courierimapkeywords", b"x\n"): "control file",
        _put(src / "empty-notes.txt", b""): "empty file",
        _put(src / "Thumbs.db", b"\xd0\xcf\x11\xe0"): "control file",
        _put(src / "photo.jpg", b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01"): "binary, no header lines",
    }
    store = tmp_path / "store"
    with caplog.at_level(logging.INFO, logger="mailledger.import"):
        code, out, err = run(capsys, store, "import", "maildir", str(src), "--json")
    assert code == 0, err
    counts = json.loads(out)
    assert counts["not_mail"] == len(not_mail)
    assert {f["path"]: f["reason"] for f in counts["not_mail_files"]} == {
        str(p): why for p, why in not_mail.items()
    }
    assert (counts["uids_seen"], counts["new_messages"], counts["malformed"]) == (4, 4, 3)
    assert counts["balanced"] and counts["errors"] == 0
    named = "\n".join(r.getMessage() for r in caplog.records if r.levelno == logging.INFO)
    for path in not_mail:
        assert str(path) in named  # (shown by -v)

    code, out, _ = run(capsys, store, "import", "maildir", str(src))
    assert code == 0 and out.rstrip().endswith(f"not_mail={len(not_mail)}")
    code, out, _ = run(capsys, store, "stats", "--json")
    assert json.loads(out)["messages"] == 4


# -- stock DuckDB ------------------------------------------------------------------------

_STOCK = textwrap.dedent(
    """
    import json, sys
    import duckdb

    con = duckdb.connect(sys.argv[1], read_only=True)
    print(json.dumps({
        "thread": [r[0] for r in con.execute(
            "SELECT message_id FROM thread('<plan-1@example.org>')").fetchall()],
        "events": con.execute("SELECT count(*) FROM events").fetchall()[0][0],
        "headers": con.execute("SELECT count(*) FROM message_headers").fetchall()[0][0],
    }))
    """
)


def _stock_duckdb(db: Path, cwd: Path) -> dict[str, Any]:
    """Query ``db`` with nothing but the duckdb module, in a process of its own."""
    done = subprocess.run(
        [sys.executable, "-c", _STOCK, str(db)], capture_output=True, text=True, cwd=cwd
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def test_stock_duckdb_finds_the_thread_macro_and_the_events_view(
    filled: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    want = ["plan-1@example.org", "plan-2@example.org", "plan-4@example.pl", "plan-5@example.org"]
    out = run(capsys, filled, "stats", "--json")[1]
    events = json.loads(out)["events"]
    got = _stock_duckdb(filled / "projections.duckdb", elsewhere)
    assert got == {"thread": want, "events": events, "headers": json.loads(out)["messages"]}

    # after a replay, and after the store moved (its next command, even a read, mends
    # the view: it read the old place)
    assert run(capsys, filled, "replay")[0] == 0
    assert _stock_duckdb(filled / "projections.duckdb", elsewhere)["events"] == events
    moved = tmp_path / "moved"
    shutil.move(filled, moved)
    assert run(capsys, moved, "find", "subject", "live wire: release plan")[0] == 0
    assert _stock_duckdb(moved / "projections.duckdb", elsewhere)["events"] == events

    # new events are there at once: the view reads the log's files, whatever they are
    assert run(capsys, moved, "delete", "plan-5@example.org")[0] == 0
    got = _stock_duckdb(moved / "projections.duckdb", elsewhere)
    assert got["events"] == events + 1 and "plan-5@example.org" not in got["thread"]


def test_stock_duckdb_reads_the_log_of_a_store_whose_path_has_glob_characters(
    filled: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    odd = tmp_path / "mail [2024] *"  # (a "?" DuckDB itself cannot take: its WAL path breaks)
    shutil.move(filled, odd)
    code, out, err = run(capsys, odd, "stats", "--json")
    assert code == 0, err
    got = _stock_duckdb(odd / "projections.duckdb", tmp_path)
    assert got["events"] == json.loads(out)["events"] and len(got["thread"]) == 4


def test_a_moved_store_that_cannot_be_written_is_still_read(
    filled: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # (tests run as root, whom no file mode stops: the refusal is injected)
    from stores import db

    moved = tmp_path / "read-only-copy"
    shutil.move(filled, moved)
    real = db.connect

    def refuse_writers(path: Path, *, read_only: bool, timeout: float = 30.0) -> Any:
        if not read_only:
            raise OSError(30, "Read-only file system", str(path))
        return real(path, read_only=read_only, timeout=timeout)

    monkeypatch.setattr(db, "connect", refuse_writers)
    with MessageStore.open(moved) as store:
        assert store.find("subject", "live wire: release plan") == [
            "plan-1@example.org", "plan-2@example.org", "plan-5@example.org",
        ]  # fmt: skip


def test_stock_duckdb_on_a_store_without_events_yet(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path / "store") as store:
        assert store.stats()["events"] == 0
    got = _stock_duckdb(tmp_path / "store" / "projections.duckdb", tmp_path)
    assert got == {"thread": [], "events": 0, "headers": 0}
    with MessageStore.open(tmp_path / "store") as store:
        store.add("u1", b"Message-ID: <plan-1@example.org>\r\nSubject: s\r\n\r\nx\r\n")
    got = _stock_duckdb(tmp_path / "store" / "projections.duckdb", tmp_path)
    assert got == {"thread": ["plan-1@example.org"], "events": 1, "headers": 1}


def test_a_column_of_lines_is_printed_byte_for_byte_from_its_buffers(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``find``'s plain lines are written from Arrow's buffers: a chunk sliced out of
    a larger array prints its own values only, a large_string one too, and NULLs
    (which no listing has) print nothing."""
    import pyarrow as pa

    lines = pa.array(["skip\n", "a\tż\n", "b\t😀\n", "after\n"])
    column = pa.chunked_array(
        [lines.slice(1, 2), pa.array([], pa.string()), pa.array(["d\n", None, "e\n"])]
    )
    print("before")
    write_column(column)
    write_column(pa.chunked_array([pa.array(["x\n", "y\n"], pa.large_string()).slice(1)]))
    assert capsys.readouterr().out == "before\na\tż\nb\t😀\nd\ne\ny\n"


def test_a_subject_holding_a_tab_or_a_newline_stays_one_line_of_three_fields(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    src = _maildir(tmp_path / "ctl")
    _put(
        src / "cur" / "1.M1P1.t:2,S",
        b"From: ctl@example.org\r\nSubject: =?utf-8?q?one=09two=0Athree?=\r\n"
        b"Message-ID: <ctl@example.org>\r\nDate: Wed, 26 Jun 2024 13:00:00 +0200\r\n\r\nx\r\n",
    )
    assert run(capsys, store, "import", "maildir", str(src))[0] == 0
    code, out, err = run(capsys, store, "find", "from", "ctl@example.org")
    assert code == 0, err
    assert out.splitlines() == ["ctl@example.org\t2024-06-26T11:00:00Z\tone two three"]

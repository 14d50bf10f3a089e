"""``mailledger export``: the matches of a search written byte for byte as an
mbox (mboxrd) or a Maildir, and read back by ``import`` into the same set of
sha256, with ``verify`` content."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest

from pipeline.cli import main
from pipeline.export import export, mbox_quote
from pipeline.sources.maildir import import_maildir
from pipeline.sources.mbox import import_mbox, iter_mbox
from pipeline.store import MessageStore
from projections.queries import compile_query
from projections.search import parse
from tests.conftest import StepClock

_HEAD = b"From: {who}@example.org\nTo: list@example.org\nSubject: {subject}\n"
_HEAD += b"Date: Wed, 26 Jun 2024 10:0{n}:00 +0000\nMessage-ID: <{mid}@example.org>\n\n"


def _mail(n: int, mid: str, body: bytes, *, who: str = "ada", crlf: bool = False) -> bytes:
    head = (
        _HEAD.replace(b"{who}", who.encode())
        .replace(b"{subject}", f"message {n}".encode())
        .replace(b"{n}", str(n).encode())
        .replace(b"{mid}", mid.encode())
    )
    raw = head + body
    return raw.replace(b"\n", b"\r\n") if crlf else raw


# what mbox must quote and un-quote, CRLF and LF, and mail that is no mail at all
MESSAGES = {
    "plain": _mail(1, "plain", b"Hello.\n"),
    "from-lines": _mail(
        2, "from-lines", b"From the start\n\nFrom after a blank line\n>From quoted\n>>From x\n"
    ),
    "crlf": _mail(3, "crlf", b"From here\n\n>From there\nbye\n", crlf=True),
    "from-first": b"From someone Tue Jan  1 00:00:00 2019\n" + _mail(4, "from-first", b"body\n"),
    "malformed": b"\x00\x01 not a header\nFrom nowhere\n\n\n",
    "blank-end": _mail(5, "blank-end", b"ends in blank lines\n\n\n", who="bob"),
}
NOW = datetime(2024, 7, 1, tzinfo=UTC)
NO_NEWLINE = _mail(6, "no-newline", b"no newline at the end", who="bob")


def _sha(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


def run(capsys: pytest.CaptureFixture[str], store: Path, *argv: str) -> tuple[int, str, str]:
    code = main(["--store", str(store), *argv], env={})
    out, err = capsys.readouterr()
    return code, out, err


def _shas(store: Path) -> set[str]:
    with MessageStore.open(store, clock=StepClock(), run_id="check") as s:
        return set(s.query("SELECT sha256 FROM messages").column(0).to_pylist())


@pytest.fixture
def filled(tmp_path: Path) -> Path:
    """A store holding ``MESSAGES`` and ``NO_NEWLINE``, each in a Maildir file."""
    maildir = tmp_path / "in"
    (maildir / "cur").mkdir(parents=True)
    for n, raw in enumerate([*MESSAGES.values(), NO_NEWLINE]):
        (maildir / "cur" / f"{n}.msg:2,S").write_bytes(raw)
    root = tmp_path / "store"
    with MessageStore.open(root, clock=StepClock(), run_id="fill") as store:
        counts = import_maildir(store, maildir)
        assert counts.new_messages == len(MESSAGES) + 1
    return root


def test_mbox_quoting_is_undone_by_the_mboxrd_import(tmp_path: Path) -> None:
    raw = b"a\nFrom x\n>From y\n>>From z\n> From w\nFromage\n"
    assert mbox_quote(raw) == b"a\n>From x\n>>From y\n>>>From z\n> From w\nFromage\n"
    box = tmp_path / "q.mbox"
    box.write_bytes(b"From me Thu Jan  1 00:00:00 1970\n" + mbox_quote(raw) + b"\n")
    assert [r for _, r in iter_mbox(box, mboxrd=True)] == [raw]
    # (the default keeps the file's bytes: an mbox written by mboxo tools stays as it was)
    assert [r for _, r in iter_mbox(box)] == [mbox_quote(raw)]


def test_each_message_of_an_mbox_is_unquoted_as_its_from_line_says(tmp_path: Path) -> None:
    """mailledger's From lines end in ``mboxrd`` (``mboxrd-noeol``: and the last
    newline is the writer's); a message without the mark keeps its bytes, so an
    mbox appended to by several writers reads back right, message by message."""
    raw = b"Subject: x\n\n>From y\nFrom z"
    box = tmp_path / "mixed.mbox"
    box.write_bytes(
        b"From a Thu Jan  1 00:00:00 1970 mboxrd-noeol\n" + mbox_quote(raw) + b"\n\n"
        b"From b Thu Jan  1 00:00:00 1970\n" + mbox_quote(raw) + b"\n\n"
        b"From c Thu Jan  1 00:00:00 1970 mboxrd\n" + mbox_quote(raw + b"\n") + b"\n"
    )
    assert [r for _, r in iter_mbox(box)] == [raw, mbox_quote(raw) + b"\n", raw + b"\n"]
    assert [r for _, r in iter_mbox(box, mboxrd=True)] == [raw, raw + b"\n", raw + b"\n"]
    as_is = [mbox_quote(raw), mbox_quote(raw) + b"\n", mbox_quote(raw + b"\n")]
    assert [r for _, r in iter_mbox(box, mboxrd=False)] == as_is


def test_mbox_round_trip_gives_the_same_sha256_and_verify_passes(
    filled: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_file = tmp_path / "out.mbox"
    code, out, err = run(capsys, filled, "export", "*", str(out_file), "--json")
    assert code == 0, err
    report = json.loads(out)
    every = [*MESSAGES.values(), NO_NEWLINE]
    assert report["messages"] == len(every) and report["errors"] == []
    assert report["bytes"] == sum(map(len, every)) and report["newline_added"] == 1
    again = tmp_path / "again"
    assert run(capsys, again, "import", "mbox", str(out_file))[0] == 0  # (no --mboxrd)
    # every message byte for byte: the From lines say how each was quoted, and
    # which one was given the newline mbox cannot do without
    assert _shas(again) == _shas(filled) == {_sha(r) for r in every}
    code, out, _ = run(capsys, again, "verify")
    assert code == 0 and out.startswith("ok:")


def test_maildir_round_trip_is_byte_exact_for_every_message(
    filled: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dest = tmp_path / "out"
    code, out, err = run(capsys, filled, "export", "*", str(dest), "--format=maildir")
    assert code == 0, err
    assert out.startswith("exported 7 messages (")
    names = sorted(p.name for p in (dest / "cur").iterdir())
    # (each was read: its file in the source Maildir was ``:2,S``)
    assert len(names) == 7 and all(n.endswith(":2,S") for n in names)
    assert list((dest / "tmp").iterdir()) == [] and list((dest / "new").iterdir()) == []
    again = tmp_path / "again"
    assert run(capsys, again, "import", "maildir", str(dest))[0] == 0
    assert _shas(again) == _shas(filled) == {_sha(r) for r in [*MESSAGES.values(), NO_NEWLINE]}
    assert run(capsys, again, "verify")[0] == 0


def test_export_writes_only_the_matches_and_reads_them_page_by_page(
    filled: Path, tmp_path: Path
) -> None:
    dest = tmp_path / "bob.mbox"
    with MessageStore.open(filled, clock=StepClock(), run_id="x") as store:
        plan = compile_query(parse("from:bob", now=NOW))
        report = export(store, plan, "mbox", dest, page=1)
        assert report.messages == 2
        every = export(
            store, compile_query(parse("*", now=NOW)), "maildir", tmp_path / "all", page=2
        )
        assert every.messages == 7
    got = [raw for _, raw in iter_mbox(dest)]
    assert got == [MESSAGES["blank-end"], NO_NEWLINE]
    assert dest.read_bytes().startswith(b"From bob@example.org Wed Jun 26 10:05:00 2024 mboxrd\n")


def test_a_destination_holding_mail_is_refused_unless_appended_to(
    filled: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    box = tmp_path / "box.mbox"
    assert run(capsys, filled, "export", "from:ada", str(box))[0] == 0
    code, _, err = run(capsys, filled, "export", "from:bob", str(box))
    assert code == 2 and "--append" in err
    assert run(capsys, filled, "export", "from:bob", str(box), "--append")[0] == 0
    store = MessageStore.open(tmp_path / "again", clock=StepClock(), run_id="x")
    with store:
        import_mbox(store, box, mboxrd=True)
    senders = [r for k, r in MESSAGES.items() if k != "malformed"]  # (it has no From)
    assert _shas(tmp_path / "again") == {_sha(r) for r in senders} | {_sha(NO_NEWLINE)}
    notes = tmp_path / "notes.txt"
    notes.write_text("not mail\n")
    code, _, err = run(capsys, filled, "export", "*", str(notes), "--append")
    assert code == 2 and "not an mbox" in err
    dest = tmp_path / "md"
    assert run(capsys, filled, "export", "from:ada", str(dest), "--format=maildir")[0] == 0
    code, _, err = run(capsys, filled, "export", "*", str(dest), "--format=maildir")
    assert code == 2 and "holding" in err
    assert run(capsys, filled, "export", "*", str(dest), "--format=maildir", "--append")[0] == 0
    assert len(list((dest / "cur").iterdir())) == 7  # (the same names again: no copies)
    other = tmp_path / "photos"
    other.mkdir()
    (other / "cat.jpg").write_bytes(b"\xff\xd8")
    code, _, err = run(capsys, filled, "export", "*", str(other), "--format=maildir", "--append")
    assert code == 2 and "not a Maildir" in err


def test_an_empty_result_writes_nothing_and_says_so(
    filled: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, filled, "export", "from:nobody", str(tmp_path / "e.mbox"))
    assert code == 0 and "exported 0 messages" in out and "no messages match" in err
    assert (tmp_path / "e.mbox").read_bytes() == b""
    code, _, err = run(capsys, filled, "export", "from:ada AND (", str(tmp_path / "x"))
    assert code == 2 and "position" in err


def test_a_missing_blob_is_an_error_named_and_the_rest_is_written(
    filled: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with MessageStore.open(filled, clock=StepClock(), run_id="x") as store:
        assert store.blobs.delete(_sha(MESSAGES["plain"]))
    code, out, _ = run(capsys, filled, "export", "*", str(tmp_path / "o.mbox"), "--json")
    assert code == 1
    report = json.loads(out)
    assert report["exit_code"] == 1 and report["messages"] == 6
    assert len(report["errors"]) == 1 and "<plain@example.org>" in report["errors"][0]


def test_appending_to_an_mbox_whose_last_message_lacks_its_blank_line(
    filled: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    box = tmp_path / "theirs.mbox"
    theirs = b"Subject: theirs\n\nlast line\n"
    box.write_bytes(b"From x@example.org Thu Jan  1 00:00:00 1970\n" + theirs)
    assert run(capsys, filled, "export", "id:plain@example.org", str(box), "--append")[0] == 0
    assert [raw for _, raw in iter_mbox(box, mboxrd=True)] == [theirs, MESSAGES["plain"]]


class _Recorder:
    """A progress display that remembers what it was told."""

    def __init__(self) -> None:
        self.told: list[tuple[int | None, str]] = []
        self.done = 0

    def start(self, total: int | None, label: str, *, unit: str | None = "msg") -> None:
        self.told.append((total, label))

    def advance(self, n: int = 1) -> None:
        self.done += n

    def close(self) -> None:
        pass


def test_progress_counts_the_messages_out_of_the_matches(filled: Path, tmp_path: Path) -> None:
    rec = _Recorder()
    with MessageStore.open(filled, clock=StepClock(), run_id="x") as store:
        export(
            store, compile_query(parse("from:ada", now=NOW)), "mbox", tmp_path / "a", progress=rec
        )
    assert rec.told == [(4, f"export mbox {tmp_path / 'a'}")] and rec.done == 4


def test_export_of_a_full_text_query_writes_the_messages_whose_body_matches(
    filled: Path, tmp_path: Path
) -> None:
    """Words and phrases read the full-text index: an export of them writes the
    messages whose text matches, page by page, as a search lists them."""
    dest = tmp_path / "quoted.mbox"
    with MessageStore.open(filled, clock=StepClock(), run_id="x") as store:
        plan = compile_query(parse('"from quoted"', now=NOW))
        assert plan.text  # (the full-text index answers it)
        listed = set(store.search(plan, "messages").column("message_id").to_pylist())
        report = export(store, plan, "mbox", dest, page=1)
    assert listed == {"from-lines@example.org"} and report.messages == 1
    assert [raw for _, raw in iter_mbox(dest, mboxrd=True)] == [MESSAGES["from-lines"]]


# --- where DEST points: pipeline.destination's rule -------------------------------


def _mbox_of(filled: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> bytes:
    """What ``export '*'`` writes into a plain new file (to compare other DESTs with)."""
    plain = tmp_path / "plain.mbox"
    assert run(capsys, filled, "export", "*", str(plain))[0] == 0
    return plain.read_bytes()


def test_export_to_a_symlink_writes_through_to_its_target(
    filled: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    expected = _mbox_of(filled, tmp_path, capsys)
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "box.mbox"
    target.write_bytes(b"")
    target.chmod(0o640)
    link = tmp_path / "link.mbox"
    link.symlink_to(target)
    code, _, err = run(capsys, filled, "export", "*", str(link))
    assert code == 0, err
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_bytes() == expected
    assert target.stat().st_mode & 0o777 == 0o640  # (replaced, keeping its mode)
    assert sorted(p.name for p in target.parent.iterdir()) == ["box.mbox"]  # no temporary
    # --append adds to the target in place, the link still a link
    assert run(capsys, filled, "export", "id:plain@example.org", str(link), "--append")[0] == 0
    assert link.is_symlink() and target.read_bytes().startswith(expected)
    assert len(list(iter_mbox(target))) == 8


def test_export_to_a_dangling_symlink_is_refused_and_creates_nothing(
    filled: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    link = tmp_path / "link.mbox"
    link.symlink_to(tmp_path / "nowhere.mbox")
    code, out, err = run(capsys, filled, "export", "*", str(link))
    assert code == 2 and out == ""
    assert f"{link}: a symlink to {tmp_path / 'nowhere.mbox'}, which does not exist" in err
    assert link.is_symlink() and not (tmp_path / "nowhere.mbox").exists()
    code, _, err = run(capsys, filled, "export", "*", str(link), "--format=maildir")
    assert code == 2 and "does not exist" in err and not (tmp_path / "nowhere.mbox").exists()


def test_export_into_a_missing_directory_exits_2_naming_the_path_given(
    filled: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for fmt in ("mbox", "maildir"):
        dest = tmp_path / "no" / "such" / "out"
        code, out, err = run(capsys, filled, "export", "*", str(dest), f"--format={fmt}")
        assert code == 2 and out == ""
        assert err == f"mailledger: {dest}: no such directory: {dest.parent}\n"
        assert not (tmp_path / "no").exists()


def test_export_to_dash_writes_the_mbox_to_stdout_and_the_report_to_stderr(
    filled: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    expected = _mbox_of(filled, tmp_path, capsys)
    argv = [sys.executable, "-m", "pipeline", "--store", str(filled), "export", "*", "-"]
    proc = subprocess.run(argv, capture_output=True, cwd=tmp_path, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == expected
    assert b"exported 7 messages" in proc.stderr
    assert not (tmp_path / "-").exists()
    proc = subprocess.run([*argv, "--json"], capture_output=True, cwd=tmp_path, check=False)
    assert proc.stdout == expected and json.loads(proc.stderr.splitlines()[0])["messages"] == 7
    # /dev/stdout (a link to the pipe stdout is) is streamed into, the report aside
    argv[-1] = "/dev/stdout"
    proc = subprocess.run(argv, capture_output=True, cwd=tmp_path, check=False)
    assert proc.returncode == 0 and proc.stdout == expected
    assert b"exported 7 messages" in proc.stderr
    # a file named "-" is ./-
    assert run(capsys, filled, "export", "*", str(tmp_path / "-"))[0] == 0
    assert (tmp_path / "-").read_bytes() == expected
    code, _, err = run(capsys, filled, "export", "*", "-", "--format=maildir")
    assert code == 2 and "stdout" in err


def test_export_into_a_fifo_streams_to_its_reader_and_leaves_the_fifo(
    filled: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    expected = _mbox_of(filled, tmp_path, capsys)
    (tmp_path / "o").mkdir()
    fifo = tmp_path / "o" / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    code, _, err = run(capsys, filled, "export", "*", str(fifo))
    reader.join(timeout=30)
    assert code == 0, err
    assert got == [expected]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert [p.name for p in fifo.parent.iterdir()] == ["pipe"]  # (no temporary beside it)


def test_export_to_a_character_device_writes_through_it_and_leaves_it(
    filled: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = os.stat("/dev/null")
    (tmp_path / "o").mkdir()
    link = tmp_path / "o" / "out"
    link.symlink_to("/dev/null")  # (as /dev/stdout is a link to a device or a pipe)
    for dest in ("/dev/null", str(link)):
        code, out, err = run(capsys, filled, "export", "*", dest)
        assert code == 0, err
        assert "exported 7 messages" in out
        after = os.stat("/dev/null")
        assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev
        assert after.st_ino == before.st_ino
    assert link.is_symlink() and [p.name for p in link.parent.iterdir()] == ["out"]


def test_a_socket_is_refused(
    filled: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    short = Path(tempfile.mkdtemp(prefix="ml-"))  # (a socket's path has a length limit)
    try:
        path = short / "s"
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(str(path))
            code, _, err = run(capsys, filled, "export", "*", str(path))
            assert code == 2 and f"{path}: a socket" in err
            assert stat.S_ISSOCK(os.lstat(path).st_mode)
    finally:
        shutil.rmtree(short)


def test_a_maildir_through_a_symlink_is_written_into_its_target(
    filled: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "real").mkdir()
    link = tmp_path / "md"
    link.symlink_to(tmp_path / "real", target_is_directory=True)
    code, _, err = run(capsys, filled, "export", "*", str(link), "--format=maildir")
    assert code == 0, err
    assert link.is_symlink() and len(list((tmp_path / "real" / "cur").iterdir())) == 7
    # a Maildir's DEST that is a file, a FIFO or a device is refused
    os.mkfifo(tmp_path / "pipe")
    for dest in (str(tmp_path / "pipe"), "/dev/null"):
        code, _, err = run(capsys, filled, "export", "*", dest, "--format=maildir")
        assert code == 2 and f"{dest}: not a directory" in err


@pytest.mark.corpus
def test_every_stored_body_round_trips_through_an_mbox_without_options(
    notmuch_corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The notmuch corpus holds Message-IDs seen with several contents (its
    duplicate/ folder): every one is exported, and `import mbox` with no option
    gives back the same set of sha256 (its >From lines and its message without a
    last newline included)."""
    source = tmp_path / "source"
    assert run(capsys, source, "import", "maildir", str(notmuch_corpus))[0] == 0
    with MessageStore.open(source, clock=StepClock(), run_id="x") as s:
        seen = "SELECT DISTINCT sha256 FROM events WHERE type = 'message-seen'"
        bodies = set(s.query(seen).column(0).to_pylist())
        ids = len(s.message_ids())
    assert len(bodies) > ids  # (the corpus has variants)
    box = tmp_path / "all.mbox"
    code, out, err = run(capsys, source, "export", "*", str(box), "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["messages"] == len(bodies) and report["variants"] == len(bodies) - ids
    assert b"\n>From " in box.read_bytes()  # (quoting had work to do)
    again = tmp_path / "again"
    code, out, err = run(capsys, again, "import", "mbox", str(box), "--json")
    assert code == 0, err
    with MessageStore.open(again, clock=StepClock(), run_id="x") as s:
        assert set(s.query(seen).column(0).to_pylist()) == bodies
        assert s.verify() == []
    code, out, _ = run(
        capsys, source, "export", "*", str(tmp_path / "one.mbox"), "--json", "--one-per-id"
    )
    assert code == 0 and json.loads(out)["messages"] == ids
    md = tmp_path / "md"
    code, out, _ = run(capsys, source, "export", "*", str(md), "--format=maildir", "--json")
    assert code == 0 and len(list((md / "cur").iterdir())) == len(bodies)


def test_a_message_deleted_and_seen_again_exports_only_what_was_seen_since(
    store: MessageStore, tmp_path: Path
) -> None:
    """Variants are the contents seen under the id since its record was stored:
    one dropped with a deleted copy (and erased by a purge) is not asked for."""
    first = _mail(1, "again", b"first\n")
    store.add("u1", first)
    store.add("u2", first.replace(b"To:", b"X-Copy: 2\nTo:"))  # (a variant, then deleted)
    assert store.delete("again@example.org", reason="handled")
    later = first.replace(b"first", b"later")
    store.add("u3", later)
    store.add("u4", later + b"\n-- \nsig\n")
    report = export(store, compile_query(parse("*", now=NOW)), "mbox", tmp_path / "a.mbox")
    assert report.errors == [] and (report.messages, report.variants) == (2, 1)
    assert [r for _, r in iter_mbox(tmp_path / "a.mbox")] == [later, later + b"\n-- \nsig\n"]

"""Attachments from the command line (issue 37): ``show --part N`` writes one MIME
part's decoded bytes, ``show --save-attachments DIR`` every attachment as a file
under a safe name, as ``notmuch show --part`` and ``mu extract`` do. Each case
is a real ``mailledger`` process over a real store."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MAILLEDGER = [sys.executable, "-m", "pipeline"]

BINARY = bytes(range(256)) * 40 + b"\r\n\x00\r\rend"  # (every byte, CR and NUL included)
LONG = "x" * 600 + ".pdf"


def _b64(data: bytes) -> bytes:
    return base64.encodebytes(data).replace(b"\n", b"\r\n")


def _attachment(name: str, data: bytes, ctype: str = "application/octet-stream") -> bytes:
    quoted = "".join(f"%{b:02X}" for b in name.encode())
    return (
        f"Content-Type: {ctype}\r\n"
        f"Content-Disposition: attachment; filename*=utf-8''{quoted}\r\n"
        "Content-Transfer-Encoding: base64\r\n\r\n"
    ).encode() + _b64(data)


INNER = (
    b"From: inner@example.org\r\nSubject: the forwarded one\r\n"
    b"Message-ID: <inner@example.org>\r\nMIME-Version: 1.0\r\n"
    b'Content-Type: multipart/mixed; boundary="in"\r\n\r\n'
    b"--in\r\nContent-Type: text/plain\r\n\r\ninner body\r\n"
    b"--in\r\n" + _attachment("inner.txt", b"inside the forwarded message\n") + b"--in--\r\n"
)

# The parts, numbered as notmuch numbers them (a depth-first walk, the root 1):
#  1 multipart/mixed
#  2   multipart/alternative       3 text/plain (the body)   4 text/html
#  5   application/octet-stream "../../etc/passwd"   (binary, base64)
#  6   "/abs"   7 ".bashrc"   8 a name with controls   9 a bidi override
#  10  a very long name   11 an empty name (application/pdf)
#  12  "report.pdf"   13 "report.pdf" again
#  14  image/png inline "logo.png"
#  15  multipart/mixed (nested)    16 text/csv "nested.csv"
#  17  message/rfc822   18 its multipart/mixed   19 its text   20 "inner.txt"
PARTS = [
    b'Content-Type: multipart/alternative; boundary="alt"\r\n\r\n'
    b"--alt\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nthe body\r\n"
    b"--alt\r\nContent-Type: text/html\r\n\r\n<p>the body</p>\r\n--alt--\r\n",
    _attachment("../../etc/passwd", BINARY),
    _attachment("/abs", b"abs\n"),
    _attachment(".bashrc", b"rm -rf ~\n"),
    _attachment("a\x1b]0;title\x07b\x1b[2J.txt", b"controls\n"),
    _attachment("invoice\u202efdp.exe", b"MZ\n"),
    _attachment(LONG, b"long\n"),
    b'Content-Type: application/pdf\r\nContent-Disposition: attachment; filename=""\r\n'
    b"Content-Transfer-Encoding: base64\r\n\r\n" + _b64(b"%PDF-1.4 nameless\n"),
    _attachment("report.pdf", b"first report\n"),
    _attachment("report.pdf", b"second report\n"),
    b'Content-Type: image/png\r\nContent-Disposition: inline; filename="logo.png"\r\n'
    b"Content-Transfer-Encoding: base64\r\n\r\n" + _b64(b"\x89PNG\r\n\x1a\nlogo"),
    b'Content-Type: multipart/mixed; boundary="nest"\r\n\r\n--nest\r\n'
    + _attachment("nested.csv", b"a,b\n1,2\n", "text/csv")
    + b"--nest--\r\n",
    b"Content-Type: message/rfc822\r\n\r\n" + INNER,
]
RAW = (
    b"From: sender@example.org\r\nTo: me@example.org\r\nSubject: attachments\r\n"
    b"Date: Wed, 26 Jun 2024 10:00:00 +0000\r\nMessage-ID: <att@example.org>\r\n"
    b'MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary="top"\r\n\r\n'
    + b"".join(b"--top\r\n" + p + b"\r\n" for p in PARTS)
    + b"--top--\r\n"
)
PLAIN = b"From: a@example.org\r\nSubject: none\r\nMessage-ID: <plain@example.org>\r\n\r\nhi\r\n"


def ml(store: Path, *argv: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [*MAILLEDGER, "--store", str(store), *argv],
        capture_output=True,
        cwd=REPO,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("attachments")
    src = tmp / "maildir"
    for sub in ("cur", "new", "tmp"):
        (src / sub).mkdir(parents=True)
    (src / "cur" / "1.M1P1.t:2,S").write_bytes(RAW)
    (src / "cur" / "2.M2P1.t:2,S").write_bytes(PLAIN)
    done = ml(tmp / "store", "import", "maildir", str(src))
    assert done.returncode == 0, done.stderr.decode()
    return tmp / "store"


def _listed(store: Path) -> list[dict[str, object]]:
    done = ml(store, "show", "att@example.org", "--json")
    assert done.returncode == 0, done.stderr.decode()
    attachments: list[dict[str, object]] = json.loads(done.stdout)["attachments"]
    return attachments


# -- the listing and --part ----------------------------------------------------------


def test_show_lists_each_attachment_with_its_part_number(store: Path) -> None:
    numbers = [a["part"] for a in _listed(store)]
    assert numbers == [5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 16, 20]
    done = ml(store, "show", "att@example.org")
    assert done.returncode == 0
    lines = [line for line in done.stdout.decode().splitlines() if line.startswith("Attachment:")]
    assert lines[0] == "Attachment: ../../etc/passwd (application/octet-stream, 10.0 KiB, part 5)"
    assert lines[-1] == "Attachment: inner.txt (application/octet-stream, 29 B, part 20)"


def test_part_writes_a_binary_attachment_byte_for_byte(store: Path) -> None:
    (passwd,) = [a for a in _listed(store) if a["filename"] == "../../etc/passwd"]
    done = ml(store, "show", "att@example.org", "--part", str(passwd["part"]))
    assert done.returncode == 0, done.stderr.decode()
    assert hashlib.sha256(done.stdout).hexdigest() == hashlib.sha256(BINARY).hexdigest()


def test_part_0_is_the_whole_message_and_part_1_its_root(store: Path) -> None:
    assert ml(store, "show", "id:att@example.org", "--part", "0").stdout == RAW
    root = ml(store, "show", "att@example.org", "--part=1").stdout
    assert root.startswith(b'Content-Type: multipart/mixed; boundary="top"\r\n')
    assert root.count(b"--top\r\n") == len(PARTS)
    # (the CRLF before a boundary is the boundary's, not the part's)
    assert ml(store, "show", "att@example.org", "--part=3").stdout == b"the body"


def test_part_of_an_attached_message_is_that_message(store: Path) -> None:
    done = ml(store, "show", "att@example.org", "--part", "17")
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.startswith(b"From: inner@example.org\r\nSubject: the forwarded one\r\n")
    assert done.stdout.rstrip(b"\r\n") == INNER.rstrip(b"\r\n")
    inner_file = ml(store, "show", "att@example.org", "--part", "20")
    assert inner_file.stdout == b"inside the forwarded message\n"


def test_a_part_the_message_lacks_exits_1_naming_the_parts_there_are(store: Path) -> None:
    done = ml(store, "show", "att@example.org", "--part", "21")
    assert (done.returncode, done.stdout) == (1, b"")
    assert b"no part 21 (its parts: 0 to 20" in done.stderr
    done = ml(store, "show", "att@example.org", "--part", "-1")
    assert done.returncode == 2 and b"--part" in done.stderr


# -- --save-attachments --------------------------------------------------------------


def _unsafe(name: str) -> bool:
    return any(unicodedata.category(c) in {"Cc", "Cf", "Cs", "Zl", "Zp"} for c in name)


def test_save_attachments_writes_every_attachment_under_a_safe_name(
    store: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"  # (a new name in a directory that exists: made)
    done = ml(store, "show", "att@example.org", "--save-attachments", str(out), "--json")
    assert done.returncode == 0, done.stderr.decode()
    saved = json.loads(done.stdout)
    assert [s["part"] for s in saved] == [a["part"] for a in _listed(store)]
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(s["saved_as"] for s in saved)  # nothing else, nothing outside
    assert {p.parent for p in out.iterdir()} == {out}
    assert not any(p.is_symlink() or not p.is_file() for p in out.iterdir())
    for name in names:
        assert not name.startswith((".", "-")) and not _unsafe(name), name
        assert len(name.encode()) <= 200
    by_part = {s["part"]: s["saved_as"] for s in saved}
    assert by_part[5] == "passwd" and (out / "passwd").read_bytes() == BINARY
    assert (by_part[6], by_part[7]) == ("abs", "bashrc")
    assert by_part[8] == "a_]0;title_b_[2J.txt"
    assert by_part[9] == "invoice_fdp.exe"
    assert by_part[10].endswith(".pdf") and by_part[10].startswith("xxxx")
    assert by_part[11] == "part-11.pdf"
    assert (by_part[12], by_part[13]) == ("report.pdf", "report (1).pdf")
    assert (out / "report.pdf").read_bytes() == b"first report\n"
    assert (out / "report (1).pdf").read_bytes() == b"second report\n"
    assert (out / by_part[14]).read_bytes() == b"\x89PNG\r\n\x1a\nlogo"  # (inline)
    assert (out / "nested.csv").read_bytes() == b"a,b\n1,2\n"
    assert (out / "inner.txt").read_bytes() == b"inside the forwarded message\n"
    assert oct((out / "passwd").stat().st_mode & 0o777) == "0o600"


def test_save_attachments_never_replaces_a_file_nor_writes_through_a_link(
    store: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    (out / "passwd").symlink_to(victim)
    (out / "bashrc").write_bytes(b"mine")
    (out / "abs").symlink_to(tmp_path / "nowhere")  # (dangling: never created through)
    done = ml(store, "show", "att@example.org", "--save-attachments", str(out))
    assert done.returncode == 0, done.stderr.decode()
    assert victim.read_bytes() == b"precious" and (out / "bashrc").read_bytes() == b"mine"
    assert not (tmp_path / "nowhere").exists()
    assert (out / "passwd (1)").read_bytes() == BINARY
    assert (out / "bashrc (1)").read_bytes() == b"rm -rf ~\n"
    assert (out / "abs (1)").read_bytes() == b"abs\n"
    text = done.stdout.decode()
    assert f"saved {out}/passwd (1) (application/octet-stream, {len(BINARY)} bytes, part 5" in text
    # saved twice: every file again beside the first, nothing replaced
    before = {p.name: p.read_bytes() for p in out.iterdir() if not p.is_symlink()}
    assert ml(store, "show", "att@example.org", "--save-attachments", str(out)).returncode == 0
    for name, data in before.items():
        assert (out / name).read_bytes() == data
    assert (out / "report (2).pdf").read_bytes() == b"first report\n"


def test_save_attachments_refuses_a_directory_it_cannot_use(store: Path, tmp_path: Path) -> None:
    a_file = tmp_path / "file"
    a_file.write_bytes(b"")
    for where in (a_file, tmp_path / "missing" / "out", "-"):
        done = ml(store, "show", "att@example.org", "--save-attachments", str(where))
        assert done.returncode == 2, (where, done.stderr.decode())
    assert not (tmp_path / "missing").exists()
    done = ml(store, "show", "nobody@x", "--save-attachments", str(tmp_path / "never"))
    assert done.returncode == 1 and not (tmp_path / "never").exists()


def test_save_attachments_of_a_message_without_any_says_so(store: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = ml(store, "show", "plain@example.org", "--save-attachments", str(out))
    assert (done.returncode, done.stdout) == (0, b"")
    assert b"<plain@example.org> has no attachments" in done.stderr
    assert os.listdir(out) == []
    quiet = ml(store, "-q", "show", "plain@example.org", "--save-attachments", str(out))
    assert (quiet.returncode, quiet.stderr) == (0, b"")

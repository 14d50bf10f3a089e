"""Mail never drives the reader's terminal (issue 35).

A store holding hostile mail (window-title and clipboard OSCs, a screen clear, an
OSC 8 link, a C1 CSI, bidirectional overrides and isolates, zero-width characters,
DEL) in its Subjects, display names, Message-IDs, attachment names, a Maildir file
name and a folder name on a real Dovecot is read with every command of the
parser, each a real ``mailledger`` process: no such character reaches stdout or
stderr as it is, and each is shown (``␛``, ``<U+202E>``). JSON carries the exact
strings; ``--raw`` and ``--format=ids|text0`` the exact bytes.

A command added to the parser without a row in ``COMMANDS`` fails
``test_every_command_of_the_parser_is_run_over_hostile_mail``.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pipeline.cli import build_parser

REPO = Path(__file__).resolve().parents[2]
MAILLEDGER = [sys.executable, "-m", "pipeline"]

# what a terminal obeys: a window title, the clipboard (OSC 52), a screen clear, a
# hyperlink (OSC 8), a C1 CSI, right-to-left override, isolates, zero-width, DEL
TITLE = "\x1b]0;owned\x07"
CLIPBOARD = "\x1b]52;c;cm0gLXJmIH4=\x07"
CLEAR = "\x1b[2J"
LINK = "\x1b]8;;http://evil.example/\x1b\\click\x1b]8;;\x1b\\"
HOSTILE = (
    f"{TITLE}{CLIPBOARD}{CLEAR}{LINK} \x9b31m \u202egnp.exe \u2066iso\u2069 z\u200bw\ufeff \x7f"
)
NAME = f"Boss\u202e\u2066{TITLE}"
FILENAME = f"invoice\u202efdp.exe{CLEAR}"
# a Message-ID holding ESC and a C1 CSI: stored without its C0 controls (the
# normalization of ids removes them), its C1 control kept
MID_SENT = f"evil{CLEAR}\x9b1m@example.org"
MID = "evil[2J\x9b1m@example.org"
REPLY_MID = "reply@example.org"
GONE_MID = "gone\u202e\x9b@example.org"  # deleted by the `delete` row
FOLDER = "Evil\u202e\u200bfdp\x9bx"  # (Dovecot refuses ESC in a new mailbox name, not these)
UNSAFE = {"Cc", "Cf", "Cs", "Zl", "Zp"}


def _word(text: str) -> str:
    return f"=?utf-8?b?{base64.b64encode(text.encode()).decode()}?="


def _message(mid: str, subject: str, *, reply_to: str | None = None) -> bytes:
    quoted = "".join(f"%{b:02X}" for b in FILENAME.encode())
    head = (
        (
            f"From: {_word(NAME)} <boss@example.org>\r\n"
            "To: me@example.org\r\n"
            f"Subject: {_word(subject)}\r\n"
            "Date: Wed, 26 Jun 2024 13:00:00 +0000\r\n"
            + (f"In-Reply-To: <{reply_to}>\r\n" if reply_to else "")
        ).encode()
        + b"Message-ID: <"
        + mid.encode()
        + b">\r\n"
    )
    return head + (
        b'MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary="b"\r\n\r\n'
        b"--b\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n"
        + f"body {CLEAR}{TITLE} \u202eright to left\r\n".encode()
        + b"--b\r\nContent-Type: application/octet-stream\r\n"
        + f"Content-Disposition: attachment; filename*=utf-8''{quoted}\r\n\r\n".encode()
        + b"AAAA\r\n--b--\r\n"
    )


RAW = _message(MID_SENT, HOSTILE)
REPLY = _message(REPLY_MID, f"Re: {HOSTILE}", reply_to=MID)
GONE = _message(GONE_MID, "to be deleted")


@dataclass
class Hostile:
    store: Path
    maildir: Path
    config: Path
    env: dict[str, str]
    tmp: Path


def ml(h: Hostile, *argv: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [*MAILLEDGER, "--store", str(h.store), *argv],
        capture_output=True,
        cwd=REPO,
        env=h.env,
        timeout=300,
        check=False,
    )


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory, dovecot: Any) -> Iterator[Hostile]:
    tmp = tmp_path_factory.mktemp("hostile")
    src = tmp / "maildir"
    for sub in ("cur", "new", "tmp"):
        (src / sub).mkdir(parents=True)
    (src / "cur" / "1.M1P1.t:2,S").write_bytes(RAW)
    (src / "cur" / "2.M2P1.t:2,S").write_bytes(REPLY)
    (src / "cur" / "3.M3P1.t:2,S").write_bytes(GONE)
    (src / f"notes{TITLE}.txt").write_bytes(b"")  # not mail: skipped and named (-v)
    dovecot.reset_user("plain")
    user = dovecot.user("plain")
    client = user.imap()
    try:
        client.create_folder(FOLDER)
    finally:
        client.logout()
    user.save(FOLDER, _message(f"imap{CLEAR}@example.org", HOSTILE))
    config = tmp / "config.toml"
    config.write_text(
        dovecot.account_toml("plain", folders=[FOLDER])
        + "\n[dispatch]\n"
        + f"import_path = [{json.dumps(str(REPO / 'tests' / 'integration'))}]\n"
        + 'default = "handlers.hostile:process"\n'
    )
    env = {**os.environ, **dovecot.password_env(), "HOME": str(tmp)}
    env.pop("MAILLEDGER_STORE", None)
    h = Hostile(tmp / "store", src, config, env, tmp)
    for argv in (("import", "maildir", str(src)), ("sync", "--config", str(config), "--apply")):
        done = ml(h, *argv)
        assert done.returncode == 0, done.stderr.decode()
    yield h


def _unsafe(data: bytes) -> list[str]:
    """The characters of ``data`` a terminal must not receive as they are (by
    Unicode's own categories, not by the code under test); undecodable bytes fail."""
    text = data.decode("utf-8")
    return [
        f"U+{ord(c):04X}" for c in text if c not in "\t\n" and unicodedata.category(c) in UNSAFE
    ]


Row = tuple[tuple[str, ...], int, str | None]  # argv, exit code, what must be shown
S = str  # (the store's paths, filled in per run)

# every command of the parser: how it is run over the hostile store, its exit code
# and a text it must show (None: it shows no mail). A command without a row fails.
COMMANDS: dict[str, Callable[[Hostile], list[Row]]] = {
    "import": lambda h: [(("-v", "import", "maildir", S(h.maildir)), 0, "notes␛]0;owned␇.txt")],
    "replay": lambda h: [(("replay",), 0, None)],
    "find": lambda h: [
        (("find", "from", "boss@example.org"), 0, "␛]52;c;cm0gLXJmIH4=␇"),
        (("find", "message-id", MID_SENT), 0, "evil[2J<U+009B>1m@example.org"),
        (("find", "subject", HOSTILE), 0, "<U+202E>gnp.exe"),
    ],
    "search": lambda h: [
        (("search", "from:boss"), 0, "␛]8;;http://evil.example/␛\\click"),
        (("search", "from:boss", "--output=threads"), 0, "<U+2066>iso<U+2069>"),
        (("search", "from:boss", "--output=messages"), 0, "evil[2J<U+009B>1m"),
        (("search", "from:boss", "--output=count"), 0, None),
        (("search", "from:boss", "--sort=relevance", "--limit=1"), 0, "␡"),
        (("search", f"subject:{CLEAR}x", "--explain"), 0, "subject:␛[2jx"),
        (("search", f"nothing{TITLE}"), 0, "nothing"),
        (("search", f"({TITLE}"), 2, "position"),
    ],
    "export": lambda h: [
        (("export", "from:boss", S(h.tmp / f"out{CLEAR}.mbox")), 0, "out␛[2J.mbox"),
        (("export", f"id:{MID}", f"id:{REPLY_MID}", S(h.tmp / "two.mbox")), 0, "exported 2"),
    ],
    "show": lambda h: [
        (("show", MID), 0, "invoice<U+202E>fdp.exe␛[2J"),
        (("show", REPLY_MID), 0, "z<U+200B>w<U+FEFF>"),
        (("show", f"missing{TITLE}"), 1, "missing"),
        (("show", f"id:{MID}", REPLY_MID), 0, "==> <evil[2J<U+009B>1m@example.org> <=="),
        (("show", f"thread:{MID}", f"id:none{TITLE}"), 1, "no message 'none"),
        (("show", MID, "--part", "3"), 0, None),
        (("show", MID, "--part", "9"), 1, "evil[2J<U+009B>1m@example.org"),
        (("show", MID, "--save-attachments", S(h.tmp / "att")), 0, "invoice_fdp.exe_[2J"),
        (("show", REPLY_MID, "--save-attachments", S(h.tmp / "att"), "--json"), 0, None),
    ],
    "thread": lambda h: [
        (("thread", REPLY_MID), 0, "Re: ␛]0;owned␇"),
        (("thread", REPLY_MID, "--as-of", "2"), 0, None),
        (("thread", f"thread:{MID}", f"id:{REPLY_MID}"), 0, "<evil[2J<U+009B>1m@example.org>"),
        (("thread", f"none{TITLE}", "--json"), 1, "no message 'none"),
    ],
    "delete": lambda h: [
        (("delete", GONE_MID), 0, "gone<U+202E><U+009B>@example.org"),
        (("delete", f"never{CLEAR}"), 1, "never"),  # (an error quoting the id)
    ],
    "query": lambda h: [
        (("query", "select message_id, from_addr, subject from messages"), 0, "␛]52;c;"),
        (("query", "select * from locations"), 0, "Evil<U+202E><U+200B>fdp<U+009B>x"),
        (("query", "select * from events"), 0, "Boss<U+202E>"),
        (("query", f'select 1 as "{CLEAR}"'), 0, "␛[2J"),
        (("query", f"select * from nowhere{TITLE}"), 2, "nowhere"),
    ],
    "verify": lambda h: [(("verify",), 0, None)],
    "compact": lambda h: [(("compact",), 0, None)],
    "stats": lambda h: [(("stats",), 0, None)],
    "sync": lambda h: [
        (("sync", "--config", S(h.config)), 0, "Evil<U+202E><U+200B>fdp<U+009B>x"),
        (("-v", "sync", "--config", S(h.config), "--apply"), 0, "Evil<U+202E>"),
    ],
    "dispatch": lambda h: [
        (("dispatch", "--config", S(h.config)), 1, "cannot handle: ␛]0;owned␇"),
    ],
    "cursor": lambda h: [
        (("cursor", "log", "plain", FOLDER), 0, "cursor=-->1"),
        (("cursor", "log", "plain", f"none{CLEAR}"), 0, "none␛[2J"),
    ],
    "cluster": lambda h: [
        (
            ("cluster", "init", S(h.tmp / f"c{CLEAR}"), "--shards", "2", "--config", S(h.config)),
            0,
            "cluster " + S(h.tmp / "c␛[2J"),
        ),
        (("cluster", "status", S(h.tmp / f"c{CLEAR}")), 0, "shard-001"),
        (("cluster", "status", S(h.tmp / f"none{TITLE}")), 1, "none␛]0;owned␇"),
    ],
    "web": lambda h: [
        (("web", "--listen", f"evil{CLEAR}.example:8025"), 2, "--token-file"),
        (("web", "--listen", f"127.0.0.1:x{TITLE}"), 2, "HOST:PORT"),
    ],
    "serve": lambda h: [
        (("serve", "status"), 1, None),  # (no server: says so, names the store)
        (("serve", "stop"), 0, None),
        (("serve", "--listen", f"evil{CLEAR}.example:8025"), 2, "evil␛[2J.example"),
    ],
    "publish": lambda h: [
        (("publish", "delta", S(h.tmp / "t")), 0, "store: seq 0 -> "),
        (("publish", "delta", S(h.tmp / f"t{CLEAR}")), 2, "t␛[2J: not a path delta-rs can use"),
        (
            ("publish", "delta", S(h.tmp / "t"), "--shard", f"s{TITLE}"),
            2,
            "name s␛]0;owned␇: letters",
        ),
        (("publish", "delta", S(h.tmp / "t"), "--json"), 0, None),
    ],
    "completion": lambda h: [(("completion", "bash"), 0, None)],
    "man": lambda h: [(("man",), 0, None)],
}


def _commands() -> set[str]:
    parser = build_parser({})
    subs = next(a for a in parser._actions if a.dest == "command")
    assert subs.choices is not None
    return set(subs.choices)


def test_every_command_of_the_parser_is_run_over_hostile_mail() -> None:
    """A new command is run below, over hostile mail, once it has a row."""
    assert _commands() == set(COMMANDS)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_no_command_writes_a_control_or_format_character_from_mail(
    hostile: Hostile, command: str
) -> None:
    for argv, code, shown in COMMANDS[command](hostile):
        done = ml(hostile, *argv)
        out, err = done.stdout, done.stderr
        assert done.returncode == code, (argv, err.decode())
        assert _unsafe(out) == [], (argv, out.decode())
        assert _unsafe(err) == [], (argv, err.decode())
        if shown is not None:  # (the hostile text is shown, not dropped)
            assert shown in (out + err).decode(), (argv, out.decode(), err.decode())


def test_json_carries_the_exact_strings_yet_no_raw_control(hostile: Hostile) -> None:
    outputs = {
        "search": ml(hostile, "search", f"id:{REPLY_MID}", "--format=json").stdout,
        "show": ml(hostile, "show", MID, "--json").stdout,
        "tree": ml(hostile, "thread", REPLY_MID, "--tree-json").stdout,
        "query": ml(hostile, "query", "select * from locations", "--json").stdout,
        "find": ml(hostile, "find", "subject", HOSTILE, "--json").stdout,
    }
    for name, out in outputs.items():
        assert _unsafe(out) == [], (name, out)
    assert json.loads(outputs["search"])[0]["subject"] == f"Re: {HOSTILE}"
    shown = json.loads(outputs["show"])
    assert shown["subject"] == HOSTILE and shown["message_id"] == MID
    assert shown["attachments"][0]["filename"] == FILENAME
    assert f"body {CLEAR}{TITLE} \u202eright to left" in shown["body"]
    tree = json.loads(outputs["tree"])
    assert tree[0]["message_id"] == MID and tree[0]["children"][0]["subject"] == f"Re: {HOSTILE}"
    assert FOLDER in {row["folder"] for row in json.loads(outputs["query"])}
    assert MID in json.loads(outputs["find"])


def test_raw_and_the_id_formats_keep_their_bytes(hostile: Hostile) -> None:
    assert ml(hostile, "show", MID, "--raw").stdout == RAW
    ids = ml(hostile, "search", f"id:{MID} OR id:{REPLY_MID}", "--sort=oldest", "--format=ids")
    assert ids.stdout == f"{MID}\n{REPLY_MID}\n".encode()
    nul = ml(hostile, "search", f"id:{MID}", "--output=messages", "--format=text0")
    assert nul.stdout == f"{MID}\0".encode()

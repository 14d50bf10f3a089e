"""Hostile mail for the web tests (tests/integration/test_web*.py): what a page
must show inert, a thread with a message never stored, an HTML part that tries
to run and to fetch."""

from __future__ import annotations

from pipeline.store import MessageStore

SCRIPT = "<script>alert('subject')</script>"
BREAKOUT = '"><img src=x onerror=alert(2)>'
RLO = "\u202e"
ESC = "\x1b"
# Message-IDs as the parser keeps them: a path, URL specials, a bidi override, quotes
HOSTILE_ID = "../../etc/passwd%2F?#\u202e@evil"
QUOTE_ID = "a'onmouseover=alert(1)'@x"
ROOT_ID = "root@example.org"
GHOST_ID = "never-stored@example.org"


def _hostile() -> bytes:
    subject = f"{SCRIPT} {BREAKOUT} {RLO}txt.exe {ESC}[2J"
    name = f"{RLO}evil {SCRIPT}"
    filename = f"../../x{BREAKOUT}{RLO}fdp.exe"
    html = (
        '<p style="color:red;background-image:url(http://tracker.example/bg)">'
        "Hello <b>there</b><script>alert('html')</script>"
        '<img src="http://tracker.example/pixel.png" onerror="alert(5)">'
        '<a href="javascript:alert(6)">click</a></p>'
    )
    return (
        f"From: =?utf-8?q?{_q(name)}?= <bad@evil.example>\n"
        f"To: ada@example.org\n"
        f"Subject: =?utf-8?q?{_q(subject)}?=\n"
        f"Date: Wed, 26 Jun 2024 10:00:00 +0000\n"
        f"Message-ID: <{HOSTILE_ID}>\n"
        f"In-Reply-To: <{ROOT_ID}>\n"
        "MIME-Version: 1.0\n"
        'Content-Type: multipart/mixed; boundary="MIX"\n\n'
        "--MIX\n"
        'Content-Type: multipart/alternative; boundary="ALT"\n\n'
        "--ALT\n"
        "Content-Type: text/plain; charset=utf-8\n\n"
        f"plain body {SCRIPT} {ESC}]52;c;x\n"
        "--ALT\n"
        "Content-Type: text/html; charset=utf-8\n\n"
        f"{html}\n"
        "--ALT--\n"
        "--MIX\n"
        "Content-Type: application/octet-stream\n"
        f"Content-Disposition: attachment; filename*=utf-8''{_pct(filename)}\n"
        "Content-Transfer-Encoding: base64\n\n"
        "aGVsbG8=\n"
        "--MIX--\n"
    ).encode()


def _q(text: str) -> str:
    return "".join(
        c if c.isascii() and c.isalnum() else "".join(f"={b:02X}" for b in c.encode()) for c in text
    )


def _pct(text: str) -> str:
    from urllib.parse import quote

    return quote(text, safe="")


def plain(mid: str, subject: str, *, reply_to: str | None = None, day: int = 1) -> bytes:
    head = f"From: ada@example.org\nTo: bob@example.org\nSubject: {subject}\n"
    head += f"Date: Mon, {day:02d} Jul 2024 09:00:00 +0000\nMessage-ID: <{mid}>\n"
    if reply_to:
        head += f"In-Reply-To: <{reply_to}>\nReferences: <{GHOST_ID}> <{reply_to}>\n"
    return (head + "\nbody of " + subject + "\n").encode()


def fill(store: MessageStore) -> None:
    """The store of the web tests: a thread (a root, the hostile reply, a reply to a
    ghost) and a message with a quote in its id."""
    store.add(None, plain(ROOT_ID, "live wire"), source="import:t", folder="INBOX")
    store.add(None, _hostile(), source="import:t", folder="INBOX")
    store.add(None, plain("reply@example.org", "Re: live wire", reply_to=ROOT_ID, day=2))
    store.add(None, plain(QUOTE_ID, "quoted id", day=3), source="import:t", folder="Archive")

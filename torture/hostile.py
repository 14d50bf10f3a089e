"""Hostile and broken mail: 10,000 generated malformed messages through the importer.

A seeded generator writes a Maildir of messages that break the rules on
purpose, one to three ways each: no header block at all, NUL bytes, raw 8-bit
and mis-declared charsets (UTF-7 words that decode to lone surrogates, UTF-16
of odd length, latin-1 labelled UTF-8), 1 MB header lines, invalid RFC 2047,
bogus and pre-1970 dates, self-referencing and looping References and
In-Reply-To, Message-IDs of 10 KB, duplicate Message-IDs with different
bodies, broken structure (CR-only lines, a leading continuation, 5,000
headers, a BOM, an mbox ``From `` line) and hostile addresses (5,000 nested
comments, unicode blanks, NULs, groups, routes).

``mailledger import maildir`` takes them (in this process, so a crash is a
traceback here), and then:

- zero crashes: exit 0, or 1 with every error counted and explained;
- counts balance, and every generated file is either stored (a location with
  its exact sha256, a blob that gives its exact bytes back) or an error with
  its reason: stored + errors = generated;
- every index value is one the parser could have produced: each stored
  message's raw bytes are parsed again and its ``header_index`` entries must
  be exactly what that parse gives (subject keys = ``normalize_subject`` of the
  parsed subject, addresses, date key, References...); and by shape: an
  address has one '@' and no blank or control character, a date key is
  ``YYYY-MM-DD``, a Message-ID has no '<', '>' or blank;
- the query side meets the index side: ``find`` by the raw Subject / From /
  Date header of a sample finds the message; ``walk_thread`` on every loop
  member returns its loop;
- ``verify()`` passes.

A slice goes through a real IMAP sync (Dovecot serves the same kind of mail):
the same checks, plus an idle re-run that downloads nothing and a delta that
raises no false ALARM.

    python -m torture.hostile                  # 10,000 messages (+ a 300-message IMAP slice)
    python -m torture.hostile --trials 500     # quick
"""

from __future__ import annotations

import base64
import hashlib
import random
import re
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torture import Result, cli_main
from torture.network import SyncDriver, run_cli

__all__ = [
    "FULL_TRIALS",
    "QUICK_TRIALS",
    "SEED",
    "Generated",
    "generate",
    "index_problems",
    "main",
    "write_maildir",
]

FULL_TRIALS = 10_000
QUICK_TRIALS = 400
SEED = 20261130
MB = 1 << 20

# -- the generator ---------------------------------------------------------------

Header = list[tuple[bytes, bytes]]


@dataclass
class Generated:
    name: str
    raw: bytes
    tags: tuple[str, ...]
    loop: str | None = None  # the loop group a message belongs to


@dataclass
class _State:
    rng: random.Random
    ids: list[bytes] = field(default_factory=list)  # Message-IDs handed out so far
    raws: list[bytes] = field(default_factory=list)  # a few earlier messages, for exact dups


def _b64(data: bytes) -> bytes:
    return base64.b64encode(data)


DATES = [
    b"Thu, 01 Jan 1970 00:00:00 +0000",
    b"Wed, 31 Dec 1969 23:59:59 -0000",
    b"Mon, 01 Jan 1900 00:00:00 +0000",
    b"Sat, 01 Jan 1601 00:00:00 +0000",
    b"Fri, 31 Dec 9999 23:59:60 -2359",
    b"Fri, 31 Dec 9999 23:59:59 +2359",
    b"Mon, 01 Jan 0001 00:00:00 +0100",
    b"01 Jan 0000 00:00:00 GMT",
    b"Tue, 31 Feb 2026 10:00:00 +0200",
    b"Mon, 32 Jan 2026 25:61:61 +9999",
    b"Mon, 01 Jan 2026 10:00:00 +99999",
    b"Mon, 01 Jan 2026 10:00:00 -2400",
    b"Mon, 01 Jan 2026 10:00:00 GMT+5",
    b"Mon, 01 Jan 2026 10:00:00 ZZZ",
    b"Mon, 01 Jan 2026 10:00:00 EST",
    b"1700000000",
    b"-1",
    b"yesterday",
    b"",
    b"Mon, 01 Jan 99999 00:00:00 +0000",
    b"Mon, 01 Foo 2026 00:00:00 +0000",
    b"2026-06-26T10:00:00Z",
    b"Sun, 29 Feb 2025 12:00:00 +0000",
    b"Sat, 29 Feb 2020 12:00:00 +0000",
    b"Mon, 1 Jan 69 00:00:00 +0000",
    b"Mon, 1 Jan 68 00:00:00 +0000",
    b"Mon, 01 Jan 2026 10:00 +0000",
    b"\x00\x00\x00",
    b"Mon, 01 Jan 2026 10:00:00 +0000 (CET) (extra) Mon, 02 Jan 2027",
]

BAD_2047 = [
    b"=?utf-8?x?abc?=",
    b"=?utf-8?q?abc",
    b"=?utf-8?b?!!!!?=",
    b"=??q?abc?=",
    b"=?utf-8??abc?=",
    b"=?utf-8*en?q?a?=",
    b"=?utf-8?q?a?==?utf-8?q?b?=",
    b"=?=?=?=?",
    b"=?utf-8?b?YWJj=?=",
    b"=?utf-8?b?YW?=",
    b"=?utf-8?q?=3D=3Futf-8=3Fq=3Fx=3F=3D?=",
    b"=?utf-8?q?=ZZ=?=",
    b"=?utf-8?B?" + b"A" * 5001 + b"?=",
    b"=?a?q?" * 2000,
    b"=?utf-8?q?" + b"=E9" * 3000 + b"?=",
]

CHARSET_LIES = [
    b"=?utf-8?q?caf=E9?=",
    b"=?iso-8859-1?b?" + _b64("caf\u00e9 \u2603".encode()) + b"?=",
    b"=?utf-7?q?+2ADYAA-?=",
    b"=?utf-7?b?" + _b64(b"+2ADcAA-") + b"?=",
    b"=?utf-7?q?+2D3cAA-x?=",
    b"=?utf-16?b?" + _b64(b"\xff\xfe\x00\xd8") + b"?=",
    b"=?utf-16?b?" + _b64(b"\xff\xfea") + b"?=",
    b"=?utf-16le?b?" + _b64(b"\x00\xdc\x41\x00") + b"?=",
    b"=?utf-32?b?" + _b64(b"\xff\xfe\x00\x00\x00\x00\x11\x00") + b"?=",
    b"=?shift_jis?b?" + _b64(b"\x81\x7f\xff\xfe\x80") + b"?=",
    b"=?gb2312?q?=FF=FF=A1?=",
    b"=?koi8-r?q?=F0=D2=C9=D7=C5=D4?=",
    b"=?unknown-8bit?q?=E9?=",
    b"=?x-mac-roman?q?=8E?=",
    b"=?us-ascii?q?=E9=00?=",
    b"=?utf-8?q?=00=01=1B[31m?=",
    b"=?utf-8?b?" + _b64("\u3000\u00a0\u2028\u200b".encode()) + b"?=",
    b"=?utf-8?b?" + _b64(b"\xed\xa0\x80") + b"?=",
]

_RAW_8BIT = [
    b"caf\xe9",
    b"caf\xc3\xa9",
    b"\xc3\x28",
    b"\xed\xa0\x80",
    b"\xf4\x90\x80\x80",
    b"\xff\xfe\xfd",
    b"\x93quoted\x94",
    b"\xe2\x80\xa8line\xe2\x80\xa9sep",
    b"\xef\xbb\xbfbom",
]

ADDRESSES = [
    b"(" * 5000 + b"a@b.example",
    b'"unbalanced <a@b.example>',
    b"undisclosed-recipients:;",
    b"group: a@b.example, c@d.example;, e@f.example",
    b"a@b@c.example",
    "a\u3000b@c.example".encode(),
    "a\u00a0b@c.example".encode(),
    "x\u2028y@c.example".encode(),
    b"a\tb@c.example",
    b"a\x00b@c.example",
    b"\x1c@b.example",
    b"a\x1fb@c.example",
    b"<>",
    b"<@a.example,@b.example:c@d.example>",
    b"a@b.example (comment (nested) more) c@d.example",
    b", ".join(b"u%d@many.example" % i for i in range(5000)),
    b"x" * 10_000 + b"@long.example",
    b"=?utf-8?q?J=C3=B6rg?= <jorg@x.example>",
    b'"a@b.example" <c@d.example>',
    b"a@[127.0.0.1]",
    b"<a@b.example",
    b"a@b.example>",
    b"\\",
    b"@",
    b"@@@",
    b"Name <>",
    b"<<a@b.example>>",
]

_LIST_IDS = [
    b"<>",
    b"<a b c>",
    b"List <LIST.Example.ORG>",
    b"<" + b"l" * 5000 + b".example>",
    b"(comment) <x.example> <y.example>",
    b"\x00<z.example>",
    b"no brackets at all",
]


def _base(st: _State, i: int) -> tuple[Header, bytes]:
    rng = st.rng
    mid = b"<h%d.%d@hostile.example>" % (i, rng.randrange(1 << 30))
    st.ids.append(mid)
    refs = b" ".join(rng.sample(st.ids, min(len(st.ids), rng.randint(0, 3))))
    headers: Header = [
        (b"From", b"Sender %d <sender%d@hostile.example>" % (i % 13, i % 13)),
        (b"To", b"me@hostile.example, Other <other%d@hostile.example>" % (i % 7)),
        (b"Subject", rng.choice([b"Re: ", b"Fwd: ", b"AW: ", b""]) + b"hostile %d" % (i % 97)),
        (b"Date", b"Tue, %02d Jun 2026 %02d:00:00 +0200" % (1 + i % 28, i % 24)),
        (b"Message-ID", mid),
    ]
    if refs:
        headers.append((b"References", refs))
        headers.append((b"In-Reply-To", refs.split()[-1]))
    body = b"body %d\r\n" % i + bytes(rng.randrange(32, 127) for _ in range(rng.randint(0, 300)))
    return headers, body


def _pick(headers: Header, name: bytes) -> int:
    for n, (k, _) in enumerate(headers):
        if k.lower() == name.lower():
            return n
    headers.append((name, b""))
    return len(headers) - 1


def _set(headers: Header, name: bytes, value: bytes) -> None:
    headers[_pick(headers, name)] = (name, value)


def m_nul(st: _State, h: Header, body: bytes) -> bytes:
    rng = st.rng
    n = rng.randrange(len(h))
    k, v = h[n]
    at = rng.randint(0, len(v))
    if rng.random() < 0.2:
        k = k[:1] + b"\x00" + k[1:]
    h[n] = (k, v[:at] + b"\x00" * rng.randint(1, 3) + v[at:])
    if rng.random() < 0.3:
        h.insert(rng.randint(0, len(h)), (b"X-Nul", b"\x00" * 20))
    return body + b"\x00\x00bin\x00ary\r\n"


def m_8bit(st: _State, h: Header, body: bytes) -> bytes:
    rng = st.rng
    for name in rng.sample([b"Subject", b"From", b"To", b"X-Junk"], rng.randint(1, 3)):
        _set(
            h,
            name,
            b"Name " + rng.choice(_RAW_8BIT) + b" <x%d@hostile.example>" % rng.randint(0, 9),
        )
    _set(
        h,
        b"Content-Type",
        b"text/plain; charset=" + rng.choice([b"us-ascii", b"utf-8", b"iso-8859-1", b"bogus"]),
    )
    return body + rng.choice(_RAW_8BIT) + b"\r\n"


def m_charset(st: _State, h: Header, body: bytes) -> bytes:
    rng = st.rng
    word = rng.choice(CHARSET_LIES)
    _set(
        h,
        rng.choice([b"Subject", b"From", b"To", b"Cc", b"X-Word"]),
        rng.choice([b"", b"Re: ", b"Name "]) + word + rng.choice([b"", b" <w@hostile.example>"]),
    )
    return body


def m_long_line(st: _State, h: Header, body: bytes) -> bytes:
    rng = st.rng
    kind = rng.randrange(5)
    if kind == 0:
        _set(h, b"Subject", b"Re: " + b"x" * MB)
    elif kind == 1:
        _set(h, b"References", b" ".join(b"<r%d@loop.example>" % j for j in range(60_000)))
    elif kind == 2:
        _set(h, b"To", b", ".join(b"u%d@wide.example" % j for j in range(60_000)))
    elif kind == 3:
        _set(h, b"X-Junk", bytes(rng.randrange(33, 127) for _ in range(4096)) * 256)
    else:
        _set(h, b"Subject", b"=?utf-8?q?a" * (MB // 11))
    return body


def m_bad_2047(st: _State, h: Header, body: bytes) -> bytes:
    rng = st.rng
    for _ in range(rng.randint(1, 2)):
        name = rng.choice([b"Subject", b"From", b"To", b"List-Id", b"Message-ID", b"Date"])
        _set(h, name, rng.choice(BAD_2047))
    return body


def m_bad_date(st: _State, h: Header, body: bytes) -> bytes:
    rng = st.rng
    if rng.random() < 0.6:
        value = rng.choice(DATES)
    else:
        year = rng.choice([-1, 0, 1, 99, 100, 1000, 1601, 1899, 1900, 1969, 1970, 2038, 9999,
                           10000, 99999])  # fmt: skip
        value = b"%s, %d %s %d %02d:%02d:%02d %s" % (
            rng.choice([b"Mon", b"Xyz", b""]),
            rng.randint(0, 40),
            rng.choice([b"Jan", b"Feb", b"Dec", b"Foo"]),
            year,
            rng.randint(0, 99),
            rng.randint(0, 99),
            rng.randint(0, 99),
            rng.choice([b"+0000", b"-2359", b"+9999", b"", b"UT", b"+2400"]),
        )
    _set(h, b"Date", value)
    if rng.random() < 0.2:
        h.append((b"Date", rng.choice(DATES)))
    return body


def m_long_msgid(st: _State, h: Header, body: bytes) -> bytes:
    rng = st.rng
    kind = rng.randrange(5)
    if kind == 0:
        mid = b"<" + b"a" * 10_240 + b"@big.example>"
    elif kind == 1:
        mid = b"<" + b"a b, c;" * 1500 + b"@big.example>"
    elif kind == 2:
        mid = b"<" * 5000 + b"x@big.example" + b">" * 5000
    elif kind == 3:
        mid = b"(" * 5000 + b"<c@big.example>" + b")" * 10
    else:
        mid = b"<>" * 5000
    mid = mid.replace(b"big", b"big%d" % rng.randrange(1 << 30))
    _set(h, b"Message-ID", mid)
    return body


def m_dup_id(st: _State, h: Header, body: bytes) -> bytes:
    rng = st.rng
    if len(st.ids) > 2:
        _set(h, b"Message-ID", rng.choice(st.ids[:-1]))
    return body + b"a different body %d\r\n" % rng.randrange(1 << 30)


def m_structure(st: _State, h: Header, body: bytes) -> bytes:
    rng = st.rng
    kind = rng.randrange(8)
    if kind == 0:
        h.insert(rng.randint(0, len(h)), (b"Sub ject", b"spaced name"))
    elif kind == 1:
        h.insert(rng.randint(1, len(h)), (b"", b"no name"))
    elif kind == 2:
        h.extend((b"X-Many-%d" % j, b"v") for j in range(5000))
    elif kind == 3:
        h.insert(rng.randint(0, len(h)), (b"Subj\xe9ct", b"non-ascii name"))
    elif kind == 4:
        n = rng.randrange(len(h))
        k, v = h[n]
        h[n] = (k, b"\r\n ".join(v[j : j + 1] for j in range(len(v[:200]))) + v[200:])
    elif kind == 5:
        h.insert(rng.randint(0, len(h)), (b"Just a line without a colon", b""))
    elif kind == 6:
        h.insert(0, (b"::::", b"::::"))
    else:
        h.append((b"X-Tab", b"\t\t\t"))
    return body


def m_address(st: _State, h: Header, body: bytes) -> bytes:
    rng = st.rng
    for name in rng.sample([b"From", b"To", b"Cc", b"Reply-To"], rng.randint(1, 2)):
        _set(h, name, rng.choice(ADDRESSES))
    return body


def m_list_id(st: _State, h: Header, body: bytes) -> bytes:
    _set(h, b"List-Id", st.rng.choice(_LIST_IDS))
    return body


Mutator = Callable[[_State, Header, bytes], bytes]
MUTATORS: dict[str, tuple[Mutator, float]] = {
    "nul": (m_nul, 10),
    "8bit": (m_8bit, 12),
    "charset-lie": (m_charset, 12),
    "long-line": (m_long_line, 0.6),
    "bad-2047": (m_bad_2047, 12),
    "bad-date": (m_bad_date, 14),
    "long-msgid": (m_long_msgid, 5),
    "dup-id": (m_dup_id, 8),
    "structure": (m_structure, 10),
    "address": (m_address, 12),
    "list-id": (m_list_id, 4),
}


def _no_headers(st: _State, i: int) -> bytes:
    rng = st.rng
    return rng.choice(
        [
            b"",
            b"\r\n\r\nonly a body %d" % i,
            b"\nbody after a blank first line %d\n" % i,
            b"just text without a colon %d\nand more\n" % i,
            b"   \n\t\n",
            b"\x00" * rng.randint(1, 200),
            bytes(rng.randrange(256) for _ in range(rng.randint(1, 3000))),
            b"\xef\xbb\xbf",
            b"From nobody Mon Jan  1 00:00:00 2026\n",
            b" leading continuation: %d\n\nbody" % i,
        ]
    )


def _serialize(st: _State, h: Header, body: bytes) -> bytes:
    rng = st.rng
    eol = rng.choices([b"\r\n", b"\n", b"\r", None], weights=[80, 12, 3, 5])[0]
    lines = [k + b": " + v if k != b"Just a line without a colon" else k for k, v in h]
    if eol is None:  # mixed endings
        out = b"".join(line + rng.choice([b"\r\n", b"\n", b"\r"]) for line in lines)
        eol = b"\n"
    else:
        out = eol.join(lines) + eol
    prefix = rng.choices([b"", b"\xef\xbb\xbf", b"From MAILER-DAEMON Fri Jul  8 12:08:34 2011\n"],
                         weights=[95, 3, 2])[0]  # fmt: skip
    return prefix + out + eol + body


def _loop_group(st: _State, i: int, k: int) -> list[tuple[bytes, str]]:
    """``k`` messages whose References / In-Reply-To form a cycle (k = 1: each
    refers to itself)."""
    ids = [b"<loop%d.%d@hostile.example>" % (i, j) for j in range(k)]
    out = []
    for j in range(k):
        h, body = _base(st, i + j)
        _set(h, b"Message-ID", ids[j])
        _set(h, b"In-Reply-To", ids[(j + 1) % k])
        rot = ids[j:] + ids[:j]
        _set(h, b"References", b" ".join(rot + [ids[j]] * st.rng.randint(0, 3)))
        out.append((_serialize(st, h, body), f"loop{i}"))
    return out


def generate(n: int, seed: int) -> Iterator[Generated]:
    """``n`` malformed messages (and a few clean controls), repeatable from ``seed``."""
    st = _State(random.Random(seed))
    rng = st.rng
    names = list(MUTATORS)
    weights = [MUTATORS[k][1] for k in names]
    i = 0
    while i < n:
        roll = rng.random()
        if roll < 0.05:
            raw, tags = _no_headers(st, i), ("no-headers",)
        elif roll < 0.09 and n - i >= 5:
            k = rng.randint(1, 5)
            for raw, group in _loop_group(st, i, k):
                yield Generated(f"{i:06d}", raw, ("refs-loop",), group)
                i += 1
            continue
        elif roll < 0.10 and st.raws:
            raw, tags = rng.choice(st.raws), ("exact-dup",)
        elif roll < 0.13:
            h, body = _base(st, i)
            raw, tags = _serialize(st, h, body), ("clean",)
        else:
            h, body = _base(st, i)
            chosen = sorted(set(rng.choices(names, weights=weights, k=rng.randint(1, 3))))
            for name in chosen:
                body = MUTATORS[name][0](st, h, body)
            raw, tags = _serialize(st, h, body), tuple(chosen)
        if len(st.raws) < 200 and len(raw) < 50_000 and rng.random() < 0.1:
            st.raws.append(raw)
        yield Generated(f"{i:06d}", raw, tags)
        i += 1


def write_maildir(root: Path, messages: Sequence[Generated]) -> None:
    """Messages into ``root/cur`` (and every tenth into a Maildir++ subfolder)."""
    for sub in ("cur", "new", "tmp", ".Sub/cur", ".Sub/new", ".Sub/tmp"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    for n, g in enumerate(messages):
        where = root / (".Sub/cur" if n % 10 == 9 else "cur")
        (where / f"{g.name}.hostile:2,S").write_bytes(g.raw)


# -- the checks ------------------------------------------------------------------

_DAY = re.compile(r"\d{4}-\d\d-\d\d\Z", re.ASCII)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def expected_entries(p: Any) -> set[tuple[str, str]]:
    """The (header, value) index entries a parsed message gives (the fold's rules)."""
    from projections.normalize import date_key, normalize_subject

    out: set[tuple[str, str]] = set()
    pairs: list[tuple[str, str | None]] = [
        ("subject", normalize_subject(p.subject)),
        ("from", p.from_addr),
        ("date", date_key(p.date_utc)),
        ("in-reply-to", p.in_reply_to),
        ("list-id", p.list_id),
        *(("to", a) for a in p.to_addrs),
        *(("references", r) for r in p.references),
    ]
    for header, value in pairs:
        if value is not None:
            out.add((header, value))
    return out


def shape(header: str, value: str) -> str | None:
    """Why an index value could not be one the parser produces, or None."""
    if header in ("from", "to"):
        if value.count("@") < 1 or any(c.isspace() for c in value) or _CONTROL.search(value):
            return "address with a blank, a control character or no '@'"
        if value != value.lower():
            return "address not lowercased"
    elif header == "date":
        if not _DAY.match(value):
            return "date key not YYYY-MM-DD"
    elif header in ("in-reply-to", "references", "list-id") and (
        not value or any(c in "<>" or c.isspace() for c in value) or _CONTROL.search(value)
    ):
        return "id with '<', '>', a blank or a control character"
    return None


def index_problems(store: Any, *, limit: int = 30) -> tuple[list[str], int]:
    """Every stored message parsed again from its blob; its index entries must be
    exactly those the parse gives, and every value well-shaped. Returns
    (problems, messages checked)."""
    from pipeline.parse import parse_message

    problems: list[str] = []
    entries: dict[str, set[tuple[str, str]]] = {}
    for r in store.query("SELECT header, value, message_id FROM header_index").to_pylist():
        entries.setdefault(r["message_id"], set()).add((r["header"], r["value"]))
        why = shape(r["header"], r["value"])
        if why:
            problems.append(f"{r['header']} {r['value'][:80]!r} of <{r['message_id'][:80]}>: {why}")
    rows = store.query("SELECT message_id, sha256 FROM messages").to_pylist()
    for r in rows:
        mid = r["message_id"]
        if not mid or any(c in "<>" or c.isspace() for c in mid) or _CONTROL.search(mid):
            problems.append(f"stored Message-ID {mid[:80]!r} is not normalized")
        p = parse_message(store.blobs.get(r["sha256"]))
        if p.message_id != mid:
            problems.append(f"<{mid[:80]}>: its bytes parse to <{p.message_id[:80]}>")
        want = expected_entries(p)
        have = entries.get(mid, set())
        if want != have:
            extra = sorted(have - want)[:2]
            missing = sorted(want - have)[:2]
            problems.append(
                f"<{mid[:60]}>: index holds {extra!r:.200}, parse gives {missing!r:.200}"
            )
        if len(problems) > limit:
            break
    for r in store.query("SELECT child, parent FROM thread_edges").to_pylist():
        for v in (r["child"], r["parent"]):
            if not v or any(c in "<>" or c.isspace() for c in v):
                problems.append(f"thread edge id {v[:80]!r} is not normalized")
                break
    return problems[:limit], len(rows)


def query_problems(store: Any, sample: Sequence[str]) -> list[str]:
    """``find`` by the raw header value finds the message (query side = index side)."""
    from pipeline.parse import parse_message
    from projections.normalize import date_key

    problems = []
    for mid in sample:
        rec = store.get(mid)
        if rec is None:  # counted over every id by _lookup_problems
            rows = store.query("SELECT sha256 FROM messages WHERE message_id = ?", [mid])
            rec = rows.to_pylist()[0]
        p = parse_message(store.blobs.get(rec["sha256"]))
        first = {name.lower(): value for name, value in reversed(p.headers)}
        if p.subject is not None and mid not in store.find("subject", p.subject):
            problems.append(f"find subject {p.subject[:60]!r} misses <{mid[:60]}>")
        if p.from_addr and mid not in store.find("from", first.get("from", "")):
            problems.append(f"find from {first.get('from', '')[:60]!r} misses <{mid[:60]}>")
        day = date_key(p.date_utc)
        if day and mid not in store.find("date", day):
            problems.append(f"find date {day} misses <{mid[:60]}>")
    return problems


def _lookup_problems(store: Any, ids: Sequence[str], figs: Figures) -> list[str]:
    """Every stored id, as ``find`` and ``stats`` print it, must fetch its message."""
    from projections.normalize import normalize_msgid

    suspects = [m for m in ids if normalize_msgid(m) != m]  # get() normalizes what it is given
    lost = [m for m in suspects if store.get(m) is None]
    figs.unfetchable = len(lost)
    if not lost:
        return []
    return [
        f"lookup: {len(lost)} of {len(ids)} stored Message-IDs are not found by get() with"
        f" themselves, e.g. <{lost[0][:60]}>"
    ]


# -- the campaign ----------------------------------------------------------------


@dataclass
class Figures:
    generated: int = 0
    by_tag: Counter[str] = field(default_factory=Counter)
    bytes: int = 0
    stored: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    messages: int = 0
    defects: Counter[str] = field(default_factory=Counter)
    synthetic: int = 0
    duplicates: int = 0
    loops: int = 0
    import_seconds: float = 0.0
    exit_code: int | None = None
    rerun: int | None = None  # exit code of a re-run after a failed import
    unfetchable: int = 0  # stored ids get() cannot find with themselves
    imap: dict[str, Any] = field(default_factory=dict)

    def lines(self) -> list[str]:
        top = ", ".join(f"{k}={v}" for k, v in self.defects.most_common(12))
        out = [
            f"hostile: {self.generated} messages generated ({self.bytes / MB:.0f} MB),"
            f" imported in {self.import_seconds:.0f}s, exit {self.exit_code}"
            + (f" (re-run: exit {self.rerun})" if self.rerun is not None else ""),
            "  malformations: " + ", ".join(f"{k}={v}" for k, v in sorted(self.by_tag.items())),
            f"  stored {self.stored} (as {self.messages} distinct Message-IDs;"
            f" {self.duplicates} same-id sightings kept as locations, {self.synthetic}"
            f" synthetic ids), errors {sum(self.errors.values())}"
            + (" by reason: " + ", ".join(f"{k}={v}" for k, v in self.errors.items())
               if self.errors else ""),
            f"  parser defects recorded (top): {top}",
            f"  loops walked: {self.loops}; stored ids get() cannot fetch: {self.unfetchable}",
        ]  # fmt: skip
        if self.imap:
            out.append(
                "  IMAP slice: "
                + ", ".join(f"{k}={v}" for k, v in self.imap.items() if k != "problems")
            )
        return out


def _check_import(store: Any, root: Path, msgs: Sequence[Generated], figs: Figures,
                  counts: dict[str, Any], rng: random.Random) -> list[str]:  # fmt: skip
    problems: list[str] = []
    source = f"import:maildir:{root.resolve()}"
    locs = {
        (r["uidl"], r["sha256"])
        for r in store.query(
            "SELECT uidl, sha256 FROM locations WHERE source = ?", [source]
        ).to_pylist()
    }
    reasons = counts.get("error_details", [])
    for g in msgs:
        sha = hashlib.sha256(g.raw).hexdigest()
        if (f"{g.name}.hostile", sha) in locs:
            figs.stored += 1
            if store.blobs.get(sha) != g.raw:
                problems.append(f"{g.name}: the blob does not give the bytes back")
        elif any(f"{g.name}.hostile" in why for why in reasons):
            why = next(w for w in reasons if f"{g.name}.hostile" in w)
            figs.errors[why.rsplit(": ", 1)[-1][:60]] += 1
        else:
            problems.append(f"{g.name} ({','.join(g.tags)}): neither stored nor a counted error")
    if figs.stored + sum(figs.errors.values()) != len(msgs):
        problems.append(f"stored {figs.stored} + errors {sum(figs.errors.values())}"
                        f" != generated {len(msgs)}")  # fmt: skip
    if counts.get("uids_seen") != len(msgs) or not counts.get("balanced"):
        problems.append(f"counts: seen {counts.get('uids_seen')} of {len(msgs)},"
                        f" balanced={counts.get('balanced')}")  # fmt: skip
    figs.messages = len(store.message_ids())
    figs.duplicates = figs.stored - figs.messages  # (also right after a re-run)
    for r in store.query("SELECT unnest(defects) AS d FROM messages").to_pylist():
        figs.defects[r["d"].split(":")[0]] += 1
    figs.synthetic = store.query(
        "SELECT count(*) AS n FROM messages WHERE synthetic_id"
    ).to_pylist()[0]["n"]
    idx, _ = index_problems(store)
    problems += idx
    ids = store.message_ids()
    problems += query_problems(store, rng.sample(ids, min(400, len(ids))))
    problems += _lookup_problems(store, ids, figs)
    groups: dict[str, list[str]] = {}
    from pipeline.parse import parse_message

    for g in msgs:
        parsed = parse_message(g.raw) if g.loop else None
        if parsed is not None and parsed.references:  # (a member whose header broke stands alone)
            groups.setdefault(str(g.loop), []).append(parsed.message_id)
    # each group's stored members once (a get() per member per member was quadratic in
    # the group, and each get() decodes the headers of a whole log file); get() only for
    # an id the store does not spell the same way
    stored_ids = set(ids)
    for members in groups.values():
        present = {m for m in members if m in stored_ids or store.get(m) is not None}
        for mid in members:
            if mid not in present:
                continue
            walked = set(store.walk_thread(mid))
            figs.loops += 1
            if not present <= walked:
                problems.append(f"walk_thread <{mid}> misses members of its loop")
    problems += [f"verify: {p}" for p in store.verify()]
    return problems


def run_import(work: Path, n: int, seed: int, figs: Figures) -> list[str]:
    from pipeline.store import MessageStore

    msgs = list(generate(n, seed))
    figs.generated = len(msgs)
    figs.bytes = sum(len(g.raw) for g in msgs)
    for g in msgs:
        figs.by_tag.update(g.tags)
    root = work / "maildir"
    write_maildir(root, msgs)
    store = work / "store"
    argv = ["--store", str(store), "import", "maildir", str(root), "--json"]
    t0 = time.monotonic()
    run = run_cli(argv, {})
    figs.import_seconds = time.monotonic() - t0
    figs.exit_code = run.code
    if run.traceback:
        return [f"import crashed: {run.traceback[-1500:]}"]
    problems = []
    if run.code == 1 and run.report is None:
        # the command failed as a whole (no counts): a failure, but is anything
        # lost? Re-run it as a person would, and check the store after that.
        problems.append(f"import failed, exit 1: {run.stderr.strip().splitlines()[0][:200]}")
        run = run_cli(argv, {})
        figs.rerun = run.code
    if run.code not in (0, 1) or run.report is None:
        return [*problems, f"import exit {run.code}: {run.stderr[-800:]}"]
    if run.code == 1 and not run.report.get("errors"):
        problems.append("import exit 1 without a counted error")
    s = MessageStore.open(store, create=False)
    try:
        with s.session():  # one projection connection for the thousands of look-ups
            problems += _check_import(s, root, msgs, figs, run.report, random.Random(seed))
    finally:
        s.close()
    return problems


def run_imap_slice(dv: Any, work: Path, n: int, seed: int, figs: Figures) -> list[str]:
    """``n`` hostile messages (none of the 1 MB ones) served by Dovecot, synced."""

    msgs = [g for g in generate(n * 2, seed + 1) if "long-line" not in g.tags][:n]
    dv.reset_user("fastmail")
    dv.bulk_maildir("fastmail", "INBOX", [g.raw for g in msgs])
    uids = dv.uids("fastmail", "INBOX")
    drv = SyncDriver(dv, work / "imap", dv.imap_port, folders=("INBOX",), timeout=30.0)
    first = drv.sync("--apply")
    problems: list[str] = []
    if first.traceback or first.code not in (0, 1) or first.report is None:
        return [f"IMAP sync: exit {first.code} {(first.traceback or first.stderr)[-800:]}"]
    inbox = first.folder(drv.account, "INBOX")
    counts = first.report["accounts"][drv.account]["counts"]
    if first.code == 1 and not counts.get("errors"):
        problems.append(f"IMAP sync exit 1 without a counted error: {first.stderr[-400:]}")
    with drv.open() as s:
        rows = s.query("SELECT DISTINCT uid FROM locations WHERE source = ?", [drv.account])
        located = {r["uid"] for r in rows.to_pylist()}
        failed = set(inbox.get("failed_uids") or [])
        lost = set(uids) - located - failed
        if lost:
            problems.append(f"IMAP: uids neither stored nor failed: {sorted(lost)[:10]}")
        idx, checked = index_problems(s)
        problems += [f"IMAP: {p}" for p in idx]
        problems += [f"IMAP verify: {p}" for p in s.verify()]
    again = drv.sync("--apply")
    if again.code != first.code or (again.report and again.folder(drv.account, "INBOX")["bodies"]):
        problems.append(f"IMAP idle re-run: exit {again.code}, bodies downloaded")
    dv.save("fastmail", "INBOX", msgs[0].raw + b"\r\nagain\r\n")
    delta = drv.sync("--apply")
    if delta.report and delta.report.get("alarms"):
        problems.append(f"IMAP delta: false ALARM {delta.report['alarms']}")
    figs.imap = {
        "messages": len(msgs),
        "uids": len(uids),
        "stored": len(located & set(uids)),
        "failed": len(failed),
        "exit": first.code,
        "bodies": inbox.get("bodies"),
        "checked": checked,
        "delta_exit": delta.code,
    }
    return problems


def main(trials: int = FULL_TRIALS, seed: int = SEED, workdir: Path | None = None) -> Result:
    """Generate ``trials`` hostile messages, import them, check; then the IMAP slice."""
    result = Result("hostile")
    t0 = time.monotonic()
    figs = Figures()
    work = Path(tempfile.mkdtemp(prefix="mailledger-torture-hostile-", dir=workdir))
    try:
        for p in run_import(work, trials, seed, figs):
            result.fail(p)
        from testkit.dovecot import Dovecot, find_dovecot

        if find_dovecot() is None:
            result.skipped.append("IMAP slice: dovecot not installed")
        else:
            dv = Dovecot(rawlog=False)
            dv.start()
            try:
                for p in run_imap_slice(dv, work, max(50, min(300, trials // 30)), seed, figs):
                    result.fail(p)
            finally:
                dv.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result.trials = figs.generated
    result.faults = figs.generated - figs.by_tag["clean"]
    result.figures = {
        "generated": figs.generated,
        "stored": figs.stored,
        "errors": dict(figs.errors),
        "messages": figs.messages,
        "by_tag": dict(figs.by_tag),
        "defects": dict(figs.defects),
        "imap": figs.imap,
    }
    result.seconds = time.monotonic() - t0
    print("\n".join(figs.lines()), flush=True)
    return result


if __name__ == "__main__":
    cli_main(main, FULL_TRIALS, SEED)

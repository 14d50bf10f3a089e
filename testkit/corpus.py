"""Deterministic, fast synthetic mail for benchmarks, tests and the demo.

``generate_messages(n, seed)`` yields ``(maildir_unique_name, raw_bytes)`` pairs that look
like a real mailbox: threads with ``In-Reply-To``/``References`` (and a few parents that were
never downloaded, so ghost nodes occur), mailing-list traffic with ``List-Id``, RFC 2047
encoded names and subjects, multipart/alternative and base64 attachments, odd and missing
dates, missing and duplicated Message-IDs and byte-identical copies. Messages come out in
delivery order and the names sort by date.

The bytes are assembled from templates and slices of a prose pool (built once per process,
~0.3 s, from a small English grammar), not with the ``email`` package (~5 ms a message):
about 25,000 messages (~275 MB) a second on one core. Sizes are roughly uniform over
2–20 KiB (mean ~11 KiB), and a message compresses ~2.7× with zstd (median; attachments
~1.6×, multipart/alternative ~3.6×), like real mail.

Everything is derived from ``random.Random`` instances seeded from ``seed``; nothing reads
the clock or global random state.

CLI::

    python -m testkit.corpus maildir bench-data/maildir 100000 --seed 1
    python -m testkit.corpus mbox bench-data/all.mbox 10000
"""

from __future__ import annotations

import argparse
import base64
import binascii
import functools
import math
import random
import re
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "MAX_SIZE",
    "MIN_SIZE",
    "absent_message_ids",
    "generate_messages",
    "main",
    "write_maildir",
    "write_mbox",
]

MIN_SIZE = 2 * 1024
"""No generated message is smaller than this many bytes."""
MAX_SIZE = 20 * 1024
"""No generated message is larger than this many bytes."""

# Dates spread over three years, fixed so that the corpus never depends on the clock.
_START = 1682899200  # 2023-05-01T00:00:00Z
_SPAN = 3 * 365 * 86400

# Rates from the brief (fractions of n unless said otherwise).
_P_LIST_THREAD = 0.30
_P_GHOST_PARENT = 0.05  # of messages that have replies
_P_NO_MSGID = 0.005
_P_BAD_DATE = 0.005
_RATE_DUP_ID = 0.002
_RATE_COPY = 0.003
_P_ALTERNATIVE = 0.28
_P_ATTACHMENT = 0.10
_CLAUSE_BANK = 800
_THREAD_MEAN = 4.0
_THREAD_MAX = 40
_REFS_MAX = 20
_N_SENDERS = 200

_OWNER_NAME = "Alex Morgan"
_OWNER_ADDR = "alex@home.example.net"

# --------------------------------------------------------------------------------------
# Word material for a tiny grammar: noun phrases, clauses and prepositional phrases are
# expanded into a bank once, then sentences are strung from Zipf-weighted bank entries, so
# the text repeats itself about as much as real mail does.


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


_NOUNS = _words("""
patch code problem issue release version file message server client list thread build
update fix user data idea reason number week meeting call review branch commit merge
option config value output input error warning log index query table column row field
header body folder mailbox account archive backup copy store search result performance
memory disk network connection timeout request response function module package library
script command path directory process design plan proposal draft document note comment
feedback team project customer invoice order payment budget report schedule deadline
benchmark regression workaround parser encoding attachment signature boundary duplicate
offset cursor snapshot migration schema event replay projection cache lock queue batch
worker job service deployment rollback dashboard ticket sprint roadmap milestone priority
estimate contract vendor quote delivery refund flight hotel dinner office laptop test
""")
_ADJS = _words("""
new old small large simple clear quick slow fast safe easy hard important useful correct
wrong broken missing obvious strange interesting current previous original final recent
main minor major general separate single whole full empty real local remote public
private internal external newer older stable flaky urgent next last same other
""")
_VERBS = _words("""
change test fix build update check send read write open close find show help ask take
call follow include consider allow handle measure compare merge review deploy run start
stop add remove move keep try use need expect rename split import export replace revert
""")
_VERBS_PAST = _words("""
changed tested fixed built updated checked sent read wrote opened closed found showed
helped asked took called followed included considered allowed handled measured compared
merged reviewed deployed ran started stopped added removed moved kept tried used needed
""")
_ADVS = _words("""
really probably actually maybe already almost quite usually often sometimes always never
soon still just also again finally
""")
_PRONS = ("I", "we", "you", "they", "someone", "nobody", "everyone", "he", "she")
_AUXS = ("should", "can", "will", "would", "might", "could", "must", "need to", "want to")
_PREPS = (
    "in",
    "on",
    "for",
    "with",
    "from",
    "after",
    "before",
    "during",
    "without",
    "about",
    "into",
    "over",
    "under",
    "between",
    "through",
    "against",
    "across",
)
_DETS = ("the", "the", "the", "a", "this", "that", "our", "your", "their", "every", "some")
_CONJS = (
    "and",
    "but",
    "so",
    "because",
    "although",
    "while",
    "since",
    "if",
    "when",
    "unless",
    "and then",
)
_TIMES = (
    "today",
    "tomorrow",
    "yesterday",
    "this week",
    "next week",
    "last week",
    "on Monday",
    "on Friday",
    "by Thursday",
    "in January",
    "in March",
    "after lunch",
    "this morning",
    "over the weekend",
    "before the release",
    "in Zurich",
    "in Berlin",
    "at the cafe",
)

# German and Polish sentences mixed into the pool: real inboxes are not all English.
_FOREIGN_SENTENCES = (
    "Vielen Dank für die schnelle Rückmeldung, das hilft uns sehr weiter.",
    "Können wir das nächste Woche in der Besprechung kurz durchgehen?",
    "Ich habe die Änderungen übernommen und die Tests laufen jetzt wieder grün.",
    "Die Lieferung verzögert sich leider um zwei Tage, wir melden uns.",
    "Dziękuję za szybką odpowiedź, sprawdzę to jeszcze dzisiaj.",
    "Czy możemy przełożyć spotkanie na czwartek po południu?",
    "Wysłałem poprawioną wersję dokumentu, proszę o uwagi do piątku.",
    "Zażółć gęślą jaźń, jak mówią testerzy polskich znaków.",
)

_FIRST_EN = _words(
    "Anna Ben Carla David Emma Frank Grace Henry Irene Jack Karen Liam Maria Noah Olivia "
    "Peter Quinn Rachel Sam Tina Umar Vera Will Xavier Yusuf Zoe Chris Dana Eli Fiona "
    "George Hannah Ivan Julia Kevin Laura Mike Nina Oscar Paula Ray Sara Tom Ursula Victor "
    "Wendy Adam Beth Colin Diane"
)
_LAST_EN = _words(
    "Smith Johnson Brown Taylor Wilson Clark Lewis Walker Hall Young King Wright Green "
    "Baker Adams Nelson Hill Campbell Mitchell Roberts Carter Phillips Evans Turner Parker "
    "Collins Edwards Stewart Morris Murphy Cook Rogers Morgan Cooper Reed Bailey Bell Kelly "
    "Howard Ward Cox Gray"
)
_NAMES_INTL = (
    # (display name, address local part); latin-1-safe names are sometimes Q-encoded in
    # ISO-8859-1, the rest always in UTF-8.
    ("Jürgen Müller", "j.mueller"),
    ("Günther Schröder", "gschroeder"),
    ("Björn Weiß", "bjoern.weiss"),
    ("Käthe Groß", "kaethe"),
    ("Jörg Bäcker", "joerg.baecker"),
    ("Süleyman Öztürk", "s.oeztuerk"),
    ("François Lefèvre", "f.lefevre"),
    ("Hélène Dubois", "helene.dubois"),
    ("José Núñez", "jose.nunez"),
    ("Søren Ødegaard", "soren"),
    ("Łukasz Wróbel", "lukasz.wrobel"),
    ("Małgorzata Wiśniewska", "m.wisniewska"),
    ("Paweł Kowalczyk", "pawel.k"),
    ("Zofia Łęcka", "zofia.lecka"),
    ("Grzegorz Brzęczyszczykiewicz", "grzegorz.b"),
    ("Agnieszka Wójcik", "a.wojcik"),
    ("Bartłomiej Żak", "bartek.zak"),
    ("Krzysztof Dąbrowski", "k.dabrowski"),
    ("Anja Kühn", "anja.kuehn"),
    ("Ingrid Åström", "ingrid"),
    ("Dvořák Antonín", "a.dvorak"),
    ("Zoë Ågren", "zoe.agren"),
)
_DOMAINS = (
    "example.com",
    "example.org",
    "example.net",
    "mail.example.com",
    "corp.example.com",
    "de.example.org",
    "pl.example.net",
    "uni.example.edu",
    "shop.example.com",
    "dev.example.org",
    "consulting.example.net",
    "hosting.example.com",
)
_LIST_NAMES = (
    "dev",
    "announce",
    "users",
    "security",
    "release",
    "infra",
    "docs",
    "ops",
    "design",
    "python-ideas",
    "kernel-janitors",
    "board",
    "social",
    "hiking",
    "book-club",
    "parents",
    "alumni",
    "postgres-general",
    "rust-users",
    "local-events",
)
_MAILERS = (
    "User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Thunderbird/128.3.1",
    "User-Agent: Mutt/2.2.12 (2023-09-09)",
    "X-Mailer: Microsoft Outlook 16.0",
    "X-Mailer: Apple Mail (2.3774.600.62)",
    "User-Agent: Evolution 3.50.4",
    "X-Mailer: git-send-email 2.43.0",
    "User-Agent: Roundcube Webmail/1.6.6",
    "User-Agent: K-9 Mail for Android",
    "",  # webmail that adds nothing
)
_TZ_OFFSETS = (0, 60, 120, 120, 60, -300, -240, -420, -480, 330, 540, 600, -180, 180, 0, 60)
_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("", "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_BAD_DATES = (
    "Date: Mon, 32 Foo 2024 25:61:00 +9999",
    "Date: sometime last tuesday",
    "Date: 2024-13-45T99:99:99",
    "Date: ",
    "Date: Thu, 31 Feb 2025 12:00:00 GMT+2",
)
_SUBJECT_TEMPLATES = (
    "Question about {w} {w}",
    "{W} {w} for the {w} release",
    "[PATCH v{d} {d}/{d}] {w}: {w} {w} {w}",
    "Meeting notes: {W} {w}",
    "Re-think the {w} {w}",
    "Invoice #{n} for {M}",
    "{W} {w} is {w} again",
    "Proposal: {w} {w} {w}",
    "Status update week {d}{d}",
    "Fwd: {W} {w} schedule",
    "Help with {w} {w} {w}?",
    "[RFC] {w} {w} in the {w} {w}",
    "Reminder: {w} {w} on {D}",
    "{W} {w} {w} {w} {w}",
    "Lunch on {D}?",
)
_SUBJECTS_INTL = (
    "Besprechung am Donnerstag – Änderungen",
    "Rückfrage zur Lieferung Nr. {n}",
    "Grüße aus München",
    "Spotkanie w przyszłym tygodniu",
    "Zażółć gęślą jaźń – test znaków",
    "Faktura nr {n} – prośba o korektę",
    "Réunion de l'équipe – ordre du jour",
    "Über die neue Größe der Dateien",
)
_REPLY_PREFIX = {"en": "Re: ", "de": "AW: ", "pl": "Odp: ", "fr": "RE: "}
_ATTACHMENTS = (
    ("application/pdf", "report-{n}.pdf", b"%PDF-1.5\n"),
    ("image/png", "screenshot-{n}.png", b"\x89PNG\r\n\x1a\n"),
    ("image/jpeg", "IMG_{n}.jpg", b"\xff\xd8\xff\xe0"),
    ("application/zip", "logs-{n}.zip", b"PK\x03\x04"),
    ("application/octet-stream", "dump-{n}.bin", b""),
    (
        "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        "budget-{n}.xlsx",
        b"PK\x03\x04",
    ),
)

# mboxrd quoting. A message never starts with "From " (Return-Path comes first), so only
# lines after a newline need it; anchoring on the newline is ~6x faster than ^ + MULTILINE.
_MBOX_FROM_RE = re.compile(rb"\n(>*From )")


# --------------------------------------------------------------------------------------
# Prose pool: built once per process, independent of the seed (the seed picks slices).


def _zipf_cum_weights(k: int, s: float = 1.0, q: float = 2.7) -> list[float]:
    acc = 0.0
    out = []
    for rank in range(k):
        acc += 1.0 / (rank + q) ** s
        out.append(acc)
    return out


def _wrap(text: str, width: int) -> list[str]:
    lines = []
    i, end = 0, len(text)
    while end - i > width:
        j = text.rfind(" ", i, i + width + 1)
        if j <= i:
            j = text.find(" ", i + width)
            if j < 0:
                break
        lines.append(text[i:j])
        i = j + 1
    lines.append(text[i:])
    return lines


def _noun_phrase(rng: random.Random) -> str:
    r = rng.random()
    det, noun = rng.choice(_DETS), rng.choice(_NOUNS)
    if r < 0.45:
        return f"{det} {noun}"
    if r < 0.8:
        return f"{det} {rng.choice(_ADJS)} {noun}"
    return f"{det} {rng.choice(_NOUNS)} {noun}"


def _clause(rng: random.Random) -> str:
    r = rng.random()
    c = rng.choice
    if r < 0.25:
        return f"{c(_PRONS)} {c(_AUXS)} {c(_VERBS)} {_noun_phrase(rng)}"
    if r < 0.45:
        return f"{c(_PRONS)} {c(_VERBS_PAST)} {_noun_phrase(rng)}"
    if r < 0.6:
        return f"{_noun_phrase(rng)} is {c(_ADVS)} {c(_ADJS)}"
    if r < 0.72:
        return f"{c(_PRONS)} {c(_ADVS)} {c(_VERBS_PAST)} {_noun_phrase(rng)}"
    if r < 0.82:
        return f"there is {_noun_phrase(rng)} {c(_PREPS)} {_noun_phrase(rng)}"
    if r < 0.92:
        return f"{c(_PRONS)} think {_noun_phrase(rng)} is {c(_ADJS)}"
    return f"{_noun_phrase(rng)} {c(_VERBS_PAST)} {_noun_phrase(rng)}"


def _modifier(rng: random.Random) -> str:
    if rng.random() < 0.3:
        return rng.choice(_TIMES)
    return f"{rng.choice(_PREPS)} {_noun_phrase(rng)}"


@functools.cache
def _prose_pool(size: int = 4 << 20) -> bytes:
    """About ``size`` bytes of wrapped prose paragraphs separated by blank lines.

    Clauses and modifiers come from a small grammar, expanded once into banks; sentences
    string Zipf-weighted bank entries together. Free word salad compresses like nothing
    anyone writes (~2.1x with zstd on 11 KiB); the banks give the text the repetition of
    real prose (~3x on an 11 KiB slice, ~2.75x for whole messages with their headers).
    """
    rng = random.Random(0x6D61696C)
    clauses = [_clause(rng) for _ in range(_CLAUSE_BANK)]
    mods = [_modifier(rng) for _ in range(_CLAUSE_BANK // 2)]
    c_stock = rng.choices(clauses, cum_weights=_zipf_cum_weights(len(clauses)), k=size // 40)
    m_stock = rng.choices(mods, cum_weights=_zipf_cum_weights(len(mods)), k=size // 80)
    ci = mi = 0
    parts: list[str] = []
    total = 0
    while total < size:
        if ci + 64 > len(c_stock):
            ci = 0
        if mi + 64 > len(m_stock):
            mi = 0
        kind = rng.random()
        width = 72 if rng.random() < 0.8 else 76
        if kind < 0.07:  # a bullet list
            k = rng.randint(2, 6)
            para = "\n".join("- " + x for x in c_stock[ci : ci + k])
            ci += k
        elif kind < 0.1:  # an indented log excerpt
            rows = []
            for _ in range(rng.randint(2, 8)):
                ts = f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"
                level = rng.choice(("INFO", "WARN", "ERROR", "DEBUG"))
                key = f"{rng.choice(_NOUNS)}.{rng.choice(_VERBS)}"
                rows.append(
                    f"    {ts} {level} {key}: {rng.choice(_ADJS)} {rng.choice(_NOUNS)}"
                    f" id={rng.randint(1, 99999)}"
                )
            para = "\n".join(rows)
        elif kind < 0.13:  # a link
            para = (
                f"See https://www.example.org/{rng.choice(_NOUNS)}/{rng.randint(100, 99999)}"
                f"#{rng.choice(_NOUNS)} for details."
            )
        else:
            sentences = []
            for _ in range(rng.randint(1, 6)):
                r = rng.random()
                if r < 0.001:
                    sentences.append(rng.choice(_FOREIGN_SENTENCES))
                    continue
                text = c_stock[ci]
                ci += 1
                if r < 0.35:
                    text = f"{text} {m_stock[mi]}"
                    mi += 1
                elif r < 0.6:
                    text = f"{text}, {rng.choice(_CONJS)} {c_stock[ci]}"
                    ci += 1
                elif r < 0.7:
                    text = f"{rng.choice(_ADVS).capitalize()} {text}"
                end = "." if rng.random() < 0.88 else rng.choice(("?", "!", "...", ":"))
                sentences.append(text[0].upper() + text[1:] + end)
            if rng.random() < 0.01:  # a body line starting "From ": mbox must quote it
                sentences[0] = "From what I can tell, " + sentences[0][0].lower() + sentences[0][1:]
            para = "\n".join(_wrap(" ".join(sentences), width))
        parts.append(para)
        total += len(para) + 2
    return ("\n\n".join(parts) + "\n\n").encode()


@functools.cache
def _base64_pool(size: int = 3 << 20) -> bytes:
    """Base64 of ``size`` pseudo-random bytes in 76-character lines (77 bytes with LF).

    Attachments are slices of it: ``base64.encodebytes`` per message costs ~50 us.
    """
    return base64.encodebytes(random.Random(0x62363420).randbytes(size // 57 * 57))


def _prose(pool: bytes, rng: random.Random, nbytes: int) -> bytes:
    """Whole lines of prose, starting at a paragraph, at most about ``nbytes`` long, ending
    at the end of a sentence where one is near."""
    nbytes = max(nbytes, 40)
    off = int(rng.random() * (len(pool) - nbytes - 4096))
    s = pool.find(b"\n\n", off) + 2
    e = pool.rfind(b".\n", s, s + nbytes) + 2
    if e < s + nbytes - 300:
        e = pool.rfind(b"\n", s, s + nbytes) + 1
        if e <= s:
            e = pool.find(b"\n", s) + 1
    return pool[s:e]


# --------------------------------------------------------------------------------------
# Headers helpers.


def _encode_word_b(text: str) -> str:
    """RFC 2047 UTF-8 B encoded words (split so each stays under 75 characters)."""
    out = []
    chunk = ""
    for ch in text:
        if len((chunk + ch).encode()) > 42:
            out.append(chunk)
            chunk = ""
        chunk += ch
    out.append(chunk)
    return " ".join("=?UTF-8?B?" + base64.b64encode(c.encode()).decode() + "?=" for c in out if c)


def _encode_word_q(text: str, charset: str) -> str:
    """RFC 2047 Q encoded words in ``charset`` (``ISO-8859-1`` or ``UTF-8``)."""
    codec = "latin-1" if charset == "ISO-8859-1" else "utf-8"
    words = []
    cur: list[str] = []
    cur_len = 0
    limit = 75 - len(charset) - 7
    for ch in text:
        if ch == " ":
            enc = "_"
        elif ch.isascii() and (ch.isalnum() or ch in "!*+-/"):
            enc = ch
        else:
            enc = "".join(f"={b:02X}" for b in ch.encode(codec))
        if cur_len + len(enc) > limit:
            words.append("".join(cur))
            cur, cur_len = [], 0
        cur.append(enc)
        cur_len += len(enc)
    words.append("".join(cur))
    return " ".join(f"=?{charset}?Q?{w}?=" for w in words if w)


def _encode_header_text(text: str, rng: random.Random) -> str:
    """``text`` as-is when ASCII, else as encoded words in a charset picked by ``rng``."""
    if text.isascii():
        return text
    r = rng.random()
    try:
        latin1_ok = bool(text.encode("latin-1"))
    except UnicodeEncodeError:
        latin1_ok = False
    if latin1_ok and r < 0.5:
        return _encode_word_q(text, "ISO-8859-1")
    if r < 0.75:
        return _encode_word_b(text)
    return _encode_word_q(text, "UTF-8")


@functools.lru_cache(maxsize=4096)
def _day_prefix(day: int) -> str:
    tm = time.gmtime(day * 86400)
    return f"{_DAYS[tm.tm_wday]}, {tm.tm_mday} {_MONTHS[tm.tm_mon]} {tm.tm_year} "


@functools.lru_cache(maxsize=64)
def _tz_suffix(off_min: int) -> str:
    a = abs(off_min)
    return f" {'+' if off_min >= 0 else '-'}{a // 60:02d}{a % 60:02d}"


def _fmt_date(epoch: int, off_min: int) -> str:
    """RFC 5322 date of ``epoch`` as seen in a zone ``off_min`` minutes east of UTC."""
    day, sec = divmod(epoch + off_min * 60, 86400)
    hour, sec = divmod(sec, 3600)
    minute, sec = divmod(sec, 60)
    return f"{_day_prefix(day)}{hour:02d}:{minute:02d}:{sec:02d}{_tz_suffix(off_min)}"


# --------------------------------------------------------------------------------------
# The plan: who writes what to whom, when, in which thread. Cheap, no bytes yet.


@dataclass(slots=True)
class _Person:
    name: str
    first: str
    addr: str
    from_hdr: str
    tz: int
    lang: str
    mailer: str
    signoff: bytes
    signature: bytes
    domain: str = ""
    head_prefix: str = ""  # Return-Path, Delivered-To and the start of the MX Received line


@dataclass(slots=True)
class _Thread:
    subject: str  # header-ready (encoded words), without reply prefix
    list_idx: int  # -1 when not list traffic
    participants: list[int]


@dataclass(slots=True)
class _Node:
    epoch: int
    thread: _Thread
    sender: int
    mid: str
    parent: _Node | None = None
    refs: tuple[str, ...] = ()
    depth: int = 0
    ghost: bool = False
    no_mid: bool = False
    bad_date: int = -1  # index into _BAD_DATES, or len(_BAD_DATES) for "no Date header"
    children: int = 0
    copy_of: _Node | None = None  # byte-identical copy of this node
    copies_pending: int = 0
    reply_style: int = 0


@dataclass(slots=True)
class _Plan:
    people: list[_Person]
    lists: list[tuple[str, str]]  # (To header value, header block from List-Id on)
    nodes: list[_Node] = field(default_factory=list)  # delivery order
    absent: set[str] = field(default_factory=set)


def _make_people(rng: random.Random) -> list[_Person]:
    people = []
    used: set[str] = set()
    intl = list(_NAMES_INTL)
    rng.shuffle(intl)
    for i in range(_N_SENDERS):
        if i == 0:
            name, local, cs, domain = _OWNER_NAME, "alex", "ascii", "home.example.net"
        elif i <= len(intl):
            name, local = intl[i - 1]
            cs = "intl"
            domain = rng.choice(_DOMAINS)
        else:
            first, last = rng.choice(_FIRST_EN), rng.choice(_LAST_EN)
            name = f"{first} {last}"
            local = rng.choice((f"{first}.{last}", f"{first[0]}{last}", first, f"{last}{i}"))
            local = local.lower()
            cs, domain = "ascii", rng.choice(_DOMAINS)
        addr = f"{local}@{domain}"
        while addr in used:
            addr = f"{local}{rng.randint(2, 99)}@{domain}"
        used.add(addr)
        first_name = name.split()[0]
        if "ł" in name or "ż" in name.lower() or "ą" in name or "ę" in name or "ś" in name:
            lang = "pl"
        elif any(c in name for c in "äöüßÄÖÜ"):
            lang = "de"
        elif any(c in name for c in "çèéÉ"):
            lang = "fr"
        else:
            lang = "en"
        r = rng.random()
        if cs == "ascii":
            if r < 0.15:
                from_hdr = f"{addr}"
            elif r < 0.3:
                last_first = f"{name.split()[-1]}, {first_name}"
                from_hdr = f'"{last_first}" <{addr}>'
            else:
                from_hdr = f"{name} <{addr}>"
        else:
            enc = _encode_header_text(name, rng)
            from_hdr = f"{enc} <{addr}>"
        tz = _TZ_OFFSETS[rng.randrange(len(_TZ_OFFSETS))]
        if lang in ("de", "pl", "fr"):
            tz = 60 if rng.random() < 0.5 else 120
        signoff = {
            "en": rng.choice(
                ("Thanks,\n{f}\n", "Best regards,\n{n}\n", "Cheers,\n{f}\n", "-- {f}\n")
            ),
            "de": "Viele Grüße\n{f}\n",
            "pl": "Pozdrawiam,\n{f}\n",
            "fr": "Cordialement,\n{n}\n",
        }[lang].format(f=first_name, n=name)
        company = domain.split(".")[0].capitalize()
        sig = (
            f"-- \n{name}\n{rng.choice(('Engineer', 'Manager', 'Support', 'Sales', 'CTO'))}"
            f" | {company}\n+{rng.randint(1, 99)} {rng.randint(100, 999)} "
            f"{rng.randint(1000000, 9999999)}\n"
        )
        people.append(
            _Person(
                name=name,
                first=first_name,
                addr=addr,
                from_hdr=from_hdr,
                tz=tz,
                lang=lang,
                mailer=_MAILERS[rng.randrange(len(_MAILERS))],
                signoff=signoff.encode(),
                signature=sig.encode() if rng.random() < 0.6 else b"",
            )
        )
    for i, person in enumerate(people):
        d = person.domain = person.addr.split("@")[1]
        person.head_prefix = (
            f"Return-Path: <{person.addr}>\nDelivered-To: {_OWNER_ADDR}\nReceived: from mail.{d} "
            f"(mail.{d} [192.0.2.{i % 250 + 1}])\n\tby mx1.home.example.net (Postfix) with "
            "ESMTPS id "
        )
    return people


def _make_subject(rng: random.Random) -> str:
    if rng.random() < 0.1:
        return rng.choice(_SUBJECTS_INTL).format(n=rng.randint(1000, 99999))
    tpl = rng.choice(_SUBJECT_TEMPLATES)
    out = []
    for piece in re.split(r"(\{[a-zA-Z]\})", tpl):
        if piece == "{w}":
            out.append(rng.choice(_NOUNS if rng.random() < 0.6 else _ADJS))
        elif piece == "{W}":
            out.append(rng.choice(_ADJS if rng.random() < 0.5 else _NOUNS).capitalize())
        elif piece == "{d}":
            out.append(str(rng.randint(1, 9)))
        elif piece == "{n}":
            out.append(str(rng.randint(1000, 99999)))
        elif piece == "{M}":
            out.append(rng.choice(_MONTHS[1:]))
        elif piece == "{D}":
            out.append(rng.choice(("Monday", "Tuesday", "Wednesday", "Thursday", "Friday")))
        else:
            out.append(piece)
    return "".join(out)


def _make_mid(rng: random.Random, epoch: int, domain: str, style: int) -> str:
    r = rng.getrandbits(64)
    if style == 0:
        tm = time.gmtime(epoch)
        return (
            f"{tm.tm_year}{tm.tm_mon:02d}{tm.tm_mday:02d}.{tm.tm_hour:02d}{tm.tm_min:02d}"
            f"{tm.tm_sec:02d}.{r:016x}@mail.{domain}"
        )
    if style == 1:
        tag = base64.urlsafe_b64encode(r.to_bytes(8, "big") + epoch.to_bytes(5, "big"))
        return f"CA{tag.decode().rstrip('=')}@mail.example.com"
    if style == 2:
        h = f"{r:016x}{epoch:010x}"
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:26]}@{domain}"
    return f"{epoch}.{r:x}.git-send-email@{domain}"


def _geometric(rng: random.Random) -> int:
    p = 1.0 / _THREAD_MEAN
    k = 1 + int(math.log(1.0 - rng.random()) / math.log(1.0 - p))
    return min(k, _THREAD_MAX)


def _plan(n: int, seed: int) -> _Plan:
    rng = random.Random(f"mailledger-corpus-plan:{seed}")
    people = _make_people(rng)
    lists = []
    for name in _LIST_NAMES:
        desc = f"{name.replace('-', ' ').title()} list"
        block = (
            f"List-Id: {desc} <{name}.lists.example.org>\n"
            f"List-Unsubscribe: <mailto:{name}-leave@lists.example.org>,\n"
            f" <https://lists.example.org/mailman/options/{name}>\n"
            f"List-Post: <mailto:{name}@lists.example.org>\nPrecedence: list"
        )
        lists.append((f"{desc} <{name}@lists.example.org>", block))
    plan = _Plan(people=people, lists=lists)
    n_copy = int(n * _RATE_COPY + 0.5) if n >= 10 else 0
    n_dup = int(n * _RATE_DUP_ID + 0.5) if n >= 10 else 0
    n_base = n - n_copy - n_dup
    base: list[_Node] = []
    mid_style = [rng.randrange(4) for _ in people]
    npeople = len(people)
    while len(base) < n_base:
        size = _geometric(rng)
        is_list = rng.random() < _P_LIST_THREAD
        list_idx = rng.randrange(len(lists)) if is_list else -1
        starter = rng.randrange(npeople)
        k_part = rng.randint(2, 8) if is_list else rng.randint(1, 3)
        participants = [starter, *(rng.randrange(npeople) for _ in range(k_part))]
        if not is_list and rng.random() < 0.7:
            participants.append(0)  # the mailbox owner takes part in most private threads
        subject_text = _make_subject(rng)
        if is_list and rng.random() < 0.5:
            subject_text = f"[{_LIST_NAMES[list_idx]}] {subject_text}"
        subject = _encode_header_text(subject_text, rng)
        thread = _Thread(subject=subject, list_idx=list_idx, participants=participants)
        t0 = _START + int(rng.random() * (_SPAN - 20 * 86400))
        nodes: list[_Node] = []
        # Most threads branch; some are long back-and-forth chains whose References hit the cap.
        p_chain = 0.97 if rng.random() < 0.2 else 0.6
        for i in range(size):
            if i == 0:
                sender, parent, epoch = starter, None, t0
            else:
                pi = i - 1 if rng.random() < p_chain else rng.randrange(i)
                parent = nodes[pi]
                sender = participants[rng.randrange(len(participants))]
                if sender == parent.sender:
                    sender = participants[(participants.index(sender) + 1) % len(participants)]
                epoch = parent.epoch + 30 + int(rng.expovariate(1.0 / 21600.0))
            p = people[sender]
            node = _Node(
                epoch=epoch,
                thread=thread,
                sender=sender,
                mid=_make_mid(rng, epoch, p.addr.split("@")[1], mid_style[sender]),
            )
            if parent is not None:
                chain = (*parent.refs, parent.mid)
                if len(chain) > _REFS_MAX:  # keep the root, drop the middle (RFC 5322 3.6.4)
                    chain = (chain[0], *chain[-(_REFS_MAX - 1) :])
                node.parent, node.refs, node.depth = parent, chain, parent.depth + 1
                parent.children += 1
                node.reply_style = rng.randrange(100)
            nodes.append(node)
        for node in nodes:
            if node.children and rng.random() < _P_GHOST_PARENT:
                node.ghost = True
        gen = [x for x in nodes if not x.ghost]
        room = n_base - len(base)
        if len(gen) > room:
            # Keep a prefix (parents precede children); ghosts left childless vanish.
            keep = gen[room - 1]
            nodes = nodes[: nodes.index(keep) + 1]
            kept = set(map(id, nodes))
            gen = [x for x in nodes if not x.ghost]
            for x in nodes:
                x.children = 0
            for x in nodes:
                if x.parent is not None and id(x.parent) in kept:
                    x.parent.children += 1
        for x in nodes:
            if x.ghost and x.children:
                plan.absent.add(x.mid)
        base.extend(gen)
    # Oddities. Missing Message-IDs only on messages nobody replies to, so that every
    # referenced id is either present or a deliberate ghost.
    leaves = [x for x in base if not x.children]
    for x in rng.sample(leaves, min(len(leaves), int(n * _P_NO_MSGID + 0.5))):
        x.no_mid = True
    for x in rng.sample(base, min(len(base), int(n * _P_BAD_DATE + 0.5))):
        x.bad_date = min(rng.randrange(2 * len(_BAD_DATES)), len(_BAD_DATES))  # half: no Date
    extra: list[_Node] = []
    with_mid = [x for x in base if not x.no_mid]
    for x in rng.sample(with_mid, min(len(with_mid), n_dup)):
        dup = _Node(
            epoch=x.epoch + rng.randint(60, 3 * 86400),
            thread=x.thread,
            sender=x.sender,
            mid=x.mid,
            parent=x.parent,
            refs=x.refs,
            depth=x.depth,
            bad_date=x.bad_date,
            reply_style=x.reply_style,
        )
        extra.append(dup)
    for x in rng.sample(base, min(len(base), n_copy)):
        cp = _Node(
            epoch=x.epoch + rng.randint(1, 2 * 86400), thread=x.thread, sender=x.sender, mid=x.mid
        )
        cp.copy_of = x
        x.copies_pending += 1
        extra.append(cp)
    allnodes = base + extra
    allnodes.sort(key=lambda x: x.epoch)  # stable: an original precedes its later copy
    plan.nodes = allnodes
    return plan


# --------------------------------------------------------------------------------------
# Rendering.


class _Renderer:
    def __init__(self, plan: _Plan, seed: int) -> None:
        self.plan = plan
        self.rng = random.Random(f"mailledger-corpus-render:{seed}")
        self.pool = _prose_pool()
        self.b64pool = _base64_pool()
        self.copies: dict[int, bytes] = {}

    def render(self, node: _Node, idx: int) -> bytes:
        if node.copy_of is not None:
            orig = node.copy_of
            data = self.copies[id(orig)]
            orig.copies_pending -= 1
            if not orig.copies_pending:
                del self.copies[id(orig)]
            return data
        data = self._render(node, idx)
        if node.copies_pending:
            self.copies[id(node)] = data
        return data

    def _render(self, node: _Node, idx: int) -> bytes:
        target = MIN_SIZE + 320 + int(self.rng.random() * (MAX_SIZE - MIN_SIZE - 370))
        # Sizes are planned to within ~100 bytes; the rare miss is rebuilt smaller/larger.
        for _ in range(8):
            data = self._build(node, idx, target)
            if len(data) > MAX_SIZE:
                target -= len(data) - MAX_SIZE + 200
            elif len(data) < MIN_SIZE:
                target += MIN_SIZE - len(data) + 200
            else:
                break
        return data

    def _build(self, node: _Node, idx: int, target: int) -> bytes:
        rng = self.rng
        rand = rng.random
        plan = self.plan
        people = plan.people
        thread = node.thread
        p = people[node.sender]
        delivered = node.epoch + 2 + int(rand() * 40)

        sdomain = p.domain
        h = [
            f"{p.head_prefix}{rng.getrandbits(40):010X}\n\tfor <{_OWNER_ADDR}>; "
            + _fmt_date(delivered, 0)
        ]
        if rand() < 0.5:
            h.append(
                f"Received: from [10.{idx % 250}.{node.sender % 250}.{idx % 199 + 2}] "
                f"(unknown [198.51.100.{idx % 250 + 1}])\n\tby mail.{sdomain} with ESMTPSA;"
                f" {_fmt_date(node.epoch + 1, p.tz)}"
            )
        if rand() < 0.4:
            sig = base64.b64encode(rng.randbytes(256)).decode()
            bh = base64.b64encode(rng.randbytes(32)).decode()
            h.append(
                f"DKIM-Signature: v=1; a=rsa-sha256; c=relaxed/relaxed; d={sdomain}; "
                f"s=s{idx % 3}; t={node.epoch};\n\th=from:to:subject:date:message-id;"
                f"\n\tbh={bh};\n\tb={sig[:70]}\n\t {sig[70:140]}\n\t {sig[140:210]}"
                f"\n\t {sig[210:280]}\n\t {sig[280:]}"
            )
        if node.bad_date < 0:
            h.append("Date: " + _fmt_date(node.epoch, p.tz))
        elif node.bad_date < len(_BAD_DATES):
            h.append(_BAD_DATES[node.bad_date])
        h.append("From: " + p.from_hdr)

        parent = node.parent
        if thread.list_idx >= 0:
            to = [plan.lists[thread.list_idx][0]]
        elif parent is not None:
            to = [people[parent.sender].from_hdr]
        else:
            to = [people[0 if node.sender else 1 + int(rand() * (len(people) - 1))].from_hdr]
        r = rand()
        extra = 0 if r < 0.55 else 1 if r < 0.85 else 2
        for _ in range(extra):
            if rand() < 0.7:
                other = people[thread.participants[int(rand() * len(thread.participants))]]
            else:
                other = people[int(rand() * len(people))]
            if other is not p and other.from_hdr not in to:
                to.append(other.from_hdr)
        h.append("To: " + ",\n ".join(to[:3]))
        if rand() < 0.25:
            cc = [people[int(rand() * len(people))] for _ in range(1 + int(rand() * 2))]
            cc_hdrs = [x.from_hdr for x in cc if x is not p and x.from_hdr not in to]
            if cc_hdrs:
                h.append("Cc: " + ",\n ".join(cc_hdrs))

        if parent is None:
            subject = thread.subject
        else:
            r = node.reply_style
            if r < 4:
                subject = "Fwd: " + thread.subject
            elif r < 8:
                subject = f"RE[{min(node.depth, 9) + 1}]: {thread.subject}"
            elif r < 12 and node.depth > 1:
                subject = "Re: Re: " + thread.subject
            else:
                subject = _REPLY_PREFIX[p.lang] + thread.subject
        h.append("Subject: " + subject)
        if not node.no_mid:
            h.append(f"Message-ID: <{node.mid}>")
        if parent is not None:
            h.append(f"In-Reply-To: <{parent.mid}>")
            h.append("References: " + "\n ".join(f"<{m}>" for m in node.refs))
        if thread.list_idx >= 0:
            h.append(plan.lists[thread.list_idx][1])
        if p.mailer:
            h.append(p.mailer)
        h.append("MIME-Version: 1.0")
        head = "\n".join(h).encode()

        # Body text: greeting, optional quote of the parent, prose, sign-off, signature.
        avail = target - len(head) - 130
        r = rand()
        att_raw = int((avail - 900) * (0.4 + 0.4 * rand()) / 1.351)  # base64: 4/3 + newlines
        if r < _P_ATTACHMENT and att_raw > 64:
            kind = 2
            text_budget = avail - int(att_raw * 1.351) - 260
        elif r < _P_ATTACHMENT + _P_ALTERNATIVE:
            kind = 1
            text_budget = int((avail - 330) / 2.06)
        else:
            kind = 0
            text_budget = avail
        text = self._text(node, p, parent, text_budget)

        if kind == 0:
            ctype, cte, text = self._text_part_headers(text)
            return b"".join((head, b"\n", ctype, b"\n", cte, b"\n\n", text))
        boundary = self._boundary(p, idx)
        bb = boundary.encode()
        ctype, cte, tpart = self._text_part_headers(text)
        parts = [b"".join((ctype, b"\n", cte, b"\n\n", tpart))]
        if kind == 1:
            parts.append(self._html_part(text))
            mtype = "alternative"
        else:
            ctype_a, fname, magic = _ATTACHMENTS[int(rand() * len(_ATTACHMENTS))]
            fname = fname.format(n=1000 + int(rand() * 9000))
            # A fresh first line carrying the file magic, then whole lines of the shared pool
            # (57 bytes each), then a fresh last line with the padding.
            lines = max(att_raw // 57 - 1, 0)
            b64 = self.b64pool
            start = int(rand() * (len(b64) // 77 - lines)) * 77
            parts.append(
                f'Content-Type: {ctype_a}; name="{fname}"\nContent-Disposition: attachment; '
                f'filename="{fname}"\nContent-Transfer-Encoding: base64\n\n'.encode()
                + base64.encodebytes(magic + rng.randbytes(57 - len(magic)))
                + b64[start : start + lines * 77]
                + base64.encodebytes(rng.randbytes(1 + int(rand() * 56)))
            )
            mtype = "mixed"
        delim = b"\n--" + bb + b"\n"
        body = b"--" + bb + b"\n" + delim.join(parts) + b"\n--" + bb + b"--\n"
        pre = b"This is a multi-part message in MIME format.\n\n" if rand() < 0.3 else b""
        top = f'Content-Type: multipart/{mtype};\n boundary="{boundary}"\n\n'.encode()
        return head + b"\n" + top + pre + body

    def _text(self, node: _Node, p: _Person, parent: _Node | None, budget: int) -> bytes:
        rand = self.rng.random
        pieces: list[bytes] = []
        if rand() < 0.6:
            who = (
                self.plan.people[parent.sender].first
                if parent is not None
                else "all"
                if node.thread.list_idx >= 0
                else "Alex"
            )
            pieces.append(f"Hi {who},\n\n".encode())
        tail = p.signoff + (b"\n" + p.signature if p.signature else b"")
        quote = b""
        if parent is not None and rand() < 0.7:
            qp = self.plan.people[parent.sender]
            qlen = int(budget * (0.1 + 0.4 * rand()))
            q = _prose(self.pool, self.rng, qlen)
            intro = f"On {_fmt_date(parent.epoch, qp.tz)}, {qp.name} wrote:\n> ".encode()
            quote = intro + q[:-1].replace(b"\n", b"\n> ") + b"\n"
        rest = budget - sum(map(len, pieces)) - len(tail) - len(quote) - 2
        prose = _prose(self.pool, self.rng, rest)
        if quote and node.reply_style % 2:  # top-posted reply
            pieces += (prose, b"\n", tail, b"\n", quote)
        elif quote:
            pieces += (quote, b"\n", prose, b"\n", tail)
        else:
            pieces += (prose, b"\n", tail)
        return b"".join(pieces)

    def _text_part_headers(self, text: bytes) -> tuple[bytes, bytes, bytes]:
        if text.isascii():
            if self.rng.random() < 0.5:
                return (
                    b'Content-Type: text/plain; charset="us-ascii"',
                    b"Content-Transfer-Encoding: 7bit",
                    text,
                )
            return (
                b"Content-Type: text/plain; charset=UTF-8; format=flowed",
                b"Content-Transfer-Encoding: 7bit",
                text,
            )
        if self.rng.random() < 0.1:  # b2a_qp costs ~65 us, as much as the rest of a message
            return (
                b'Content-Type: text/plain; charset="utf-8"',
                b"Content-Transfer-Encoding: quoted-printable",
                binascii.b2a_qp(text),
            )
        return (
            b"Content-Type: text/plain; charset=UTF-8",
            b"Content-Transfer-Encoding: 8bit",
            text,
        )

    def _html_part(self, text: bytes) -> bytes:
        esc = text.replace(b"&", b"&amp;").replace(b"<", b"&lt;").replace(b">", b"&gt;")
        html = (
            b'<html>\n<head>\n<meta http-equiv="Content-Type" content="text/html; '
            b'charset=utf-8">\n</head>\n<body>\n<div dir="ltr"><p>'
            + esc.replace(b"\n\n", b"</p>\n<p>")
            + b"</p></div>\n</body>\n</html>\n"
        )
        if html.isascii():
            cte = b"7bit"
        elif self.rng.random() < 0.8:
            cte = b"8bit"
        else:
            html, cte = binascii.b2a_qp(html), b"quoted-printable"
        return (
            b'Content-Type: text/html; charset="utf-8"\nContent-Transfer-Encoding: '
            + cte
            + b"\n\n"
            + html
        )

    def _boundary(self, p: _Person, idx: int) -> str:
        r = self.rng.getrandbits(64)
        m = p.mailer
        if "Outlook" in m:
            return f"_000_{r:016X}_"
        if "Apple" in m:
            return f"Apple-Mail={r:016X}"
        if not m:
            return f"000000000000{r:016x}"
        return f"------------{r:016x}{idx:06d}"


# --------------------------------------------------------------------------------------
# Public API.


def _unique_name(epoch: int, idx: int) -> str:
    pid = 1000 + ((epoch // 86400) * 2654435761) % 60000
    return f"{epoch}.M{idx}P{pid}.bench"


def generate_messages(n: int, seed: int = 1) -> Iterator[tuple[str, bytes]]:
    """Yield ``(maildir_unique_name, raw_bytes)`` for ``n`` messages, deterministic for
    ``(n, seed)``.

    Messages come in delivery order; the unique name is ``<epoch>.M<i>P<pid>.bench`` with
    the delivery time first, so sorting names sorts by date. Bytes use LF line endings.
    """
    if n < 0:
        raise ValueError("n must be >= 0")
    plan = _plan(n, seed)
    renderer = _Renderer(plan, seed)
    for idx, node in enumerate(plan.nodes):
        data = renderer.render(node, idx)
        yield _unique_name(node.epoch + 3 + idx % 7, idx), data


def absent_message_ids(n: int, seed: int = 1) -> frozenset[str]:
    """Message-IDs that replies reference but that ``generate_messages(n, seed)`` never
    yields: parents deliberately "never downloaded", which become ghost thread nodes."""
    return frozenset(_plan(n, seed).absent)


def _folder_dirs(root: Path, folders: Sequence[str]) -> list[Path]:
    dirs = []
    for name in folders:
        d = root if name.upper() == "INBOX" else root / ("." + name.lstrip("."))
        for sub in ("cur", "new", "tmp"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        dirs.append(d)
    return dirs


def write_maildir(
    root: Path,
    n: int,
    seed: int = 1,
    folders: Sequence[str] = ("INBOX", "Archive", "lists.dev"),
) -> int:
    """Write a Maildir++ tree of ``n`` messages under ``root`` and return the bytes written.

    ``INBOX`` is ``root`` itself and any other folder is ``root/.<name>``; each has ``cur/``,
    ``new/`` and an empty ``tmp/``. Most messages land in the first folder, mailing-list
    traffic mostly in a folder whose name starts with ``lists`` (if any), the rest spread
    over the others. The newest ~2% sit unread in ``new/``; the others are in ``cur/`` with
    ``:2,S`` (a few ``:2,RS``, ``:2,FS`` or unseen ``:2,``).
    """
    root = Path(root)
    if not folders:
        folders = ("INBOX",)
    root.mkdir(parents=True, exist_ok=True)
    for sub in ("cur", "new", "tmp"):
        (root / sub).mkdir(exist_ok=True)
    dirs = _folder_dirs(root, folders)
    list_dirs = [i for i, f in enumerate(folders) if f.lstrip(".").lower().startswith("lists")]
    others = [i for i in range(1, len(folders)) if i not in list_dirs] or [0]
    rng = random.Random(f"mailledger-corpus-maildir:{seed}")
    cur = [str(d / "cur") + "/" for d in dirs]
    new = [str(d / "new") + "/" for d in dirs]
    n_new = max(1, n // 50) if n >= 50 else 0
    total = 0
    for idx, (name, data) in enumerate(generate_messages(n, seed)):
        r = rng.random()
        if list_dirs and data.find(b"\nList-Id: ", 0, data.find(b"\n\n")) >= 0 and r < 0.8:
            fi = list_dirs[int(rng.random() * len(list_dirs))]
        elif r < 0.75 or len(folders) == 1:
            fi = 0
        else:
            fi = others[int(rng.random() * len(others))]
        if idx >= n - n_new:
            path = new[fi] + name
        else:
            f = rng.random()
            flags = "S" if f < 0.84 else "RS" if f < 0.92 else "FS" if f < 0.95 else ""
            path = f"{cur[fi]}{name}:2,{flags}"
        with open(path, "wb") as fh:
            fh.write(data)
        total += len(data)
    return total


def write_mbox(path: Path, n: int, seed: int = 1) -> int:
    """Write ``n`` messages to one mboxrd file at ``path`` and return the bytes written.

    Each message starts with a ``From <sender> <asctime>`` line; body lines matching
    ``>*From `` get one more ``>``; a blank line separates messages.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    total = 0
    sub = _MBOX_FROM_RE.sub
    with open(path, "wb", buffering=1 << 20) as fh:
        for name, data in generate_messages(n, seed):
            epoch = int(name.split(".", 1)[0])
            sender = (
                data[14 : data.index(b">", 14)]
                if data.startswith(b"Return-Path: <")
                else b"MAILER-DAEMON"
            )
            stamp = time.strftime("%a %b %d %H:%M:%S %Y", time.gmtime(epoch)).encode()
            chunk = b"From " + sender + b" " + stamp + b"\n" + sub(rb"\n>\1", data)
            if not chunk.endswith(b"\n"):
                chunk += b"\n"
            chunk += b"\n"
            fh.write(chunk)
            total += len(chunk)
    return total


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m testkit.corpus maildir DIR N [--seed S]`` or ``... mbox FILE N``."""
    parser = argparse.ArgumentParser(
        prog="python -m testkit.corpus",
        description="Write deterministic synthetic mail for benchmarks and demos.",
        epilog="example: python -m testkit.corpus maildir bench-data/maildir 100000 --seed 1",
    )
    sub = parser.add_subparsers(dest="format", required=True)
    for fmt, target in (("maildir", "DIR"), ("mbox", "FILE")):
        sp = sub.add_parser(fmt, help=f"write a {fmt}")
        sp.add_argument("target", metavar=target, type=Path)
        sp.add_argument("n", metavar="N", type=int, help="number of messages")
        sp.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    if args.format == "maildir":
        nbytes = write_maildir(args.target, args.n, args.seed)
    else:
        nbytes = write_mbox(args.target, args.n, args.seed)
    dt = time.perf_counter() - t0
    print(
        f"wrote {args.n} messages, {nbytes / 1e6:.1f} MB to {args.target} in {dt:.1f} s "
        f"({args.n / dt if dt else 0:.0f} msg/s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

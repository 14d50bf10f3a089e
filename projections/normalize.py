"""The one copy of the header normalization rules (SPEC §3, "Header indices").

Index building and querying both call these functions, so a value typed by a
user and a value read from a message meet in the same key: ``Fwd: Re: Live
Wire`` and ``live wire`` give the same subject key, ``<Foo@Bar>`` and
``Foo@Bar`` the same Message-ID.

Everything here is pure, stdlib-only and total on ``str`` input: garbage gives
``None`` (or an empty list), never an exception, and no function uses a regular
expression that can backtrack catastrophically, so a 1 MB header costs time in
proportion to its length.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import UTC, date, datetime, timedelta
from email.utils import getaddresses, parsedate_tz

__all__ = [
    "INDEXED_HEADERS",
    "addresses",
    "date_key",
    "index_value",
    "msgid_list",
    "normalize_address",
    "normalize_header_name",
    "normalize_list_id",
    "normalize_msgid",
    "normalize_subject",
    "parse_date",
    "query_date_key",
]

# --------------------------------------------------------------------------
# Message-IDs
# --------------------------------------------------------------------------

# One token is a run of ordinary characters, a backslash with the character it
# quotes, or one of the four structural characters. The loop in _scan_msgids
# runs once per token, not once per character, and the pattern cannot backtrack.
_MSGID_TOKEN = re.compile(r"[^()<>\\]+|\\.?|[()<>]", re.DOTALL)
_BARE_SPLIT = re.compile(r"[\s,;]+")
_BRACKETED = re.compile(r"<([^<>]*)")
# C0 controls and DEL never belong in an id; whitespace is removed by split().
_CONTROLS = dict.fromkeys([*range(0x20), 0x7F])


def _clean_id(text: str) -> str:
    """Return ``text`` with every whitespace and control character removed."""
    if text.isprintable() and " " not in text:  # the common case, checked in C
        return text
    return "".join(text.split()).translate(_CONTROLS)


def _scan_msgids(value: str) -> tuple[list[str], list[str]]:
    """Split a header value into bracketed ids and bare words.

    Returns ``(bracketed, bare)``: the cleaned, non-empty contents of every
    ``<...>`` in order, and the words found outside brackets (computed only
    when there is no bracketed id, the one case callers use them). Comments
    ``(...)`` (nested, with ``\\`` quoting) are dropped; inside brackets
    everything up to ``>`` is id text. A ``<`` inside brackets ends the
    unclosed id before it (``<a@b <c@d>`` gives both), and an id left open at
    the end of the value is kept. An unclosed comment runs to the end.
    """
    if "(" not in value and "\\" not in value:
        # Without comments or quoting, each "<" opens an id that runs to the
        # next "<" or ">": the loop below would find exactly these.
        fast = [ident for ident in map(_clean_id, _BRACKETED.findall(value)) if ident]
        if fast:
            return fast, []
    bracketed: list[str] = []
    bare: list[str] = []
    depth = 0
    current: list[str] | None = None
    for match in _MSGID_TOKEN.finditer(value):
        token = match.group()
        if depth:
            if token == "(":
                depth += 1
            elif token == ")":
                depth -= 1
        elif current is not None:
            if token == ">" or token == "<":
                ident = _clean_id("".join(current))
                if ident:
                    bracketed.append(ident)
                current = [] if token == "<" else None
            else:
                current.append(token)
        elif token == "<":
            current = []
        elif token == "(":
            depth = 1
        elif token == ")" or token == ">":
            bare.append(" ")
        else:
            bare.append(token)
    if current:
        ident = _clean_id("".join(current))
        if ident:
            bracketed.append(ident)
    words = [_clean_id(word.strip("\"'")) for word in _BARE_SPLIT.split("".join(bare))]
    return bracketed, [word for word in words if word]


def normalize_msgid(value: str | None) -> str | None:
    """Return one Message-ID as it is stored and indexed, or None.

    Angle brackets, comments, folding and any other whitespace or control
    characters are removed; case is kept (``" <Foo@Bar> (c)"`` -> ``"Foo@Bar"``).
    The first bracketed id wins. Without brackets, the first word containing
    ``@`` is taken, or the only word when there is exactly one (so a user may
    type ``id`` or ``<id>``). Returns None when nothing usable is left.
    """
    if not value:
        return None
    bracketed, bare = _scan_msgids(value)
    if bracketed:
        return bracketed[0]
    for word in bare:
        if "@" in word:
            return word
    return bare[0] if len(bare) == 1 else None


def msgid_list(value: str | None) -> list[str]:
    """Return every Message-ID of a References / In-Reply-To value, in order.

    Duplicates are removed (the first one is kept). When the value holds any
    ``<...>`` id, only bracketed ids count, so the prose of
    ``<a@b> (Joe's message of Mon...)`` or ``Your message of ... <a@b>`` is
    ignored; when it holds none, every bare word containing ``@`` is taken
    (``a@b c@d``). Returns ``[]`` for a missing or id-less value.
    """
    if not value:
        return []
    bracketed, bare = _scan_msgids(value)
    candidates = bracketed or [word for word in bare if "@" in word]
    return list(dict.fromkeys(candidates))


# --------------------------------------------------------------------------
# Subject
# --------------------------------------------------------------------------

# Applied to a lowercased, whitespace-collapsed subject, so at most one space
# sits between parts and the pattern stays linear. Each repetition must eat a
# prefix word and a colon, which also makes the repetition unambiguous.
_REPLY_PREFIXES = re.compile(
    r"(?:(?:re|fwd?|aw|wg|sv|vs|odp|pd|antw|rif|tr) ?(?:\[\d+\]|\(\d+\))? ?: ?)+"
)


def normalize_subject(value: str | None) -> str | None:
    """Return the subject key: lowercased, reply/forward prefixes stripped.

    Leading ``Re``, ``Fwd``, ``Fw``, ``AW``, ``WG``, ``SV``, ``VS``, ``Odp``,
    ``PD``, ``Antw``, ``Rif`` and ``Tr`` prefixes are removed repeatedly, with
    optional ``[n]`` / ``(n)`` counters and any spacing around the colon
    (``RE :``, ``Re[2]:``, ``Re:Re:``); whitespace is collapsed to single
    spaces and the ends stripped. A subject of prefixes only gives ``""``;
    None gives None.

    Mailing-list tags such as ``[list]`` are deliberately kept, and stripping
    stops at them: ``Re: [list] Re: x`` gives ``[list] re: x``. Guessing which
    brackets are tags would make the key unpredictable for users.
    """
    if value is None:
        return None
    text = " ".join(value.lower().split())
    match = _REPLY_PREFIXES.match(text)
    if match:
        text = text[match.end() :]
    return text.strip()


# --------------------------------------------------------------------------
# Addresses
# --------------------------------------------------------------------------

_ADDR_TOKEN = re.compile(r'[^()"\\]+|\\.?|[()"]', re.DOTALL)
_ADDR_FALLBACK_SPLIT = re.compile(r'[\s<>(),;:"\[\]]+')


def _strip_comments(value: str) -> str:
    """Return ``value`` with RFC 5322 comments replaced by a space.

    Quoted strings are kept whole, so ``"Joe (work)" <j@x>`` keeps its
    parenthesis. Done here rather than in ``getaddresses``, which recurses once
    per nested ``(`` and so fails on hostile input.
    """
    if "(" not in value and ")" not in value:
        return value
    out: list[str] = []
    depth = 0
    quoted = False
    for match in _ADDR_TOKEN.finditer(value):
        token = match.group()
        if depth:
            if token == "(":
                depth += 1
            elif token == ")":
                depth -= 1
        elif quoted:
            out.append(token)
            if token == '"':
                quoted = False
        elif token == "(":
            depth = 1
            out.append(" ")
        elif token == ")":
            out.append(" ")
        else:
            out.append(token)
            if token == '"':
                quoted = True
    return "".join(out)


# Characters that make an address list need the real parser: quoting,
# comments, groups, domain literals, quoted-pairs.
_HARD_ADDRESS_CHARS = frozenset('"():;[]\\')
_SIMPLE_ADDR_SPEC = re.compile(r"[^\s<>@,;:\\\"()\[\]]+@[^\s<>@,;:\\\"()\[\]]+")


def _simple_addr_specs(value: str) -> list[str] | None:
    """Return the addr-specs of a plain address list, or None if it is not one.

    Plain means comma-separated ``addr`` or ``Name <addr>`` entries with no
    quoting, comments or groups: most real headers. For those this gives what
    ``getaddresses`` gives (a property test checks it) at a fraction of the
    cost; anything else returns None and goes to ``getaddresses``.
    """
    if not _HARD_ADDRESS_CHARS.isdisjoint(value):
        return None
    specs: list[str] = []
    for entry in value.split(","):
        entry = entry.strip()
        if not entry:
            continue
        if entry.endswith(">"):
            open_at = entry.rfind("<")
            if open_at < 0:
                return None
            name, spec = entry[:open_at], entry[open_at + 1 : -1]
            if "<" in name or ">" in name or "@" in name:
                return None
        else:
            spec = entry
        if not _SIMPLE_ADDR_SPEC.fullmatch(spec):
            return None
        specs.append(spec)
    return specs


def _addr_specs(value: str) -> list[str]:
    """Return the raw addr-specs ``getaddresses`` finds in one header value.

    Should the stdlib parser fail (it recurses on nested groups), fall back to
    the words that contain ``@``.
    """
    simple = _simple_addr_specs(value)
    if simple is not None:
        return simple
    cleaned = _strip_comments(value)
    try:
        return [addr for _name, addr in getaddresses([cleaned])]
    except Exception:
        return [word for word in _ADDR_FALLBACK_SPLIT.split(cleaned) if "@" in word]


def addresses(values: Iterable[str]) -> list[str]:
    """Return the lowercased addr-specs of some address header values.

    Each value (a To, Cc or From header) is parsed with
    ``email.utils.getaddresses`` after its comments are removed; display names
    are dropped. Only results containing ``@`` are kept: bare local parts,
    group names (``undisclosed-recipients:;``) and empties are dropped. Order
    is kept and duplicates removed. A single ``str`` is taken as one value.
    """
    if isinstance(values, str):
        values = [values]
    seen: dict[str, None] = {}
    for value in values:
        if not value:
            continue
        for addr in _addr_specs(value):
            spec = addr.strip().lower()
            if "@" in spec:
                seen.setdefault(spec, None)
    return list(seen)


def normalize_address(value: str) -> str | None:
    """Return the first addr-spec of a query value, lowercased, or None.

    ``"Joe <JOE@Example.com>"`` -> ``"joe@example.com"``.
    """
    found = addresses([value])
    return found[0] if found else None


# --------------------------------------------------------------------------
# List-Id
# --------------------------------------------------------------------------


def normalize_list_id(value: str | None) -> str | None:
    """Return the RFC 2919 list identifier, lowercased, or None.

    ``Fedora devel <fedora-devel-list.redhat.com>`` ->
    ``fedora-devel-list.redhat.com``. The phrase and comments are dropped;
    with several ``<...>`` the last one is taken (the id follows the phrase).
    Without brackets the last word is taken, so a bare ``foo.example.org``
    gives itself.
    """
    if not value:
        return None
    bracketed, bare = _scan_msgids(value)
    if bracketed:
        return bracketed[-1].lower()
    return bare[-1].lower() if bare else None


# --------------------------------------------------------------------------
# Dates
# --------------------------------------------------------------------------

_DAY = re.compile(r"\d{4}-\d{2}-\d{2}", re.ASCII)
# parsedate_tz turns "+HHMM" into seconds without bounds; beyond ±99:99 the
# zone is not a zone and the date is not trusted.
_MAX_OFFSET_S = 100 * 3600


def parse_date(value: str | None) -> tuple[datetime | None, int | None]:
    """Return ``(utc_datetime, offset_minutes)`` for an RFC 2822 date.

    The datetime is timezone-aware UTC; the offset is the one the date was
    written in (``-0500`` -> ``-300``). ``-0000``, a missing zone and a zone
    name the stdlib does not know are read as UTC with offset 0. Two-digit
    years follow the stdlib (69-99 -> 19xx, 00-68 -> 20xx); offsets up to
    ±99 hours are applied as written. Anything unparseable, out of range or
    missing gives ``(None, None)``, never a 1970 stand-in; real pre-1970 dates
    are returned as they are. Never raises.
    """
    if not value:
        return None, None
    try:
        parts = parsedate_tz(value)
        if parts is None:
            return None, None
        year, month, day, hour, minute, second = parts[:6]
        offset = parts[9] or 0
        if not (0 <= hour <= 23 and 0 <= minute <= 59 and 0 <= second <= 60):
            return None, None
        if abs(offset) >= _MAX_OFFSET_S:
            return None, None
        # Built by hand rather than with timezone(): tzinfo offsets must stay
        # under 24 h, and a leap second (:60) rolls into the next minute.
        written = datetime(year, month, day, hour, minute, tzinfo=UTC)
        utc = written + timedelta(seconds=second - offset)
        return utc, offset // 60
    except Exception:
        return None, None


def date_key(dt: datetime | None) -> str | None:
    """Return the UTC calendar day of ``dt`` as ``YYYY-MM-DD``, or None.

    A naive datetime is taken to be UTC already.
    """
    if dt is None:
        return None
    try:
        if dt.tzinfo is not None:
            dt = dt.astimezone(UTC)
    except (OverflowError, ValueError):
        return None
    return f"{dt.year:04d}-{dt.month:02d}-{dt.day:02d}"


def query_date_key(value: str) -> str | None:
    """Return the date index key for a query value, or None.

    Takes a day (``2026-06-26``, returned as is when it is a real date) or a
    full RFC 2822 date, converted to its UTC day like an indexed header.
    """
    if not value:
        return None
    text = value.strip()
    if _DAY.fullmatch(text):
        try:
            date.fromisoformat(text)
        except ValueError:
            return None
        return text
    return date_key(parse_date(text)[0])


# --------------------------------------------------------------------------
# Query side: which index, which key
# --------------------------------------------------------------------------

_HEADER_INDEX = {
    "subject": "subject",
    "from": "from",
    "to": "to",
    "cc": "to",
    "date": "date",
    "in-reply-to": "in-reply-to",
    "references": "references",
    "list-id": "list-id",
    "message-id": "message-id",
}

INDEXED_HEADERS: frozenset[str] = frozenset(_HEADER_INDEX.values())
"""The index names ``normalize_header_name`` can return."""


def normalize_header_name(name: str) -> str | None:
    """Return the index a ``find(header, value)`` call targets, or None.

    Case-insensitive, surrounding spaces and a trailing colon ignored; ``Cc``
    maps to the ``to`` index. Headers that are not indexed give None.
    """
    if not name:
        return None
    return _HEADER_INDEX.get(name.strip().rstrip(":").strip().lower())


def index_value(header: str, value: str) -> str | None:
    """Return the index key for a query ``value`` on ``header``, or None.

    ``header`` is any header name ``normalize_header_name`` accepts. The value
    goes through the same function the index builder uses, so the key matches
    the stored one. None means no key can match (an unknown header or a
    value that normalizes to nothing).
    """
    index = normalize_header_name(header)
    if index is None or value is None:
        return None
    if index == "subject":
        return normalize_subject(value)
    if index in ("from", "to"):
        return normalize_address(value)
    if index == "date":
        return query_date_key(value)
    if index == "list-id":
        return normalize_list_id(value)
    return normalize_msgid(value)

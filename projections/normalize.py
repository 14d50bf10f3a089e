"""The one copy of the header normalization rules (README, "Rules it follows").

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
from typing import NamedTuple

__all__ = [
    "DATE_REPAIRS",
    "INDEXED_HEADERS",
    "DateReading",
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
    "read_date",
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

# RFC 5322 §3.3 with the obsolete forms of §4.3, read after the comments are
# gone and the white space is squeezed to single spaces (``_squeeze_date``), a
# space allowed around every part (obs-FWS is optional there): an optional day of
# week (its comma optional too, as it is seen written), day, month and year
# (the RFC 850 dashes allowed), the time (its seconds optional, an AM/PM seen in
# the wild), and a zone. The zone is taken loosely here (any run of signs, any
# number of digits, any word) so that ``_zone`` can repair what can be repaired
# and say so. A name after a numeric zone (``+0100 CET``) is passed over: the
# number says it all. Every part is bounded or followed by a distinct class, so
# nothing backtracks more than the length of the text.
_RFC_DATE = re.compile(
    r"(?:[a-z]+ ?,? ?)?"
    r"(?P<day>\d{1,2})[ -]?(?P<month>[a-z]+)[ -]?(?P<year>\d{1,6}) "
    r"(?P<hour>\d{1,2}) ?: ?(?P<minute>\d{2})(?: ?: ?(?P<second>\d{2})(?P<fraction>\.\d{1,9})?)?"
    r"(?: ?(?P<ampm>[ap]\.?m\.?)(?![a-z]))?"
    r"(?: ?(?P<zone>(?P<sign>[-+\u2212]+)(?P<digits>\d{1,6})(?::(?P<zminutes>\d{2}))?"
    r"|[a-z]{1,12})(?: [a-z]{1,12})?)?",
    re.IGNORECASE | re.ASCII,
)
_MONTHS = {
    name: n
    for n, names in enumerate(
        (
            ("jan", "january"),
            ("feb", "february"),
            ("mar", "march"),
            ("apr", "april"),
            ("may",),
            ("jun", "june"),
            ("jul", "july"),
            ("aug", "august"),
            ("sep", "sept", "september"),
            ("oct", "october"),
            ("nov", "november"),
            ("dec", "december"),
        ),
        start=1,
    )
    for name in names
}
# The zone names RFC 5322 §4.3 gives a meaning (and UTC, which has only one);
# any other name, the military letters included, is "-0000": the zone is unknown.
_NAMED_ZONES = {
    "ut": 0,
    "utc": 0,
    "gmt": 0,
    "edt": -4 * 60,
    "est": -5 * 60,
    "cdt": -5 * 60,
    "cst": -6 * 60,
    "mdt": -6 * 60,
    "mst": -7 * 60,
    "pdt": -7 * 60,
    "pst": -8 * 60,
}
# Longer than any date with its comments gone: a text this long is not read by
# the grammar (the stdlib's lenient reading still may, flagged nonstandard).
_MAX_DATE_TEXT = 256

DATE_REPAIRS: frozenset[str] = frozenset(
    f"date-repaired:{what}"
    for what in (
        "zone-doubled-sign",
        "zone-sign",
        "zone-short",
        "zone-colon",
        "zone-unknown",
        "zone-missing",
        "year",
        "12-hour",
        "nonstandard",
    )
)
"""Every defect ``read_date`` can report: what it had to assume to give an instant."""


class DateReading(NamedTuple):
    """A Date header read: the instant (aware, UTC), the offset it was written in
    (minutes), and the repairs that reading took (``date-repaired:...``, see
    ``DATE_REPAIRS``; empty for a well-formed RFC 5322 date)."""

    utc: datetime | None
    offset_min: int | None
    repairs: tuple[str, ...]


_UNREADABLE = DateReading(None, None, ())


def read_date(value: str | None) -> DateReading:
    """Return the instant of an RFC 5322 date, with what had to be repaired.

    The obsolete syntax of RFC 5322 §4.3 is read as that section says: comments
    and white space anywhere, no day of week, no seconds; a two-digit year is
    20xx below 50 and 19xx from 50, a three-digit year is 1900 more; ``UT``,
    ``GMT`` and the US zone names have their offsets, any other name (the
    military letters too) and a missing zone are ``-0000``. Forms no RFC allows
    but whose meaning is plain are repaired: a doubled sign (``--0500`` is
    ``-0500``), a zone of hours (``+1`` is ``+0100``; ``-500`` is ``-0500``), an
    ISO 8601 zone (``+01:00``), an AM/PM hour, RFC 850 dashes (``18-May-2020``),
    a fraction of a second (dropped).
    Each assumption is named in ``repairs``, so that the message can say its
    date was not written as it is stored. A date outside this grammar falls back
    to the stdlib's lenient reading, repaired as ``nonstandard``.

    A leap second rolls into the next minute; offsets up to ±99 hours are
    applied as written; pre-1970 dates are returned as they are. Anything
    unparseable, out of range or missing gives ``(None, None, ())``, never a
    1970 stand-in. Never raises.
    """
    if not value:
        return _UNREADABLE
    try:
        text = _squeeze_date(value)
        m = _RFC_DATE.fullmatch(text) if len(text) <= _MAX_DATE_TEXT else None
        if m is None:
            return _read_nonstandard(text)
        repairs: list[str] = []
        month = _MONTHS.get(m["month"].lower())
        year = _year(m["year"], repairs)
        hour = _hour(int(m["hour"]), m["ampm"], repairs)
        offset = _zone(m, repairs)
        if m["fraction"] or "-" in text[m.start("day") : m.end("year")]:
            # a fraction of a second (dropped), or RFC 850's 18-May-2020
            repairs.append("date-repaired:nonstandard")
        if month is None or year is None or hour is None or offset is None:
            return _UNREADABLE
        return _instant(
            (year, month, int(m["day"]), hour, int(m["minute"]), int(m["second"] or 0)),
            offset * 60,
            repairs,
        )
    except Exception:
        return _UNREADABLE


def parse_date(value: str | None) -> tuple[datetime | None, int | None]:
    """Return ``(utc_datetime, offset_minutes)`` for an RFC 5322 date.

    The datetime is timezone-aware UTC; the offset is the one the date was
    written in (``-0500`` -> ``-300``; ``-0000`` and an unknown zone -> 0).
    ``read_date`` gives the same with the repairs it took. Never raises.
    """
    reading = read_date(value)
    return reading.utc, reading.offset_min


def _squeeze_date(value: str) -> str:
    """``value`` without its comments (nested, with quoted pairs; an unclosed one
    runs to the end), its white space squeezed to single spaces. Linear in the
    length of ``value``."""
    if "(" in value:
        out: list[str] = []
        depth = 0
        for token in re.split(r"(\\.|[()])", value, flags=re.DOTALL):
            if token == "(":
                depth += 1
                out.append(" ")
            elif token == ")" and depth:
                depth -= 1
            elif not depth:
                out.append(token)
        value = "".join(out)
    return " ".join(value.split())


def _year(digits: str, repairs: list[str]) -> int | None:
    """The year RFC 5322 §4.3 reads in ``digits``; None for one digit."""
    year = int(digits)
    if len(digits) >= 4:
        return year
    if len(digits) == 1:
        return None
    repairs.append("date-repaired:year")
    if len(digits) == 3:
        return year + 1900
    return year + (2000 if year < 50 else 1900)


def _hour(hour: int, ampm: str | None, repairs: list[str]) -> int | None:
    """The 24-hour hour of ``hour`` (with its AM/PM, if one was written)."""
    if ampm is None:
        return hour
    if not 1 <= hour <= 12:
        return None
    repairs.append("date-repaired:12-hour")
    return hour % 12 + (12 if ampm[0] in "pP" else 0)


def _zone(m: re.Match[str], repairs: list[str]) -> int | None:
    """The offset in minutes the zone of date match ``m`` says; None when it
    cannot be one."""
    zone, sign, digits = m["zone"], m["sign"], m["digits"]
    if zone is None:
        repairs.append("date-repaired:zone-missing")
        return 0
    if sign is None or digits is None:
        known = _NAMED_ZONES.get(zone.lower())
        if known is None:
            repairs.append("date-repaired:zone-unknown")
            return 0
        return known
    if "\u2212" in sign:  # a typographic minus
        repairs.append("date-repaired:zone-sign")
        sign = sign.replace("\u2212", "-")
    if len(set(sign)) > 1:  # "+-0500": which one?
        repairs.append("date-repaired:zone-unknown")
        return 0
    if len(sign) > 1:
        repairs.append("date-repaired:zone-doubled-sign")
    if m["zminutes"] is not None:  # "+01:00", as ISO 8601 writes it
        if len(digits) > 2:
            return None
        repairs.append("date-repaired:zone-colon")
        hours, minutes = int(digits), int(m["zminutes"])
    elif len(digits) > 4:
        return None
    else:
        if len(digits) < 4:
            repairs.append("date-repaired:zone-short")
        # one or two digits are hours (+1 is +0100), three are H MM (-500 is -0500)
        hours, minutes = (int(digits), 0) if len(digits) <= 2 else divmod(int(digits), 100)
    offset = hours * 60 + minutes
    return -offset if sign[0] == "-" else offset


def _read_nonstandard(text: str) -> DateReading:
    """The stdlib's lenient reading of a date outside RFC 5322 (ctime order, an
    ISO-ish time...), flagged as such; (None, None, ()) when it has none either."""
    parts = parsedate_tz(text)
    if parts is None:
        return _UNREADABLE
    year, month, day, hour, minute, second = parts[:6]
    return _instant(
        (year, month, day, hour, minute, second), parts[9] or 0, ["date-repaired:nonstandard"]
    )


def _instant(
    fields: tuple[int, int, int, int, int, int], offset_s: int, repairs: list[str]
) -> DateReading:
    """The reading of validated date ``fields`` written at ``offset_s`` seconds east."""
    year, month, day, hour, minute, second = fields
    if not (0 <= hour <= 23 and 0 <= minute <= 59 and 0 <= second <= 60):
        return _UNREADABLE
    if abs(offset_s) >= _MAX_OFFSET_S:
        return _UNREADABLE
    # Built by hand rather than with timezone(): tzinfo offsets must stay
    # under 24 h, and a leap second (:60) rolls into the next minute.
    written = datetime(year, month, day, hour, minute, tzinfo=UTC)
    utc = written + timedelta(seconds=second - offset_s)
    return DateReading(utc, offset_s // 60, tuple(dict.fromkeys(repairs)))


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

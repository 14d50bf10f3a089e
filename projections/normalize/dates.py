"""Date headers read as RFC 5322 says (its obsolete forms too), with the repairs
that reading took, and the day keys the date index uses."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta
from email.utils import parsedate_tz
from typing import NamedTuple

__all__ = ["DATE_REPAIRS", "DateReading", "date_key", "parse_date", "query_date_key", "read_date"]

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

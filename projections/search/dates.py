"""``date:`` and ``size:`` values read into ranges: half-open ``[start, end)`` UTC
instants and inclusive byte counts.

Calendar forms (``2025``, ``2025-06``, ``2025-06-01``) cover the whole year,
month or day in the query's time zone; an instant (``2025-06-01T10:00Z``,
``2025-06-01T12:00+02:00``) is a point. A range ``A..B`` runs from the start
of ``A`` to the end of ``B`` (a calendar ``B`` is included whole, an instant
``B`` is where the range stops); either end may be left open. Relative forms
count back from ``now``, which the caller passes in: there is no clock here.
They are notmuch's (notmuch-search-terms(7)): a number and a unit, repeated and
added up (``3d``, ``2w``, ``1M``, ``1y``, ``5M2d``, ``"2 weeks"``, ``"last
week"``), the units ``y``/``year(s)``, ``M``/``month(s)``, ``w``/``week(s)``,
``d``/``day(s)``, ``h``/``hour(s)``/``hr(s)``, ``min(s)``/``minute(s)``,
``s``/``sec(s)``/``second(s)``; ``m`` alone is a month, as in mu (notmuch reads
it as a minute). As notmuch, a relative form names the whole of its smallest
unit, in the query's time zone: ``date:3d..`` starts at the beginning of the
day three days ago, ``date:..10y`` ends with the year ten years ago, and
``date:10y`` alone is that whole year (a week rounds to the day). ``today`` and
``yesterday`` are calendar days, ``now`` the instant.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone, tzinfo

from projections.search.errors import QuerySyntaxError

__all__ = ["read_date_range", "read_size_range"]

_CALENDAR = re.compile(r"(\d{4})(?:-(\d{1,2})(?:-(\d{1,2}))?)?", re.ASCII)
_INSTANT = re.compile(
    r"(\d{4})-(\d{1,2})-(\d{1,2})(?:[Tt]| +)(\d{1,2}):(\d{2})(?::(\d{2})(?:\.(\d{1,6}))?)?"
    r"(?:([Zz])|([+-])(\d{2}):?(\d{2}))?",
    re.ASCII,
)
_RELATIVE_PART = re.compile(r"\s*(\d{1,6}|last)\s*([a-zA-Z]+)", re.ASCII)
# each unit's spellings (case-insensitive but for M, a month, and m, which mu reads
# as a month too): (seconds, months) of one
_UNITS: dict[str, tuple[int, int]] = {
    **dict.fromkeys(("y", "year", "years", "yr", "yrs"), (0, 12)),
    **dict.fromkeys(("month", "months", "mon", "mons"), (0, 1)),
    **dict.fromkeys(("w", "week", "weeks", "wk", "wks"), (7 * 86400, 0)),
    **dict.fromkeys(("d", "day", "days"), (86400, 0)),
    **dict.fromkeys(("h", "hour", "hours", "hr", "hrs"), (3600, 0)),
    **dict.fromkeys(("min", "mins", "minute", "minutes"), (60, 0)),
    **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), (1, 0)),
}
_SIZE = re.compile(r"(\d{1,15})([kmg]?)b?", re.ASCII | re.IGNORECASE)
_SIZE_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}


def _months_back(now: datetime, months: int) -> datetime:
    """``now`` moved back by whole calendar months, the day clamped to the month's end."""
    index = now.year * 12 + now.month - 1 - months
    year, month = divmod(index, 12)
    month += 1
    next_month = datetime(year + (month == 12), month % 12 + 1, 1)
    last_day = (next_month - timedelta(days=1)).day
    return now.replace(year=year, month=month, day=min(now.day, last_day))


def _relative_parts(text: str) -> list[re.Match[str]]:
    """The parts (a count and a unit) ``text`` is made of, when it is a relative
    form; [] when it is not (read part after part: no backtracking on long text)."""
    text, at, parts = text.rstrip(), 0, []
    while at < len(text):
        m = _RELATIVE_PART.match(text, at)
        if m is None:
            return []
        parts.append(m)
        at = m.end()
    return parts


def _relative(parts: list[re.Match[str]], now: datetime, tz: tzinfo) -> tuple[datetime, datetime]:
    """The period ``parts`` (``5M2d``, ``last week``) name, counted back from
    ``now``: as notmuch, the instant rounded to its smallest unit (``10y``: the
    whole year ten years ago; ``3d``: the whole day; ``2w``: the whole day two
    weeks ago; ``90mins``: the minute), in ``tz``. ValueError for a unit that is
    none."""
    seconds = months = 0
    finest = 12 * 31 * 86400  # the smallest unit named, in (about) seconds
    for m in parts:
        count = 1 if m[1] == "last" else int(m[1])
        unit = m[2] if m[2] in ("M", "m") else m[2].lower()
        if unit not in ("M", "m") and unit not in _UNITS:
            raise ValueError(f"{m[2]!r} is no unit")
        per_second, per_month = (0, 1) if unit in ("M", "m") else _UNITS[unit]
        seconds += count * per_second
        months += count * per_month
        finest = min(finest, per_second or per_month * 31 * 86400)
    local = (_months_back(now, months) - timedelta(seconds=seconds)).astimezone(tz)
    if finest >= 12 * 31 * 86400:
        return _period(local.year, None, None, tz)
    if finest >= 31 * 86400:
        return _period(local.year, local.month, None, tz)
    if finest >= 86400:  # a day, or a week (rounded to the day)
        return _period(local.year, local.month, local.day, tz)
    start = local.replace(microsecond=0)
    if finest >= 60:
        start = start.replace(second=0)
    if finest >= 3600:
        start = start.replace(minute=0)
    return start, start + timedelta(seconds=finest)


def _calendar(m: re.Match[str], tz: tzinfo) -> tuple[datetime, datetime]:
    """The first instant of a calendar year, month or day in ``tz`` and of the next one."""
    month, day = (None if part is None else int(part) for part in (m[2], m[3]))
    return _period(int(m[1]), month, day, tz)


def _period(year: int, month: int | None, day: int | None, tz: tzinfo) -> tuple[datetime, datetime]:
    """The first instant of the year (month, day) in ``tz`` and of the next one."""
    if month is None:
        start = datetime(year, 1, 1, tzinfo=tz)
        end = datetime(year + 1, 1, 1, tzinfo=tz)
    elif day is None:
        start = datetime(year, month, 1, tzinfo=tz)
        end = datetime(year + month // 12, month % 12 + 1, 1, tzinfo=tz)
    else:
        start = datetime(year, month, day, tzinfo=tz)
        following = start.replace(tzinfo=None) + timedelta(days=1)
        end = following.replace(tzinfo=tz)
    return start, end


def _instant(m: re.Match[str], tz: tzinfo) -> datetime:
    zone: tzinfo = tz
    if m[8]:
        zone = UTC
    elif m[9]:
        sign = -1 if m[9] == "-" else 1
        zone_minutes = int(m[10]) * 60 + int(m[11])
        if zone_minutes >= 24 * 60:
            raise ValueError("zone offset out of range")
        zone = timezone(timedelta(minutes=sign * zone_minutes))
    return datetime(
        int(m[1]),
        int(m[2]),
        int(m[3]),
        int(m[4]),
        int(m[5]),
        int(m[6] or 0),
        int((m[7] or "0").ljust(6, "0")),
        tzinfo=zone,
    )


def _point(text: str, now: datetime, tz: tzinfo) -> tuple[datetime, datetime]:
    """The ``[start, end)`` one end of a date range names, in UTC.

    Raises ValueError (or OverflowError) when ``text`` is no date.
    """
    word = text.lower()
    if word == "now":
        return now, now
    if word in ("today", "yesterday"):
        day = now.astimezone(tz).date() - timedelta(days=word == "yesterday")
        start = datetime(day.year, day.month, day.day, tzinfo=tz)
        following = start.replace(tzinfo=None) + timedelta(days=1)
        return start, following.replace(tzinfo=tz)
    if parts := _relative_parts(text):
        return _relative(parts, now, tz)
    if m := _INSTANT.fullmatch(text):
        instant = _instant(m, tz)
        return instant, instant
    if m := _CALENDAR.fullmatch(text):
        return _calendar(m, tz)
    raise ValueError("not a date")


def read_date_range(
    text: str, position: int, now: datetime, tz: tzinfo
) -> tuple[datetime | None, datetime | None]:
    """Return the ``[start, end)`` UTC instants ``date:text`` names (None: open).

    ``position`` is where ``text`` starts in the query, for the error a value
    that is no date raises (``QuerySyntaxError``).
    """
    if now.tzinfo is None:
        now = now.replace(tzinfo=UTC)
    low_text, dots, high_text = text.partition("..")
    if not dots:
        start, end = _read_end(text, position, now, tz)
        if end == start:  # an instant alone: the minute (second...) it names, as notmuch
            end = start + _precision(text)
        return start.astimezone(UTC), end.astimezone(UTC)
    if not low_text and not high_text:
        raise QuerySyntaxError(position, "a date range needs at least one end")
    start_utc = end_utc = None
    if low_text:
        start_utc = _read_end(low_text, position, now, tz)[0].astimezone(UTC)
    if high_text:
        high_at = position + len(low_text) + 2
        end_utc = _read_end(high_text, high_at, now, tz)[1].astimezone(UTC)
    if start_utc is not None and end_utc is not None and end_utc <= start_utc:
        raise QuerySyntaxError(position, f"date range {text!r} ends before it starts")
    return start_utc, end_utc


def _precision(text: str) -> timedelta:
    """How long the instant ``text`` spans: to the minute, second or microsecond
    it is written to (``now``: a second)."""
    m = _INSTANT.fullmatch(text)
    if m is not None and m[6] is None:
        return timedelta(minutes=1)
    if m is not None and m[7] is not None:
        return timedelta(microseconds=1)
    return timedelta(seconds=1)


def _read_end(text: str, position: int, now: datetime, tz: tzinfo) -> tuple[datetime, datetime]:
    try:
        start, end = _point(text, now, tz)
        return start.astimezone(UTC), end.astimezone(UTC)
    except (ValueError, OverflowError):
        raise QuerySyntaxError(
            position,
            f"{text!r} is not a date (2025, 2025-06, 2025-06-01, 2025-06-01T10:00Z,"
            " today, yesterday, 3d, 2w, 1M, 1y, 'last week')",
        ) from None


def _size(text: str, position: int) -> int:
    m = _SIZE.fullmatch(text)
    if m is None:
        raise QuerySyntaxError(position, f"{text!r} is not a size (10, 10k, 2M, 1G)")
    return int(m[1]) * _SIZE_UNITS[m[2].lower()]


def read_size_range(text: str, position: int) -> tuple[int | None, int | None]:
    """Return the inclusive ``(low, high)`` byte bounds ``size:text`` names (None: open).

    ``>N``, ``>=N``, ``<N``, ``<=N``, ``A..B``, ``A..``, ``..B`` or ``N``
    (exactly N bytes); units ``k``, ``M``, ``G`` are powers of 1024, any case.
    """
    for op in (">=", "<=", ">", "<"):
        if text.startswith(op):
            n = _size(text[len(op) :], position + len(op))
            if op == ">=":
                return n, None
            if op == ">":
                return n + 1, None
            if op == "<=":
                return None, n
            if n == 0:
                raise QuerySyntaxError(position, "no message is smaller than 0 bytes")
            return None, n - 1
    low_text, dots, high_text = text.partition("..")
    if not dots:
        n = _size(text, position)
        return n, n
    if not low_text and not high_text:
        raise QuerySyntaxError(position, "a size range needs at least one end")
    low = _size(low_text, position) if low_text else None
    high = _size(high_text, position + len(low_text) + 2) if high_text else None
    if low is not None and high is not None and high < low:
        raise QuerySyntaxError(position, f"size range {text!r} ends before it starts")
    return low, high

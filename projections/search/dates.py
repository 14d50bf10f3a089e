"""``date:`` and ``size:`` values read into ranges: half-open ``[start, end)`` UTC
instants and inclusive byte counts.

Calendar forms (``2025``, ``2025-06``, ``2025-06-01``) cover the whole year,
month or day in the query's time zone; an instant (``2025-06-01T10:00Z``,
``2025-06-01T12:00+02:00``) is a point. A range ``A..B`` runs from the start
of ``A`` to the end of ``B`` (a calendar ``B`` is included whole, an instant
``B`` is where the range stops); either end may be left open. Relative forms
``3d``, ``2w``, ``1m``, ``1y`` (also ``h``) count back from ``now``, which the
caller passes in: there is no clock here. A relative form alone is open
towards the present: ``date:2w`` is ``date:2w..``.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone, tzinfo

from projections.search.errors import QuerySyntaxError

__all__ = ["read_date_range", "read_size_range"]

_CALENDAR = re.compile(r"(\d{4})(?:-(\d{1,2})(?:-(\d{1,2}))?)?", re.ASCII)
_INSTANT = re.compile(
    r"(\d{4})-(\d{1,2})-(\d{1,2})[Tt](\d{1,2}):(\d{2})(?::(\d{2})(?:\.(\d{1,6}))?)?"
    r"(?:([Zz])|([+-])(\d{2}):?(\d{2}))?",
    re.ASCII,
)
_RELATIVE = re.compile(r"(\d{1,6})([hdwmy])", re.ASCII)
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


def _relative(m: re.Match[str], now: datetime) -> datetime:
    count, unit = int(m[1]), m[2]
    if unit == "h":
        return now - timedelta(hours=count)
    if unit == "d":
        return now - timedelta(days=count)
    if unit == "w":
        return now - timedelta(weeks=count)
    return _months_back(now, count * (12 if unit == "y" else 1))


def _calendar(m: re.Match[str], tz: tzinfo) -> tuple[datetime, datetime]:
    """The first instant of a calendar year, month or day in ``tz`` and of the next one."""
    year, month, day = int(m[1]), m[2], m[3]
    if month is None:
        start = datetime(year, 1, 1, tzinfo=tz)
        end = datetime(year + 1, 1, 1, tzinfo=tz)
    elif day is None:
        start = datetime(year, int(month), 1, tzinfo=tz)
        end = datetime(year + int(month) // 12, int(month) % 12 + 1, 1, tzinfo=tz)
    else:
        start = datetime(year, int(month), int(day), tzinfo=tz)
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
    if m := _RELATIVE.fullmatch(text):
        instant = _relative(m, now)
        return instant, instant
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
        relative = _RELATIVE.fullmatch(text) is not None
        start, end = _read_end(text, position, now, tz)
        return start.astimezone(UTC), None if relative else end.astimezone(UTC)
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


def _read_end(text: str, position: int, now: datetime, tz: tzinfo) -> tuple[datetime, datetime]:
    try:
        start, end = _point(text, now, tz)
        return start.astimezone(UTC), end.astimezone(UTC)
    except (ValueError, OverflowError):
        raise QuerySyntaxError(
            position,
            f"{text!r} is not a date (2025, 2025-06, 2025-06-01, 2025-06-01T10:00Z, 3d, 2w, 1y)",
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

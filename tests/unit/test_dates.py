"""Date headers: RFC 5322 and its obsolete syntax (§4.3), the instant each one
stores, and the defect a message carries where its date had to be repaired."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from email.utils import format_datetime, parsedate_to_datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.parse import parse_message
from pipeline.store import MessageStore
from projections.normalize import DATE_REPAIRS, DateReading, parse_date, read_date

DOUBLED = "date-repaired:zone-doubled-sign"
SHORT = "date-repaired:zone-short"
UNKNOWN = "date-repaired:zone-unknown"
MISSING = "date-repaired:zone-missing"
YEAR = "date-repaired:year"
HOUR12 = "date-repaired:12-hour"
COLON = "date-repaired:zone-colon"
SIGN = "date-repaired:zone-sign"
NONSTANDARD = "date-repaired:nonstandard"

# Date header -> (UTC instant, offset in minutes, the message's date defects).
# None as the instant: no date is stored and the message says "bad-date".
OBSOLETE_FORMS: list[tuple[str, str | None, int | None, tuple[str, ...]]] = [
    # the three of issue 13
    ("Mon, 18 May 2020 10:00:00 --500", "2020-05-18 15:00:00", -300, (DOUBLED, SHORT)),
    ("Mon, 18 May 2020 10:00:00 --0500", "2020-05-18 15:00:00", -300, (DOUBLED,)),
    ("Mon, 18 May 2020 10:00:00 ++0100", "2020-05-18 09:00:00", 60, (DOUBLED,)),
    ("Mon, 18 May 2020 10:00:00 -\u22120500", "2020-05-18 15:00:00", -300, (SIGN, DOUBLED)),
    ("Mon, 18 May 2020 10:00:00 +-0500", "2020-05-18 10:00:00", 0, (UNKNOWN,)),
    ("Thu, 18 May 100 10:00:00 +0000", "2000-05-18 10:00:00", 0, (YEAR,)),
    ("18 May 2020 10:00:00 +1", "2020-05-18 09:00:00", 60, (SHORT,)),
    ("18 May 2020 10:00:00 -5", "2020-05-18 15:00:00", -300, (SHORT,)),
    ("18 May 2020 10:00:00 +10", "2020-05-18 00:00:00", 600, (SHORT,)),
    ("18 May 2020 10:00:00 +530", "2020-05-18 04:30:00", 330, (SHORT,)),
    # two-digit years: 00-49 are 20xx, 50-99 are 19xx
    ("18 May 20 10:00:00 +0000", "2020-05-18 10:00:00", 0, (YEAR,)),
    ("18 May 49 10:00:00 +0000", "2049-05-18 10:00:00", 0, (YEAR,)),
    ("18 May 50 10:00:00 +0000", "1950-05-18 10:00:00", 0, (YEAR,)),
    ("18 May 99 10:00:00 +0000", "1999-05-18 10:00:00", 0, (YEAR,)),
    # the zone names RFC 5322 gives a meaning: no repair
    ("18 May 2020 10:00:00 UT", "2020-05-18 10:00:00", 0, ()),
    ("18 May 2020 10:00:00 GMT", "2020-05-18 10:00:00", 0, ()),
    ("18 May 2020 10:00:00 gmt", "2020-05-18 10:00:00", 0, ()),
    ("18 May 2020 10:00:00 EST", "2020-05-18 15:00:00", -300, ()),
    ("18 May 2020 10:00:00 EDT", "2020-05-18 14:00:00", -240, ()),
    ("18 May 2020 10:00:00 CST", "2020-05-18 16:00:00", -360, ()),
    ("18 May 2020 10:00:00 CDT", "2020-05-18 15:00:00", -300, ()),
    ("18 May 2020 10:00:00 MST", "2020-05-18 17:00:00", -420, ()),
    ("18 May 2020 10:00:00 MDT", "2020-05-18 16:00:00", -360, ()),
    ("18 May 2020 10:00:00 PST", "2020-05-18 18:00:00", -480, ()),
    ("18 May 2020 10:00:00 PDT", "2020-05-18 17:00:00", -420, ()),
    # military letters and other names: -0000, the zone is unknown
    ("18 May 2020 10:00:00 A", "2020-05-18 10:00:00", 0, (UNKNOWN,)),
    ("18 May 2020 10:00:00 m", "2020-05-18 10:00:00", 0, (UNKNOWN,)),
    ("18 May 2020 10:00:00 Z", "2020-05-18 10:00:00", 0, (UNKNOWN,)),
    ("18 May 2020 10:00:00 CEST", "2020-05-18 10:00:00", 0, (UNKNOWN,)),
    ("18 May 2020 10:00:00 AST", "2020-05-18 10:00:00", 0, (UNKNOWN,)),
    ("18 May 2020 10:00:00", "2020-05-18 10:00:00", 0, (MISSING,)),
    # comments and white space (CFWS) anywhere
    ("Mon (day), 18 (th) May 2020 10:00:00 +0100 (CET)", "2020-05-18 09:00:00", 60, ()),
    ("18 May 2020 10:00:00 +0100 (a (nested \\) one) comment)", "2020-05-18 09:00:00", 60, ()),
    ("Mon , 18  May\t2020  10 : 00 : 00  +0100", "2020-05-18 09:00:00", 60, ()),
    ("Mon,18 May 2020 10:00:00 +0100", "2020-05-18 09:00:00", 60, ()),
    ("18 May 2020 10:00:00 -0000 (unknown)", "2020-05-18 10:00:00", 0, ()),
    # no seconds, no day of week
    ("18 May 2020 10:00 +0100", "2020-05-18 09:00:00", 60, ()),
    ("Mon, 18 May 2020 10:00 -0700", "2020-05-18 17:00:00", -420, ()),
    ("18 May 2020 10:00:00 +0100", "2020-05-18 09:00:00", 60, ()),
    ("18 may 2020 10:00:00 +0100", "2020-05-18 09:00:00", 60, ()),
    ("31 Dec 2016 23:59:60 +0000", "2017-01-01 00:00:00", 0, ()),
    # outside every RFC but plain in meaning: read, and said to be repaired
    ("Wed 29 May 2019 06:09:22 PM EDT", "2019-05-29 22:09:22", -240, (HOUR12,)),
    ("Wed 29 May 2019 12:09:22 AM +0000", "2019-05-29 00:09:22", 0, (HOUR12,)),
    ("18 May 2020 10:00:00 +01:00", "2020-05-18 09:00:00", 60, (COLON,)),
    ("Wed Sep 30 19:56:38 2020 +1000", "2020-09-30 09:56:38", 600, (NONSTANDARD,)),
    ("18-May-2020 10:00:00 +0100", "2020-05-18 09:00:00", 60, (NONSTANDARD,)),
    ("Mon, 18 May 2020 10:00:00.250 +0100", "2020-05-18 09:00:00", 60, (NONSTANDARD,)),
    # no instant at all
    ("18 May 5 10:00:00 +0000", None, None, ()),
    ("31 Feb 2020 10:00:00 +0000", None, None, ()),
    ("18 May 2020 13:00:00 PM +0000", None, None, ()),
    ("18 May 2020 10:00:00 +12345", None, None, ()),
]


def _message(date: str) -> bytes:
    return (
        f"From: a@example.org\r\nMessage-ID: <d@example.org>\r\nDate: {date}\r\n\r\nbody\r\n"
    ).encode()


def _date_defects(defects: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(d for d in defects if d == "bad-date" or d.startswith("date-"))


@pytest.mark.parametrize(("header", "utc", "offset", "defects"), OBSOLETE_FORMS)
def test_obsolete_date_forms_store_the_right_instant_and_name_each_repair(
    header: str, utc: str | None, offset: int | None, defects: tuple[str, ...]
) -> None:
    parsed = parse_message(_message(header))
    want = None if utc is None else datetime.fromisoformat(utc).replace(tzinfo=UTC)
    assert parsed.date_utc == want
    assert parsed.date_offset_min == offset
    assert _date_defects(parsed.defects) == (defects if utc is not None else ("bad-date",))


def test_every_repair_in_the_table_is_a_declared_one() -> None:
    named = {d for *_, defects in OBSOLETE_FORMS for d in defects}
    assert named <= DATE_REPAIRS
    assert named == DATE_REPAIRS, "each kind of repair has a row"


def test_a_repaired_date_is_stored_with_its_defect(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path / "s") as store:
        mid = store.add(None, _message("Mon, 18 May 2020 10:00:00 --500"))
        record = store.get(mid)
        assert record is not None
        assert record["date_utc"] == datetime(2020, 5, 18, 15, tzinfo=UTC)
        assert record["date_offset_min"] == -300
        assert DOUBLED in record["defects"] and SHORT in record["defects"]
        assert store.find("date", "2020-05-18") == [mid]
        assert store.stats()["malformed"] == 1


def test_the_query_side_reads_dates_by_the_same_rules() -> None:
    assert parse_date("Thu, 18 May 100 23:00:00 --500") == (
        datetime(2000, 5, 19, 4, tzinfo=UTC),
        -300,
    )


# --------------------------------------------------------------------------
# Well-formed dates, against the standard library
# --------------------------------------------------------------------------

_OFFSETS = st.integers(min_value=-(23 * 60 + 59), max_value=23 * 60 + 59).map(
    lambda minutes: timezone(timedelta(minutes=minutes))
)
# far enough from year 1 and 9999 that the UTC instant is a datetime too
_AWARE = st.datetimes(
    min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=_OFFSETS
).map(lambda dt: dt.replace(microsecond=0))


@settings(max_examples=500)
@given(_AWARE)
def test_any_rfc5322_date_reads_as_the_stdlib_reads_it(dt: datetime) -> None:
    text = format_datetime(dt)
    offset = dt.utcoffset()
    assert offset is not None
    assert read_date(text) == DateReading(dt.astimezone(UTC), offset // timedelta(minutes=1), ())
    if dt.year >= 100:  # the stdlib reads "0099" as 1999: four digits are the year as written
        assert read_date(text).utc == parsedate_to_datetime(text)


@settings(max_examples=200)
@given(_AWARE)
def test_any_gmt_date_reads_as_the_stdlib_reads_it(dt: datetime) -> None:
    text = format_datetime(dt.astimezone(UTC), usegmt=True)
    assert text.endswith(" GMT")
    assert read_date(text) == DateReading(dt.astimezone(UTC), 0, ())
    if dt.astimezone(UTC).year >= 100:
        assert read_date(text).utc == parsedate_to_datetime(text)


_CFWS = st.sampled_from([" ", "  ", "\t", "\r\n ", " (c) ", "(a (b) c)", " (\\)) "])


@settings(max_examples=300)
@given(_AWARE, st.lists(_CFWS, min_size=6, max_size=6), st.booleans(), st.booleans())
def test_comments_and_white_space_in_a_date_change_nothing(
    dt: datetime, cfws: list[str], day_of_week: bool, seconds: bool
) -> None:
    """RFC 5322 §4.3: CFWS around every part, the day of week and seconds optional."""
    c = cfws
    head = f"{dt:%a},{c[0]}" if day_of_week else ""
    clock = f"{dt:%H}{c[1]}:{c[2]}{dt:%M}" + (f":{dt:%S}" if seconds else "")
    offset = dt.utcoffset()
    assert offset is not None
    minutes = offset // timedelta(minutes=1)
    zone = f"{'-' if minutes < 0 else '+'}{abs(minutes) // 60:02d}{abs(minutes) % 60:02d}"
    text = f"{c[3]}{head}{dt.day}{c[4]}{dt:%b} {dt.year:04d} {clock} {zone}{c[5]}"
    want = dt.astimezone(UTC) if seconds else dt.replace(second=0).astimezone(UTC)
    assert read_date(text) == DateReading(want, minutes, ())


@given(st.text(max_size=80))
def test_reading_any_text_as_a_date_never_raises(text: str) -> None:
    reading = read_date(text)
    assert (reading.utc is None) == (reading.offset_min is None)
    assert set(reading.repairs) <= DATE_REPAIRS

"""Reading IMAP answers: byte literals in the shapes servers send them (Dovecot,
Cyrus, Courier, Exchange, Gmail), as imaplib hands them over, read without a
socket into envelopes, bodies, folders and folder states."""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from imapclient.datetime_util import parse_to_datetime
from imapclient.exceptions import ProtocolError

from pipeline.sources.imap import response
from pipeline.sources.imap.response import (
    Envelope,
    FolderInfo,
    FolderState,
    bodies_fast,
    envelopes_fast,
    folder_infos,
    folder_state,
    read_bodies,
    read_envelopes,
    status_counts,
)

BODY = b"From: a@example.org\r\nMessage-ID: <m1@example.org>\r\n\r\nbody\r\n"
WHEN = datetime(2024, 3, 9, 23, 30, 5, tzinfo=UTC)


def _lit(head: bytes, literal: bytes) -> tuple[bytes, bytes]:
    """A line ending in a literal, as imaplib hands it over: ``(head {n}, bytes)``."""
    return (head + b" {%d}" % len(literal), literal)


# -- envelopes ----------------------------------------------------------------------

MSGID = b"Message-ID: <m1@example.org>\r\n\r\n"


@pytest.mark.parametrize(
    "data",
    [
        # Dovecot, Cyrus: the items in the order asked, the header field as asked
        [
            _lit(
                b'1 (UID 7 RFC822.SIZE 120 INTERNALDATE "10-Mar-2024 00:30:05 +0100"'
                b" BODY[HEADER.FIELDS (MESSAGE-ID)]",
                MSGID,
            ),
            b")",
        ],
        # Courier: the field name quoted, INTERNALDATE after the literal
        [
            _lit(b'1 (UID 7 RFC822.SIZE 120 BODY[HEADER.FIELDS ("MESSAGE-ID")]', MSGID),
            b' INTERNALDATE "09-Mar-2024 23:30:05 +0000")',
        ],
        # Exchange: its own order, lower-case names, the header folded
        [
            _lit(
                b'1 (internaldate "09-Mar-2024 18:30:05 -0500" uid 7'
                b" body[header.fields (message-id)]",
                b"Message-ID:\r\n <m1@example.org>\r\n\r\n",
            ),
            b" rfc822.size 120)",
        ],
        # an unsolicited FLAGS for another message in between
        [
            b"5 (FLAGS (\\Seen))",
            _lit(
                b'1 (UID 7 RFC822.SIZE 120 INTERNALDATE "09-Mar-2024 23:30:05 +0000"'
                b" BODY[HEADER.FIELDS (MESSAGE-ID)]",
                MSGID,
            ),
            b")",
        ],
    ],
    ids=["dovecot", "courier", "exchange", "unsolicited"],
)
def test_an_envelope_reads_the_same_in_every_servers_shape(data: list[Any]) -> None:
    got = read_envelopes(data)
    assert got[7] == Envelope(7, 120, "m1@example.org", WHEN)


def test_an_envelopes_flags_are_read_in_the_logs_spelling_by_either_reading() -> None:
    data = [
        _lit(
            b"1 (UID 7 RFC822.SIZE 120 FLAGS (\\Seen \\Recent $label1 \\ANSWERED)"
            b" BODY[HEADER.FIELDS (MESSAGE-ID)]",
            MSGID,
        ),
        b")",
        _lit(b"2 (UID 8 FLAGS () RFC822.SIZE 9 BODY[HEADER.FIELDS (MESSAGE-ID)]", b"\r\n"),
        b")",
    ]
    expected = {
        7: Envelope(7, 120, "m1@example.org", None, ("$label1", "\\Answered", "\\Seen")),
        8: Envelope(8, 9, None, None, ()),
    }
    assert envelopes_fast(data) == expected
    assert response._envelopes_parsed(data) == expected


def test_the_common_shape_of_envelopes_is_read_without_the_full_parser() -> None:
    dovecot = [
        _lit(
            b'1 (UID 7 RFC822.SIZE 120 INTERNALDATE "10-Mar-2024 00:30:05 +0100"'
            b" BODY[HEADER.FIELDS (MESSAGE-ID)]",
            MSGID,
        ),
        b")",
        _lit(b"2 (RFC822.SIZE 9 UID 8 BODY[HEADER.FIELDS (MESSAGE-ID)]", b"\r\n"),
        b")",
    ]
    expected = {7: Envelope(7, 120, "m1@example.org", WHEN), 8: Envelope(8, 9, None, None)}
    assert envelopes_fast(dovecot) == expected
    assert read_envelopes(dovecot) == expected


@pytest.mark.parametrize(
    "data",
    [
        [None],  # no message matched
        [_lit(b'1 (UID 7 BODY[HEADER.FIELDS ("MESSAGE-ID")]', MSGID), b")"],  # Courier
        [_lit(b"1 (uid 7 body[header.fields (message-id)]", MSGID), b")"],  # lower case
        [_lit(b"1 (UID 7 BODY[HEADER.FIELDS (MESSAGE-ID)]", MSGID), b" RFC822.SIZE 120)"],
        [_lit(b'1 (UID 7 FLAGS ("\\Seen") BODY[HEADER.FIELDS (MESSAGE-ID)]', MSGID), b")"],
        [_lit(b"1 (RFC822.SIZE 120 BODY[HEADER.FIELDS (MESSAGE-ID)]", MSGID), b")"],  # no UID
        [_lit(b'1 (UID 7 INTERNALDATE "x" BODY[HEADER.FIELDS (MESSAGE-ID)]', MSGID), b")"],
        [(b"1 (UID 7 BODY[HEADER.FIELDS (MESSAGE-ID)] {99}", MSGID), b")"],  # not its size
        [b"1 (UID 7 RFC822.SIZE 120 BODY[HEADER.FIELDS (MESSAGE-ID)] NIL)"],
        [
            _lit(
                b'1 (UID 7 INTERNALDATE "09-Mar-2024 23:30:05 +0000"'
                b" BODY[HEADER.FIELDS (MESSAGE-ID)]",
                MSGID,
            ),
            b")",
            _lit(b"2 (UID 7 RFC822.SIZE 120 BODY[HEADER.FIELDS (MESSAGE-ID)]", MSGID),
            b")",
        ],
    ],
    ids=["none", "quoted", "lower", "after", "flags", "no-uid", "date", "size", "nil", "twice"],
)
def test_any_other_shape_of_envelopes_is_left_to_the_full_parser(data: list[Any]) -> None:
    assert envelopes_fast(data) is None


_DATES = st.datetimes(min_value=datetime(1900, 1, 2), max_value=datetime(9998, 12, 30))
_ZONES = st.integers(min_value=-(23 * 60 + 59), max_value=23 * 60 + 59)


def _imap_date(when: datetime, zone: int, padded: bool) -> bytes:
    day = f"{when.day:2d}" if padded else f"{when.day:02d}"
    sign = "-" if zone < 0 else "+"
    text = f"{day}-{when:%b-%Y %H:%M:%S} {sign}{abs(zone) // 60:02d}{abs(zone) % 60:02d}"
    return text.encode()


@given(_DATES, _ZONES, st.booleans())
def test_an_internaldate_reads_as_imapclient_reads_it(
    when: datetime, zone: int, padded: bool
) -> None:
    text = _imap_date(when, zone, padded)
    assert response._internaldate(text) == parse_to_datetime(text, normalise=False)


_HEADERS = st.one_of(
    st.just(b"\r\n"),
    st.builds(
        lambda local, folded: b"Message-ID:" + (b"\r\n " if folded else b" ") + local + b"\r\n\r\n",
        st.from_regex(rb"\A<[A-Za-z0-9.$\xe9-]{1,30}@[a-z.]{1,12}>\Z"),
        st.booleans(),
    ),
)


_FLAGS = [
    b"\\Seen", b"\\Flagged", b"\\Recent", b"\\deleted", b"$Forwarded", b"Junk", b"\\*",
    b"1234", b"NIL",
]  # fmt: skip


@given(
    st.lists(
        st.tuples(
            st.integers(1, 2**32 - 1),
            st.integers(0, 2**40),
            st.one_of(st.none(), st.tuples(_DATES, _ZONES, st.booleans())),
            _HEADERS,
            st.permutations(range(4)),
            st.one_of(st.none(), st.lists(st.sampled_from(_FLAGS), max_size=4)),
        ),
        max_size=5,
    )
)
def test_the_fast_reading_of_envelopes_gives_what_the_parser_gives(
    answers: list[tuple[int, int, Any, bytes, list[int], list[bytes] | None]],
) -> None:
    data: list[Any] = []
    for n, (uid, size, date, header, order, flags) in enumerate(answers, 1):
        parts = [b"UID %d" % uid, b"RFC822.SIZE %d" % size]
        if date is not None:
            parts.append(b'INTERNALDATE "' + _imap_date(*date) + b'"')
        if flags is not None:
            parts.append(b"FLAGS (" + b" ".join(flags) + b")")
        items = b" ".join(parts[i] for i in order if i < len(parts))
        data += [_lit(b"%d (%s BODY[HEADER.FIELDS (MESSAGE-ID)]" % (n, items), header), b")"]
    fast = envelopes_fast(data)
    parsed = response._envelopes_parsed(data)
    if len({uid for uid, *_ in answers}) < len(answers):
        assert fast is None  # a message answered twice: the parser merges its items
    else:
        assert fast == parsed
    assert read_envelopes(data) == parsed


def test_an_envelope_without_a_message_id_or_a_date_says_none() -> None:
    data = [_lit(b"3 (UID 12 RFC822.SIZE 40 BODY[HEADER.FIELDS (MESSAGE-ID)]", b"\r\n"), b")"]
    assert read_envelopes(data) == {12: Envelope(12, 40, None, None)}


def test_a_latin1_message_id_is_read_as_the_parser_reads_it() -> None:
    header = b"Message-ID: <caf\xe9@example.org>\r\n\r\n"
    data = [_lit(b"1 (UID 2 RFC822.SIZE 9 BODY[HEADER.FIELDS (MESSAGE-ID)]", header), b")"]
    assert read_envelopes(data)[2].message_id == "caf\xe9@example.org"


def test_no_message_matched_gives_no_envelope() -> None:
    assert read_envelopes([None]) == {}


def test_an_answer_out_of_step_raises_a_protocol_error() -> None:
    with pytest.raises(ProtocolError):
        read_envelopes([b"1 (UID 7 RFC822.SIZE"])


# -- bodies -------------------------------------------------------------------------


def test_the_common_shape_is_read_in_either_order_of_its_items() -> None:
    longer = BODY + b"x"
    data = [
        _lit(b'1 (UID 7 INTERNALDATE "09-Mar-2024 23:30:05 +0000" BODY[]', BODY), b")",
        _lit(b'2 (INTERNALDATE "10-Mar-2024 01:00:00 +0100" UID 9 BODY[]', longer), b")",
        _lit(b"3 (UID 12 BODY[]", b""), b")",
    ]  # fmt: skip
    assert bodies_fast(data) == [
        (7, BODY, b"09-Mar-2024 23:30:05 +0000"),
        (9, longer, b"10-Mar-2024 01:00:00 +0100"),
        (12, b"", None),
    ]
    assert read_bodies(data) == {
        7: (BODY, WHEN),
        9: (longer, datetime(2024, 3, 10, 0, 0, tzinfo=UTC)),
        12: (b"", None),
    }


@pytest.mark.parametrize(
    "data",
    [
        [_lit(b"1 (UID 7 BODY[]", BODY), b' INTERNALDATE "09-Mar-2024 23:30:05 +0000")'],
        [_lit(b'1 (UID 7 INTERNALDATE "09-Mar-2024 23:30:05 +0000" RFC822', BODY), b")"],
        [_lit(b'1 (UID 7 INTERNALDATE "09-Mar-2024 23:30:05 +0000" BODY[]<0>', BODY), b")"],
        [
            _lit(b'1 (FLAGS (\\Seen) UID 7 INTERNALDATE "09-Mar-2024 23:30:05 +0000" BODY[]', BODY),
            b")",
            b"2 (FLAGS (\\Seen) UID 8)",
        ],
    ],
    ids=["courier-date-after-body", "rfc822", "origin-0", "flags-and-unsolicited"],
)
def test_any_other_shape_is_read_by_the_full_parser_to_the_same_body(data: list[Any]) -> None:
    assert bodies_fast(data) is None
    assert read_bodies(data)[7] == (BODY, WHEN)


def test_a_body_answered_nil_is_no_body() -> None:
    assert read_bodies([b"1 (UID 7 BODY[] NIL)"]) == {}


@pytest.mark.parametrize(
    "data",
    [
        [None],  # no message matched
        [_lit(b"1 (UID 7 BODY[]", BODY), b")", b"2 (FLAGS (\\Seen) UID 8)"],  # unsolicited
        [_lit(b"1 (UID 7 BODY[]", BODY), b" FLAGS (\\Seen))"],  # an item after the literal
        [_lit(b"1 (UID 7 FLAGS (\\Seen) BODY[]", BODY), b")"],  # an item not asked for
        [(b"1 (UID 7 BODY[] {%d}" % (len(BODY) + 1), BODY), b")"],  # not the size announced
        [_lit(b'1 (INTERNALDATE "x" BODY[]', BODY), b")"],  # no UID
        [_lit(b"1 (UID 7 BODY[]", BODY)],  # no closing parenthesis
        [  # the same message answered twice (the parser merges the items)
            _lit(b'1 (UID 7 INTERNALDATE "09-Mar-2024 23:30:05 +0000" BODY[]', BODY),
            b")",
            _lit(b"2 (UID 7 BODY[]", BODY),
            b")",
        ],
    ],
    ids=[
        "none",
        "unsolicited",
        "after-literal",
        "other-item",
        "size",
        "no-uid",
        "unclosed",
        "twice",
    ],
)
def test_the_fast_reading_leaves_any_other_shape_alone(data: list[Any]) -> None:
    assert bodies_fast(data) is None


@given(
    st.lists(
        st.one_of(
            st.binary(max_size=40),
            st.tuples(st.binary(max_size=40), st.binary(max_size=40)),
            st.none(),
        ),
        max_size=6,
    )
)
def test_the_fast_reading_never_raises(data: list[Any]) -> None:
    got = bodies_fast(data)
    assert got is None or all(isinstance(uid, int) for uid, _, _ in got)
    envelopes = envelopes_fast(data)
    assert envelopes is None or all(e.uid == uid for uid, e in envelopes.items())


_ATOMS = [
    b"UID", b"7", b"abc", b"-1", b"NIL", b"(", b")", b"{3}", b"RFC822.SIZE", b"INTERNALDATE",
    b'"x"', b'"09-Mar-2024 23:30:05 +0000"', b"BODY[]", b"BODY[HEADER.FIELDS (MESSAGE-ID)]",
]  # fmt: skip
_LINE = st.lists(st.sampled_from(_ATOMS), max_size=8).map(lambda xs: b"1 (" + b" ".join(xs) + b")")


@given(
    st.lists(
        st.one_of(_LINE, st.binary(max_size=20), st.tuples(_LINE, st.binary(max_size=10))),
        max_size=3,
    )
)
def test_an_answer_is_read_or_refused_as_out_of_step_never_anything_else(data: list[Any]) -> None:
    for read in (read_envelopes, read_bodies, folder_infos):
        with contextlib.suppress(ProtocolError):
            read(data)


# -- folders ------------------------------------------------------------------------


def test_a_list_answer_gives_each_folder_decoded_with_its_attributes() -> None:
    data = [
        b'(\\HasNoChildren) "." INBOX',
        b'(\\HasChildren \\Noselect) "/" "[Gmail]"',
        b'(\\All \\HasNoChildren) "/" "[Gmail]/All Mail"',
        b'(\\Drafts) "." "Entw&APw-rfe"',  # modified UTF-7 (RFC 3501 5.1.3)
        b'() NIL "2024"',  # a name the lexer takes for a number; no delimiter
        _lit(b'(\\Sent) "/"', b'Sent "old"'),  # a name sent as a literal
        b"",
    ]
    assert folder_infos(data) == [
        FolderInfo("INBOX", frozenset({"\\HasNoChildren"})),
        FolderInfo("[Gmail]", frozenset({"\\HasChildren", "\\Noselect"})),
        FolderInfo("[Gmail]/All Mail", frozenset({"\\All", "\\HasNoChildren"})),
        FolderInfo("Entwürfe", frozenset({"\\Drafts"})),
        FolderInfo("2024", frozenset()),
        FolderInfo('Sent "old"', frozenset({"\\Sent"})),
    ]
    assert [f.selectable for f in folder_infos(data)] == [True, False, True, True, True, True]


def test_an_empty_list_answer_is_no_folder() -> None:
    assert folder_infos([None]) == []


def test_examine_without_uidnext_plans_without_it() -> None:
    assert folder_state({b"UIDVALIDITY": 5, b"UIDNEXT": 9, b"EXISTS": 3}) == FolderState(5, 9, 3)
    assert folder_state({b"UIDVALIDITY": 5, b"EXISTS": 3}) == FolderState(5, None, 3)
    assert folder_state({b"EXISTS": 3}) is None  # no UIDVALIDITY: nothing can be planned


def test_status_counts_are_keyed_by_lower_case_names() -> None:
    answer = {b"MESSAGES": 3, b"UIDNEXT": 9, b"UIDVALIDITY": 5}
    assert status_counts(answer) == {"messages": 3, "uidnext": 9, "uidvalidity": 5}

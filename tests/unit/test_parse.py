"""Raw bytes -> message facts: what parse_message makes of real and broken mail."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.parse import ParsedMessage, parse_message, synthetic_message_id

CORPUS = Path(__file__).resolve().parents[3] / "shared" / "corpora" / "notmuch"

PLAIN = (
    b"Return-Path: <joe@example.com>\r\n"
    b"Message-ID: <Plain.1@Example.COM>\r\n"
    b"Date: Fri, 26 Jun 2026 23:30:00 -0500\r\n"
    b"From: Joe Bloggs <JOE@Example.com>\r\n"
    b"To: Jane <jane@example.com>, bob@example.com\r\n"
    b'Cc: "Doe, Ann" <ann@example.com>, jane@example.com\r\n'
    b"Subject: Re: Live Wire\r\n"
    b"In-Reply-To: <parent@example.com>\r\n"
    b"References: <root@example.com>\r\n <parent@example.com>\r\n"
    b"List-Id: Live wire talk <Live-Wire.lists.example.org>\r\n"
    b"\r\n"
    b"Body: not a header\r\n"
)


def assert_wellformed_id(parsed: ParsedMessage) -> None:
    mid = parsed.message_id
    assert isinstance(mid, str) and mid
    assert "<" not in mid and ">" not in mid
    assert not any(char.isspace() for char in mid)


# --------------------------------------------------------------------------
# An ordinary message
# --------------------------------------------------------------------------


def test_plain_message_facts() -> None:
    parsed = parse_message(PLAIN)
    assert parsed.message_id == "Plain.1@Example.COM"
    assert parsed.synthetic_id is False
    assert parsed.sha256 == hashlib.sha256(PLAIN).hexdigest()
    assert parsed.size == len(PLAIN)
    assert parsed.date_utc == datetime(2026, 6, 27, 4, 30, tzinfo=UTC)
    assert parsed.date_offset_min == -300
    assert parsed.from_addr == "joe@example.com"
    assert parsed.to_addrs == ("jane@example.com", "bob@example.com", "ann@example.com")
    assert parsed.in_reply_to == "parent@example.com"
    assert parsed.references == ("root@example.com", "parent@example.com")
    assert parsed.list_id == "live-wire.lists.example.org"
    assert parsed.subject == "Re: Live Wire"
    assert parsed.defects == ()


def test_headers_keep_order_original_case_and_are_unfolded() -> None:
    parsed = parse_message(PLAIN)
    names = [name for name, _value in parsed.headers]
    assert names == [
        "Return-Path",
        "Message-ID",
        "Date",
        "From",
        "To",
        "Cc",
        "Subject",
        "In-Reply-To",
        "References",
        "List-Id",
    ]
    assert dict(parsed.headers)["References"] == "<root@example.com> <parent@example.com>"


def test_body_lines_are_not_headers() -> None:
    parsed = parse_message(PLAIN)
    assert "Body" not in dict(parsed.headers)


def test_lf_only_message_parses_like_crlf() -> None:
    lf = parse_message(PLAIN.replace(b"\r\n", b"\n"))
    crlf = parse_message(PLAIN)
    assert lf.headers == crlf.headers
    assert lf.message_id == crlf.message_id


def test_header_lookup_is_case_insensitive() -> None:
    raw = b"MESSAGE-id: <x@y>\nfrom: a@b\nSUBJECT: hi\ndate: 1 Jan 2020 00:00:00 +0000\n\nbody"
    parsed = parse_message(raw)
    assert (parsed.message_id, parsed.from_addr, parsed.subject) == ("x@y", "a@b", "hi")
    assert parsed.headers[0] == ("MESSAGE-id", "<x@y>")


def test_repeated_headers_use_the_first_for_from_subject_date() -> None:
    raw = (
        b"Message-ID: <r@x>\n"
        b"From: first@x\nFrom: second@x\n"
        b"Subject: first\nSubject: second\n"
        b"Date: 1 Jan 2020 00:00:00 +0000\nDate: 2 Jan 2021 00:00:00 +0000\n"
        b"To: a@x\nTo: b@x\nReferences: <r1@x>\nReferences: <r2@x> <r1@x>\n\n"
    )
    parsed = parse_message(raw)
    assert parsed.from_addr == "first@x"
    assert parsed.subject == "first"
    assert parsed.date_utc == datetime(2020, 1, 1, tzinfo=UTC)
    assert parsed.to_addrs == ("a@x", "b@x")
    assert parsed.references == ("r1@x", "r2@x")


def test_subject_is_decoded_but_not_normalized() -> None:
    parsed = parse_message(b"Subject: Fwd: RE:  Live   Wire\n\n")
    assert parsed.subject == "Fwd: RE:  Live   Wire"


def test_missing_subject_is_none_and_empty_subject_is_empty() -> None:
    assert parse_message(b"From: a@b\n\n").subject is None
    assert parse_message(b"Subject:\n\n").subject == ""


# --------------------------------------------------------------------------
# Message-IDs
# --------------------------------------------------------------------------


def test_missing_message_id_gets_a_stable_synthetic_one() -> None:
    raw = b"From: a@b\nSubject: no id\n\nbody\n"
    parsed = parse_message(raw)
    digest = hashlib.sha256(raw).hexdigest()
    assert parsed.synthetic_id is True
    assert parsed.message_id == f"sha256-{digest[:40]}@synthetic.mailledger"
    assert parsed.message_id == synthetic_message_id(digest)
    assert parse_message(raw).message_id == parsed.message_id
    assert "no-message-id" in parsed.defects


def test_unusable_message_id_gets_a_synthetic_one() -> None:
    parsed = parse_message(b"Message-ID: (just a comment)\n\n")
    assert parsed.synthetic_id is True
    assert parsed.message_id.endswith("@synthetic.mailledger")
    assert "bad-message-id" in parsed.defects


def test_message_id_with_comment_and_folding_is_normalized() -> None:
    parsed = parse_message(b"Message-ID:\r\n  <Foo@Bar> (sent by us)\r\n\r\n")
    assert parsed.message_id == "Foo@Bar"
    assert parsed.synthetic_id is False


def test_ten_kilobyte_message_id_is_kept() -> None:
    long_id = "a" * 10_000 + "@example.com"
    parsed = parse_message(f"Message-ID: <{long_id}>\n\n".encode())
    assert parsed.message_id == long_id


def test_references_with_comments_and_garbage() -> None:
    raw = (
        b"In-Reply-To: <a@b> (Joe's message of Mon, 1 Jan 2024)\n"
        b"References: <r@b><s@b>   junk (comment <x@y>)\n\t<a@b>\n\n"
    )
    parsed = parse_message(raw)
    assert parsed.in_reply_to == "a@b"
    assert parsed.references == ("r@b", "s@b", "a@b")


# --------------------------------------------------------------------------
# Dates
# --------------------------------------------------------------------------


def test_missing_date_is_null_not_1970() -> None:
    parsed = parse_message(b"Message-ID: <d@x>\n\n")
    assert parsed.date_utc is None
    assert parsed.date_offset_min is None
    assert "no-date" in parsed.defects


def test_unparseable_date_is_null_not_1970() -> None:
    parsed = parse_message(b"Message-ID: <d@x>\nDate: the day after tomorrow\n\n")
    assert parsed.date_utc is None
    assert parsed.date_offset_min is None
    assert "bad-date" in parsed.defects


def test_pre_1970_date_is_kept() -> None:
    parsed = parse_message(b"Date: Sat, 20 Jul 1969 20:17:40 +0000\n\n")
    assert parsed.date_utc == datetime(1969, 7, 20, 20, 17, 40, tzinfo=UTC)
    assert parsed.date_offset_min == 0


# --------------------------------------------------------------------------
# Encodings
# --------------------------------------------------------------------------


def test_rfc2047_subject_is_decoded() -> None:
    raw = b"Subject: =?utf-8?q?Caf=C3=A9?= =?ISO-8859-1?B?aWNp?= ok\n\n"
    parsed = parse_message(raw)
    assert parsed.subject == "Caféici ok"
    assert dict(parsed.headers)["Subject"] == "Caféici ok"
    assert parsed.defects.count("bad-encoding:Subject") == 0


def test_folded_rfc2047_words_are_joined() -> None:
    raw = b"Subject: =?utf-8?q?Live?=\r\n =?utf-8?q?_Wire?=\r\n\r\n"
    assert parse_message(raw).subject == "Live Wire"


def test_rfc2047_display_name_does_not_hide_the_address() -> None:
    raw = b"From: =?utf-8?q?J=C3=B6rg_=3CMaster=3E?= <joerg@example.org>\n\n"
    parsed = parse_message(raw)
    assert parsed.from_addr == "joerg@example.org"
    assert dict(parsed.headers)["From"] == "Jörg <Master> <joerg@example.org>"


@pytest.mark.parametrize(
    "subject",
    [
        b"=?x-no-such-charset?q?abc?=",
        b"=?utf-8?q?=FF=FE?=",
        b"=?utf-8*en?q?abc?=",
    ],
)
def test_invalid_rfc2047_falls_back_to_the_raw_value(subject: bytes) -> None:
    parsed = parse_message(b"Subject: " + subject + b"\n\n")
    assert parsed.subject == subject.decode()
    assert "bad-encoding:Subject" in parsed.defects


def test_undecodable_rfc2047_in_a_long_header_is_left_raw_quickly() -> None:
    value = "=?x?q?a" * 9_000
    parsed = parse_message(f"Subject: {value}\n\n".encode())
    assert parsed.subject == value
    assert "undecoded-long-header:Subject" in parsed.defects


def test_8bit_utf8_header_is_decoded() -> None:
    parsed = parse_message("Subject: Grüße\nFrom: Jörg <j@x>\n\n".encode())
    assert parsed.subject == "Grüße"
    assert parsed.from_addr == "j@x"
    assert parsed.defects == ("no-message-id", "no-date")


def test_8bit_latin1_header_falls_back_to_latin1() -> None:
    parsed = parse_message(b"Subject: Gr\xfc\xdfe\n\n")
    assert parsed.subject == "Grüße"
    assert "non-utf8:Subject" in parsed.defects


def test_leading_bom_is_stripped_but_hashed() -> None:
    raw = b"\xef\xbb\xbfMessage-ID: <bom@x>\n\n"
    parsed = parse_message(raw)
    assert parsed.message_id == "bom@x"
    assert parsed.headers[0][0] == "Message-ID"
    assert parsed.sha256 == hashlib.sha256(raw).hexdigest()
    assert parsed.size == len(raw)


# --------------------------------------------------------------------------
# Broken shapes
# --------------------------------------------------------------------------


@pytest.mark.parametrize("raw", [b"", b"\n", b"\r\n\r\nbody only", b"just some text\nand more\n"])
def test_message_without_headers_is_recorded_with_a_defect(raw: bytes) -> None:
    parsed = parse_message(raw)
    assert parsed.headers == ()
    assert parsed.synthetic_id is True
    assert "no-header-block" in parsed.defects
    assert_wellformed_id(parsed)


def test_nul_bytes_do_not_break_parsing() -> None:
    raw = b"Message-ID: <n\x00ul@x>\nSubject: a\x00b\n\nbody\x00\x00"
    parsed = parse_message(raw)
    assert parsed.message_id == "nul@x"
    assert parsed.subject == "a\x00b"


def test_one_megabyte_header_line_works() -> None:
    big = b"x" * 1_000_000
    raw = b"Message-ID: <big@x>\nX-Big: " + big + b"\nTo: " + big + b"@x\n\nbody"
    parsed = parse_message(raw)
    assert parsed.message_id == "big@x"
    assert dict(parsed.headers)["X-Big"] == big.decode()


def test_header_block_ends_at_a_non_header_line() -> None:
    parsed = parse_message(b"Message-ID: <a@b>\nthis is body text\nSubject: not a header\n")
    assert [name for name, _ in parsed.headers] == ["Message-ID"]
    assert "non-header-line" in parsed.defects


def test_mbox_from_line_is_skipped() -> None:
    parsed = parse_message(b"From joe@x Mon Jan  1 00:00:00 2024\nMessage-ID: <m@x>\n\n")
    assert parsed.message_id == "m@x"
    assert "non-header-line" not in parsed.defects


def test_leading_continuation_line_is_skipped() -> None:
    parsed = parse_message(b"  stray continuation\nMessage-ID: <c@x>\n\n")
    assert parsed.message_id == "c@x"
    assert "leading-continuation" in parsed.defects


def test_blank_before_colon_is_accepted() -> None:
    parsed = parse_message(b"Subject : spaced\n\n")
    assert parsed.headers == (("Subject", "spaced"),)


def test_bytearray_and_memoryview_are_accepted() -> None:
    assert parse_message(bytearray(PLAIN)) == parse_message(PLAIN)
    assert parse_message(memoryview(PLAIN)) == parse_message(PLAIN)


# --------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------


@settings(max_examples=300)
@given(st.binary(max_size=4096))
def test_parse_message_never_raises_on_arbitrary_bytes(raw: bytes) -> None:
    parsed = parse_message(raw)
    assert_wellformed_id(parsed)
    assert parsed.size == len(raw)


_HEADER_NAMES = st.sampled_from(
    [
        "Message-ID",
        "message-id",
        "From",
        "To",
        "Cc",
        "Subject",
        "Date",
        "In-Reply-To",
        "References",
        "List-Id",
        "X-Junk",
        "Bad Name",
        "",
    ]
)
_HEADER_TEXT = st.lists(
    st.one_of(
        st.sampled_from(list('<>()@,;:"\\=?qQbB_ \t\r\n.-+0123456789')),
        st.sampled_from(["=?utf-8?q?", "=?utf-8?b?", "?=", "=C3=A9", "Re:", "Mon, 1 Jan 2024"]),
        st.characters(),
    ),
    max_size=40,
).map("".join)
_HEADER_LINE = st.tuples(_HEADER_NAMES, st.sampled_from([":", ": ", " :", ""]), _HEADER_TEXT)
_LINE_ENDS = st.sampled_from(["\r\n", "\n", "\r\n\t", "\n ", "\r"])


@settings(max_examples=300)
@given(
    st.lists(st.tuples(_HEADER_LINE, _LINE_ENDS), max_size=12),
    st.sampled_from(["", "\n", "\r\n"]),
    st.binary(max_size=64),
    st.sampled_from(["utf-8", "latin-1", "utf-16"]),
)
def test_parse_message_never_raises_on_header_like_text(
    lines: list[tuple[tuple[str, str, str], str]],
    separator: str,
    body: bytes,
    encoding: str,
) -> None:
    text = "".join(name + colon + value + end for (name, colon, value), end in lines)
    errors = "surrogatepass" if encoding.startswith("utf") else "replace"
    raw = (text + separator).encode(encoding, errors) + body
    parsed = parse_message(raw)
    assert_wellformed_id(parsed)
    assert all(isinstance(name, str) and isinstance(value, str) for name, value in parsed.headers)
    if parsed.date_utc is not None:
        assert parsed.date_utc.tzinfo is UTC


# --------------------------------------------------------------------------
# Real mail
# --------------------------------------------------------------------------


@pytest.mark.corpus
def test_every_notmuch_corpus_message_parses() -> None:
    if not CORPUS.is_dir():
        pytest.skip(f"notmuch corpus folder absent: {CORPUS} (expected ../shared beside the repo)")
    files = sorted(path for path in CORPUS.rglob("*") if path.is_file())
    assert files, f"no files under {CORPUS}"
    synthetic = []
    for path in files:
        parsed = parse_message(path.read_bytes())
        assert_wellformed_id(parsed)
        if parsed.synthetic_id:
            synthetic.append(path.name)
    # Only the corpus README lacks a Message-ID; every real message has one.
    assert synthetic == ["README"]


_PIECES = [b"A: 1", b" x", b"B: 2", b"\n", b"\r\n", b"\r", b""]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=12))
def test_the_header_block_ends_at_the_first_blank_line_of_either_ending(parts: list[bytes]) -> None:
    """The block ends at the first "\\n\\n" or "\\n\\r\\n", whichever comes first (the
    search for "\\n\\n" stops at the first "\\n\\r\\n": a CRLF body is not scanned)."""
    raw = b"Subject: s\n" + b"".join(parts) + b"\n\nBody: not a header\n"
    ends = [at for at in (raw.find(b"\n\n"), raw.find(b"\n\r\n")) if at >= 0]
    block = raw[: min(ends)]
    got = parse_message(raw).headers
    assert ("Body", "not a header") not in got
    assert [n for n, _ in got] == [n for n, _ in parse_message(block + b"\n\n").headers]


def _header_fields_by_regex(data: bytes) -> list[tuple[str, str]]:
    """The header block as the first parser read it (a regex unfolded it, and the
    blank line was looked for across the whole message): the yardstick of the
    faster reading."""
    import re

    if data.startswith((b"\n", b"\r\n")):
        return []
    ends = [at for at in (data.find(b"\n\n"), data.find(b"\n\r\n")) if at >= 0]
    block = data[: min(ends)] if ends else data
    lines = re.sub(rb"\n(?=[ \t])", b"", block.replace(b"\r\n", b"\n")).split(b"\n")
    fields = []
    for index, line in enumerate(lines):
        if not line:
            continue
        match = re.match(rb"([\x21-\x39\x3b-\x7e]+)[ \t]*:", line)
        if match is None:
            if index == 0 and line.startswith(b"From "):
                continue
            if line[:1] in (b" ", b"\t"):
                continue
            break
        value = line[match.end() :]
        try:
            text = value.decode("utf-8")
        except UnicodeDecodeError:
            text = value.decode("latin-1")
        fields.append((match.group(1).decode("ascii"), text.strip(" \t\r\n")))
    return fields


_FOLDING_PIECES = [
    *_PIECES,
    b"\t",
    b" ",
    b"\tz",
    b"C : 3",
    b"From q",
    b"\xe9",
    b"=?utf-8?q?=C3=A9?=",
    b"D: " + b"v" * 1500,
    b"w" * 3000,  # past the first window, and the next
]


@settings(max_examples=600, deadline=None)
@given(st.lists(st.sampled_from(_FOLDING_PIECES), max_size=24))
def test_the_header_block_is_read_as_the_regex_reading_read_it(parts: list[bytes]) -> None:
    """Unfolding with bytes.replace and the windowed search for the blank line
    give every field the regex reading gave, byte for byte, wherever the blank
    line falls (within the first 2 KB, past it, nowhere) and whatever mix of
    line endings and folds comes before it."""
    raw = b"".join(parts)
    want = _header_fields_by_regex(raw)
    got = parse_message(raw).headers
    # (parse_message decodes encoded words afterwards: compare the names, and the
    # values where there was none to decode)
    assert [n for n, _ in got] == [n for n, _ in want]
    for (_, g), (_, w) in zip(got, want, strict=True):
        if "=?" not in w:
            assert g == w

"""The header normalization rules shared by the index builder and the query side."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from email.utils import getaddresses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from projections.normalize import (
    INDEXED_HEADERS,
    addresses,
    date_key,
    index_value,
    msgid_list,
    normalize_address,
    normalize_header_name,
    normalize_list_id,
    normalize_msgid,
    normalize_subject,
    parse_date,
    query_date_key,
)

# --------------------------------------------------------------------------
# Message-IDs
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    ["<Foo@Bar>", " <Foo@Bar> (comment)", "Foo@Bar", "\r\n\t<Foo@Bar>\r\n", "(c) <Foo@Bar>"],
)
def test_msgid_forms_normalize_to_the_same_id_with_case_kept(value: str) -> None:
    assert normalize_msgid(value) == "Foo@Bar"


def test_folded_whitespace_inside_brackets_is_removed() -> None:
    assert normalize_msgid("<abc.\r\n def@host>") == "abc.def@host"


def test_first_bracketed_msgid_wins() -> None:
    assert normalize_msgid("<a@b> <c@d>") == "a@b"


@pytest.mark.parametrize("value", [None, "", "   ", "<>", "(only a comment)", "two words", "< >"])
def test_garbage_msgid_is_none(value: str | None) -> None:
    assert normalize_msgid(value) is None


def test_query_msgid_without_at_sign_is_taken_as_typed() -> None:
    assert normalize_msgid("1234.local") == "1234.local"
    assert normalize_msgid("<1234.local>") == "1234.local"


def test_control_characters_never_reach_a_msgid() -> None:
    assert normalize_msgid("<a\x00b@c\x7f>") == "ab@c"


def test_in_reply_to_with_trailing_prose_gives_only_the_id() -> None:
    assert msgid_list("<a@b> (Joe's message of Mon, 1 Jan 2024 10:00:00 +0000)") == ["a@b"]


def test_in_reply_to_with_leading_prose_gives_only_the_id() -> None:
    value = 'Your message of "Tue, 03 Mar 2009 10:00:00 EST." <a@b>'
    assert msgid_list(value) == ["a@b"]


def test_references_without_separating_whitespace_give_every_id() -> None:
    assert msgid_list("<a@b><c@d>   <e@f>") == ["a@b", "c@d", "e@f"]


def test_references_with_comments_and_garbage() -> None:
    value = "<a@b> (first (nested) comment) junk <c@d>\r\n\t<a@b> ,<e@f> (tail <x@y>)"
    assert msgid_list(value) == ["a@b", "c@d", "e@f"]


def test_references_with_missing_closing_bracket_keep_both_ids() -> None:
    assert msgid_list("<a@b <c@d>") == ["a@b", "c@d"]
    assert msgid_list("<a@b> <c@d") == ["a@b", "c@d"]


def test_references_without_any_brackets_take_words_with_at_sign() -> None:
    assert msgid_list("a@b c@d, e@f nonsense") == ["a@b", "c@d", "e@f"]


def test_references_duplicates_keep_the_first() -> None:
    assert msgid_list("<a@b> <c@d> <a@b>") == ["a@b", "c@d"]


@pytest.mark.parametrize("value", [None, "", "(nothing)", "no ids here", "<>"])
def test_references_without_ids_give_empty_list(value: str | None) -> None:
    assert msgid_list(value) == []


def test_escaped_parenthesis_does_not_close_a_comment() -> None:
    assert msgid_list(r"(a \) <hidden@x>) <seen@y>") == ["seen@y"]


def test_very_long_ids_are_accepted_and_fast() -> None:
    long_id = "x" * 10_000 + "@host"
    value = " ".join(f"<{i}{long_id}>" for i in range(100))
    started = time.perf_counter()
    ids = msgid_list(value)
    assert len(ids) == 100
    assert ids[0] == "0" + long_id
    # Generous bound: only a quadratic scan could come near it.
    assert time.perf_counter() - started < 2.0


@pytest.mark.parametrize(
    "value",
    [
        "(" * 50_000,
        "<" * 50_000,
        "(<" * 25_000,
        "\\" * 50_000,
        "a@" * 25_000,
        "<a@b" + " " * 50_000 + "c",
    ],
)
def test_hostile_references_finish_quickly(value: str) -> None:
    # 50k characters: a quadratic scan would need billions of steps.
    started = time.perf_counter()
    msgid_list(value)
    normalize_msgid(value)
    normalize_list_id(value)
    assert time.perf_counter() - started < 2.0


_ID_TEXT = st.text(alphabet=st.sampled_from(list("ab@<> \t\r\n,.;)\x00é")), max_size=40)


@given(_ID_TEXT)
def test_comment_free_fast_path_matches_the_full_scanner(value: str) -> None:
    # A leading comment forces the full tokenizer; it must agree with the fast path.
    assert msgid_list("(c) " + value) == msgid_list(value)
    assert normalize_msgid("(c) " + value) == normalize_msgid(value)


@given(st.text())
def test_msgids_never_hold_brackets_or_whitespace(value: str) -> None:
    for ident in [*msgid_list(value), normalize_msgid(value)]:
        if ident is None:
            continue
        assert ident
        assert "<" not in ident and ">" not in ident
        assert not any(char.isspace() for char in ident)


# --------------------------------------------------------------------------
# Subject
# --------------------------------------------------------------------------


def test_fwd_re_subject_matches_plain_subject() -> None:
    assert normalize_subject("Fwd: Re: Live Wire") == "live wire"
    assert normalize_subject("live wire") == "live wire"
    assert normalize_subject("Re: Live Wire") == "live wire"


@pytest.mark.parametrize(
    "subject",
    [
        "RE: Live Wire",
        "Re:Re: Live Wire",
        "RE[2]: Live Wire",
        "Re(3): Live Wire",
        "RE : Live Wire",
        "Re [2] : Live Wire",
        "AW: WG: Live Wire",
        "SV: VS: Live Wire",
        "Odp: PD: Live Wire",
        "Antw: Rif: Tr: Live Wire",
        "Fw: FWD: Live Wire",
        "  re:\tfwd:  Live \t Wire  ",
    ],
)
def test_reply_and_forward_prefixes_are_stripped_repeatedly(subject: str) -> None:
    assert normalize_subject(subject) == "live wire"


def test_subject_whitespace_is_collapsed() -> None:
    assert normalize_subject("Live\r\n\t  Wire ") == "live wire"


def test_subject_of_prefixes_only_is_empty_not_none() -> None:
    assert normalize_subject("Re: Fwd:") == ""
    assert normalize_subject("") == ""


def test_missing_subject_stays_none() -> None:
    assert normalize_subject(None) is None


def test_list_tag_is_kept_and_stops_prefix_stripping() -> None:
    assert normalize_subject("Re: [list] Re: Live Wire") == "[list] re: live wire"


def test_words_that_merely_start_like_prefixes_are_kept() -> None:
    assert normalize_subject("Retry: later") == "retry: later"
    assert normalize_subject("Travel plans") == "travel plans"
    assert normalize_subject("Re Live Wire") == "re live wire"


def test_long_prefix_runs_are_linear() -> None:
    started = time.perf_counter()
    assert normalize_subject("Re: " * 100_000 + "x") == "x"
    normalize_subject("re" + " " * 200_000 + "x")
    assert time.perf_counter() - started < 2.0


@given(st.text())
def test_subject_normalization_is_idempotent_and_ignores_a_reply_prefix(value: str) -> None:
    once = normalize_subject(value)
    assert normalize_subject(once) == once
    assert normalize_subject("Re: " + value) == once


# --------------------------------------------------------------------------
# Addresses
# --------------------------------------------------------------------------


def test_display_names_and_comments_are_stripped_and_lowercased() -> None:
    value = 'Joe <JOE@Example.com>, "Doe, Jane" <Jane@Example.com>, bob@example.com (Bob)'
    assert addresses([value]) == ["joe@example.com", "jane@example.com", "bob@example.com"]


def test_addresses_keep_order_and_drop_duplicates_across_headers() -> None:
    assert addresses(["a@x, B@x", "b@x, c@x"]) == ["a@x", "b@x", "c@x"]


def test_tokens_without_at_sign_are_dropped() -> None:
    assert addresses(["undisclosed-recipients:;", "localpart", "", "Joe <>"]) == []


def test_comment_with_parenthesis_inside_a_quoted_name_is_not_a_comment() -> None:
    assert addresses(['"Joe (work" <joe@x>']) == ["joe@x"]


def test_a_single_string_is_one_value_not_characters() -> None:
    assert addresses("a@x, b@x") == ["a@x", "b@x"]


@pytest.mark.parametrize("value", ["(" * 100_000, ":" * 100_000, "a:b;" * 20_000])
def test_hostile_address_headers_do_not_raise(value: str) -> None:
    addresses([value])


def test_group_parser_failure_falls_back_to_words_with_at_sign() -> None:
    assert addresses([":" * 5_000 + " a@x"]) == ["a@x"]


_ADDRESS_TEXT = st.text(alphabet=st.sampled_from(list("ab.@<>, \t=?éZ-_+")), max_size=40)


@given(_ADDRESS_TEXT)
def test_plain_address_fast_path_agrees_with_getaddresses(value: str) -> None:
    expected = list(dict.fromkeys(a.strip().lower() for _n, a in getaddresses([value]) if "@" in a))
    assert addresses([value]) == expected


def test_query_address_takes_the_single_addr_spec() -> None:
    assert normalize_address("Joe <JOE@Example.com>") == "joe@example.com"
    assert normalize_address("no address") is None


# --------------------------------------------------------------------------
# List-Id
# --------------------------------------------------------------------------


def test_list_id_drops_the_phrase_and_brackets() -> None:
    value = "Fedora devel <fedora-devel-list.redhat.com>"
    assert normalize_list_id(value) == "fedora-devel-list.redhat.com"


def test_list_id_is_lowercased() -> None:
    assert normalize_list_id("<Debian-Announce.Lists.Debian.ORG>") == (
        "debian-announce.lists.debian.org"
    )


def test_bare_list_id_is_itself_lowercased() -> None:
    assert normalize_list_id(" Foo.Example.org ") == "foo.example.org"


def test_list_id_ignores_comments() -> None:
    assert normalize_list_id("Foo (the <old.id>) <foo.example.org>") == "foo.example.org"


@pytest.mark.parametrize("value", [None, "", "  ", "<>"])
def test_empty_list_id_is_none(value: str | None) -> None:
    assert normalize_list_id(value) is None


# --------------------------------------------------------------------------
# Dates
# --------------------------------------------------------------------------


def test_date_is_converted_to_utc_with_original_offset() -> None:
    dt, offset = parse_date("Fri, 26 Jun 2026 23:30:00 -0500")
    assert dt == datetime(2026, 6, 27, 4, 30, tzinfo=UTC)
    assert dt is not None and dt.tzinfo is UTC
    assert offset == -300


def test_date_key_is_the_utc_calendar_day() -> None:
    assert date_key(parse_date("Fri, 26 Jun 2026 23:30:00 -0500")[0]) == "2026-06-27"


@pytest.mark.parametrize("value", [None, "", "garbage", "Thu Jan 01 00:00:10 +0000", "1 Jan"])
def test_missing_or_unparseable_date_is_null_not_1970(value: str | None) -> None:
    assert parse_date(value) == (None, None)


def test_pre_1970_dates_are_real_dates() -> None:
    dt, offset = parse_date("Mon, 1 Jan 1900 12:00:00 +0100")
    assert dt == datetime(1900, 1, 1, 11, 0, tzinfo=UTC)
    assert offset == 60
    assert date_key(dt) == "1900-01-01"


def test_minus_zero_offset_is_utc() -> None:
    assert parse_date("Tue, 2 Jan 2024 03:04:05 -0000") == (
        datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC),
        0,
    )


def test_offsets_of_99_hours_are_applied() -> None:
    dt, offset = parse_date("Tue, 2 Jan 2024 00:00:00 +9959")
    assert dt == datetime(2023, 12, 28, 20, 1, tzinfo=UTC)
    assert offset == 99 * 60 + 59


def test_two_digit_years_follow_the_stdlib() -> None:
    assert date_key(parse_date("1 Jan 99 12:00:00 +0000")[0]) == "1999-01-01"
    assert date_key(parse_date("1 Jan 05 12:00:00 +0000")[0]) == "2005-01-01"


def test_leap_second_rolls_into_the_next_minute() -> None:
    assert parse_date("31 Dec 2016 23:59:60 +0000")[0] == datetime(2017, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    "value",
    [
        "1 Jan 10000 00:00:00 +0000",
        "31 Feb 2020 00:00:00 +0000",
        "1 Jan 2020 25:61:61 +0000",
        "1 Jan 2020 10:00:00 +123456",
        "31 Dec 9999 23:00:00 -9959",
    ],
)
def test_out_of_range_dates_are_null(value: str) -> None:
    assert parse_date(value) == (None, None)


@given(st.text())
def test_parse_date_never_raises(value: str) -> None:
    dt, offset = parse_date(value)
    assert (dt is None) == (offset is None)
    if dt is not None:
        assert dt.tzinfo is UTC
        assert date_key(dt) is not None


def test_query_day_is_returned_as_is() -> None:
    assert query_date_key("2026-06-26") == "2026-06-26"
    assert query_date_key(" 2026-06-26 ") == "2026-06-26"


def test_query_full_date_is_converted_like_the_index() -> None:
    assert query_date_key("Fri, 26 Jun 2026 23:30:00 -0500") == "2026-06-27"


@pytest.mark.parametrize("value", ["2026-02-30", "tomorrow", ""])
def test_invalid_query_date_is_none(value: str) -> None:
    assert query_date_key(value) is None


# --------------------------------------------------------------------------
# Query side dispatch
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "index"),
    [
        ("Subject", "subject"),
        ("FROM", "from"),
        ("to", "to"),
        ("Cc", "to"),
        ("date", "date"),
        ("In-Reply-To", "in-reply-to"),
        ("references", "references"),
        ("List-ID", "list-id"),
        ("Message-Id", "message-id"),
        ("Subject:", "subject"),
        ("X-Mailer", None),
        ("Bcc", None),
        ("", None),
    ],
)
def test_header_names_map_to_their_index(name: str, index: str | None) -> None:
    assert normalize_header_name(name) == index
    if index is not None:
        assert index in INDEXED_HEADERS


@pytest.mark.parametrize(
    ("header", "value", "key"),
    [
        ("Subject", "Fwd: Re: Live Wire", "live wire"),
        ("From", "Joe <JOE@Example.com>", "joe@example.com"),
        ("Cc", "JANE@example.com", "jane@example.com"),
        ("Date", "Fri, 26 Jun 2026 23:30:00 -0500", "2026-06-27"),
        ("Date", "2026-06-26", "2026-06-26"),
        ("In-Reply-To", "<Parent@Host>", "Parent@Host"),
        ("References", "Ancestor@Host", "Ancestor@Host"),
        ("Message-ID", " <Foo@Bar> ", "Foo@Bar"),
        ("List-Id", "Fedora devel <fedora-devel-list.redhat.com>", "fedora-devel-list.redhat.com"),
        ("X-Mailer", "anything", None),
    ],
)
def test_query_values_normalize_like_indexed_values(header: str, value: str, key: str) -> None:
    assert index_value(header, value) == key

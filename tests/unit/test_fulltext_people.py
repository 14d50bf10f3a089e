"""The senders and recipients indexed as names: an address list cut at its commas
and each address parsed once (cached) gives the very words the standard library's
parse of the whole list gives, whatever the list holds."""

from __future__ import annotations

import os
from email.message import Message
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from projections.fulltext import extract as ex
from projections.fulltext.headers import parse_head
from tests.conftest import CORPORA

_NOTMUCH = CORPORA / "notmuch"

# pieces an address list is made of, the characters that change its parse among them
_SPECIALS = [" ", ",", ", ", "<", ">", '"', "(", ")", ":", ";", "[", "]", "\\", "@", "..", "\r\n "]
_WORDS = ["x", "alice@example.org", "Bob <bob@example.net>", "Bob", "=?utf-8?q?J=C3=BCrgen?="]
_WORDS += ["Zoë", "Smith, John", "undisclosed-recipients:;", "<a@b>", "@b.c"]
_PIECES = st.sampled_from(_SPECIALS + _WORDS)


def _head(values: list[tuple[str, str]]) -> Message:
    h = Message()
    for name, value in values:
        h.set_raw(name, value)
    return h


def _whole(h: Message) -> str:
    values = tuple(ex._as_text(v) for n in ("from", "to", "cc") for v in h.get_all(n) or [])
    return ex._people_of(values)


@settings(max_examples=3000, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["From", "To", "Cc", "Subject"]),
            st.lists(_PIECES, max_size=8).map("".join),
        ),
        max_size=4,
    )
)
def test_cut_lists_read_as_the_whole_list(values: list[tuple[str, str]]) -> None:
    h = _head(values)
    assert ex._people(h) == _whole(h)


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("Alice <alice@example.org>, bob@example.net", "Alice alice@example.org bob@example.net"),
        ('"Smith, John" <js@example.org>', "Smith, John js@example.org"),  # parsed whole
        ("=?utf-8?q?J=C3=BCrgen?= <j@example.de>", "Jürgen j@example.de"),
        ("undisclosed-recipients:;", ""),
    ],
)
def test_names_of_a_list(value: str, words: str) -> None:
    assert ex._people(_head([("To", value)])) == words


def test_real_headers_read_as_the_whole_list() -> None:
    """Every message of the notmuch corpus (real mail nobody here wrote)."""
    if not _NOTMUCH.is_dir():
        pytest.fail(f"the corpus is missing: {_NOTMUCH}")
    compared = 0
    for dirpath, _, files in os.walk(_NOTMUCH):
        for name in files:
            raw = Path(dirpath, name).read_bytes()
            h = parse_head(raw[: raw.find(b"\n\n") + 2] if b"\n\n" in raw else raw)
            assert ex._people(h) == _whole(h), name
            compared += 1
    assert compared > 100


@settings(max_examples=3000, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["From", "To", "Cc", "Subject"]),
            st.lists(_PIECES, max_size=8).map("".join),
        ),
        max_size=4,
    )
)
def test_display_names_of_cut_lists_read_as_the_whole_list(values: list[tuple[str, str]]) -> None:
    h = _head(values)
    for wanted in (frozenset({"from"}), frozenset({"to", "cc"})):
        whole = tuple(
            ex._as_text(h.policy.header_fetch_parse(n, v))
            for n, v in h.raw_items()
            if n.lower() in wanted
        )
        assert ex._display_names(h, wanted) == (ex._display_names_of(whole) if whole else "")


def test_real_display_names_read_as_the_whole_list() -> None:
    if not _NOTMUCH.is_dir():
        pytest.fail(f"the corpus is missing: {_NOTMUCH}")
    for dirpath, _, files in os.walk(_NOTMUCH):
        for name in files:
            raw = Path(dirpath, name).read_bytes()
            h = parse_head(raw[: raw.find(b"\n\n") + 2] if b"\n\n" in raw else raw)
            whole = tuple(
                ex._as_text(h.policy.header_fetch_parse(n, v))
                for n, v in h.raw_items()
                if n.lower() == "from"
            )
            assert ex._display_names(h, frozenset({"from"})) == (
                ex._display_names_of(whole) if whole else ""
            ), name

"""The one spelling of message flags: read from Maildir file names and IMAP FLAGS
items, written back as Maildir letters."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from projections.normalize.flags import (
    MAILDIR_LETTERS,
    canonical_flags,
    imap_flags,
    maildir_flags,
    maildir_letters,
)


@pytest.mark.parametrize(
    ("name", "in_new", "flags"),
    [
        ("1719828000.M1P2.host:2,S", False, ("\\Seen",)),
        ("1719828000.M1P2.host:2,FRS", False, ("\\Answered", "\\Flagged", "\\Seen")),
        ("x:2,DPT", False, ("$Forwarded", "\\Deleted", "\\Draft")),
        ("x:2,", False, ()),
        ("x!2,S", False, ("\\Seen",)),  # where ':' may not be in a name
        ("x:2,Sab", False, ("\\Seen",)),  # Dovecot's keyword letters: not resolvable
        ("x:2,SS", False, ("\\Seen",)),
        ("x:2,ZQS", False, ("\\Seen",)),  # letters no flag has
        ("x", False, None),  # cur/ without an info part: nothing known
        ("x", True, ()),  # new/: delivered, nothing set
        ("x:1,experimental", False, None),
    ],
)
def test_maildir_file_names_give_their_flags(
    name: str, in_new: bool, flags: tuple[str, ...] | None
) -> None:
    assert maildir_flags(name, in_new=in_new) == flags


def test_imap_flags_keep_system_flags_and_keywords_and_drop_recent() -> None:
    fetched = [b"\\Seen", b"\\RECENT", b"\\flagged", b"$Forwarded", b"$label1", b"\\Answered"]
    assert imap_flags(fetched) == (
        "$Forwarded",
        "$label1",
        "\\Answered",
        "\\Flagged",
        "\\Seen",
    )
    assert imap_flags([]) == ()
    assert imap_flags([b"\\*", b"\\Unknown", b"caf\xc3\xa9", b"$forwarded"]) == ("$Forwarded",)


def test_maildir_letters_are_sorted_and_leave_keywords_out() -> None:
    assert maildir_letters(("\\Seen", "\\Answered", "$label1", "\\Flagged")) == "FRS"
    assert maildir_letters(("$Forwarded", "\\Deleted", "\\Draft")) == "DPT"
    assert maildir_letters(None) == maildir_letters(()) == ""


@given(st.text(alphabet="DFPRST", max_size=8))
def test_maildir_letters_read_back_to_the_same_flags(letters: str) -> None:
    flags = maildir_flags(f"name:2,{letters}")
    assert flags == canonical_flags(MAILDIR_LETTERS[c] for c in letters)
    assert maildir_letters(flags) == "".join(sorted(set(letters)))
    assert maildir_flags(f"name:2,{maildir_letters(flags)}") == flags

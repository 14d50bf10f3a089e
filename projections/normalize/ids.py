"""Message-IDs and List-Ids: the id inside the brackets, comments and folding
removed, whatever the header around it looks like."""

from __future__ import annotations

import re

from projections.normalize.comments import comment_depth

__all__ = ["msgid_list", "normalize_list_id", "normalize_msgid"]

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
            depth = comment_depth(depth, token)
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

"""Message flags: the one spelling the log keeps, read from IMAP FLAGS and from
Maildir file names, and the names search knows them by.

The log keeps a location's flags as a sorted list of IMAP flag names: the system
flags in RFC 3501's spelling (``\\Answered \\Deleted \\Draft \\Flagged \\Seen``),
``$Forwarded`` (RFC 5788's registered keyword) for Maildir's ``P`` (passed), and
any other IMAP keyword as the server spelled it. ``\\Recent`` is left out: it
belongs to one IMAP session, not to the message. Maildir's letters map onto the
system flags as Dovecot, mutt and notmuch map them::

    D \\Draft   F \\Flagged   P $Forwarded   R \\Answered   S \\Seen   T \\Deleted

A message's flags for search (``is:unread``...) follow notmuch's
``maildir.synchronize_flags``: the union of the flags of its places still on the
source (not vanished) whose flags are known (of every place it was seen, once it
is at none: what the archive last knew), so a message is ``unread`` when no such
place has ``\\Seen``, ``flagged`` when any has ``\\Flagged``. ``trashed`` is
the one exception: a copy marked deleted in one folder and kept in another is
not mail thrown away, so it needs ``\\Deleted`` at every such place. A message
whose places show no flags at all (an mbox or POP3 import, events recorded
before flags were) matches none of these terms.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "FLAG_NAMES",
    "MAILDIR_LETTERS",
    "canonical_flags",
    "imap_flags",
    "maildir_flags",
    "maildir_letters",
]

_SYSTEM = {
    "\\answered": "\\Answered",
    "\\deleted": "\\Deleted",
    "\\draft": "\\Draft",
    "\\flagged": "\\Flagged",
    "\\seen": "\\Seen",
}
_FORWARDED = "$Forwarded"

#: Maildir info letters (``:2,LETTERS``) and the flag each stands for.
MAILDIR_LETTERS: dict[str, str] = {
    "D": "\\Draft",
    "F": "\\Flagged",
    "P": _FORWARDED,
    "R": "\\Answered",
    "S": "\\Seen",
    "T": "\\Deleted",
}
_LETTER_OF = {flag: letter for letter, flag in MAILDIR_LETTERS.items()}

#: The names ``is:`` and ``flag:`` take (mu's and notmuch's spelling), each with
#: the flag it asks about; ``unread`` asks for its absence.
FLAG_NAMES: dict[str, str] = {
    "unread": "\\Seen",
    "seen": "\\Seen",
    "flagged": "\\Flagged",
    "replied": "\\Answered",
    "draft": "\\Draft",
    "trashed": "\\Deleted",
    "passed": _FORWARDED,
}


def canonical_flags(flags: Iterable[str]) -> tuple[str, ...]:
    """``flags`` in the log's spelling: system flags in their one case, ``\\Recent``
    and anything that is no flag (empty, ``\\*``, an unknown ``\\`` name) left out,
    keywords kept as spelled (``$forwarded`` is ``$Forwarded``); sorted, each once."""
    out: set[str] = set()
    for flag in flags:
        if not flag or any(c in flag for c in " ()\x00\r\n"):
            continue
        low = flag.lower()
        if flag.startswith("\\"):
            system = _SYSTEM.get(low)
            if system is not None:
                out.add(system)
        elif low == _FORWARDED.lower():
            out.add(_FORWARDED)
        else:
            out.add(flag)
    return tuple(sorted(out))


def imap_flags(flags: Iterable[str | bytes]) -> tuple[str, ...]:
    """The flags of an IMAP FETCH FLAGS item (imapclient gives bytes) in the log's
    spelling; a flag that is not ASCII is left out (RFC 3501 allows none)."""
    texts = []
    for flag in flags:
        if isinstance(flag, bytes):
            try:
                flag = flag.decode("ascii")
            except UnicodeDecodeError:
                continue
        texts.append(flag)
    return canonical_flags(texts)


def maildir_flags(name: str, *, in_new: bool = False) -> tuple[str, ...] | None:
    """The flags a Maildir file name carries (``...:2,FRS``; ``!2,`` where ``:`` is
    not allowed in names), None when it carries none: a file in ``cur/`` without
    an info part tells nothing. A file in ``new/`` without one is new mail, no
    flag set (an empty tuple). Lowercase letters are Dovecot's keywords, named
    only in its ``dovecot-keywords`` file: left out, as are letters no flag has."""
    for mark in (":2,", "!2,"):
        at = name.rfind(mark)
        if at >= 0:
            letters = name[at + 3 :]
            return canonical_flags(MAILDIR_LETTERS[c] for c in letters if c in MAILDIR_LETTERS)
    return () if in_new else None


def maildir_letters(flags: Iterable[str] | None) -> str:
    """The Maildir info letters of ``flags`` (sorted, as the Maildir spec asks);
    keywords have none and are left out."""
    return "".join(sorted({_LETTER_OF[f] for f in flags or () if f in _LETTER_OF}))

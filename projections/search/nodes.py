"""The parsed form of a search query: small frozen dataclasses, one per kind of
term, combined with ``And``, ``Or`` and ``Not``.

Values are already normalized the way the indices store them (words folded,
addresses lowercased, Message-IDs without brackets, dates as UTC instants), so
a planner compiles a node without looking at the query text again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

__all__ = [
    "Address",
    "AddressField",
    "AddressPart",
    "All",
    "And",
    "DateRange",
    "ExactSubject",
    "Flag",
    "HasAttachment",
    "Is",
    "ListId",
    "Location",
    "MessageId",
    "Not",
    "Or",
    "Phrase",
    "Query",
    "SizeRange",
    "TextField",
    "Thread",
    "ThreadOf",
    "Word",
]

TextField = Literal["text", "subject", "body", "filename"]
"""Where words are searched: ``text`` (a bare word) is the subject and the body."""

AddressField = Literal["from", "to", "cc"]
AddressPart = Literal["address", "local", "domain", "any"]
"""Which part of an addr-spec a value names: ``alice@example.com`` the whole
address, ``alice@`` the local part, ``@example.com`` the domain, and a value
without ``@`` either the local part or the domain."""


@dataclass(frozen=True)
class All:
    """Every message (the query ``*``)."""


@dataclass(frozen=True)
class Word:
    """One folded word in a text field; ``prefix`` for a trailing ``*``."""

    field: TextField
    word: str
    prefix: bool = False


@dataclass(frozen=True)
class Phrase:
    """Folded words that must appear in this order, next to each other; ``prefix``
    makes the last one a prefix (``"live wi"*``)."""

    field: TextField
    words: tuple[str, ...]
    prefix: bool = False


@dataclass(frozen=True)
class ExactSubject:
    """``subject:="…"``: the subject key (``normalize_subject``) equals ``key``."""

    key: str


@dataclass(frozen=True)
class Address:
    """``from:``/``to:``/``cc:``: a lowercased address, or part of one."""

    field: AddressField
    part: AddressPart
    value: str
    prefix: bool = False


@dataclass(frozen=True)
class MessageId:
    """``id:``: the message with this Message-ID (without brackets)."""

    msgid: str


@dataclass(frozen=True)
class Thread:
    """``thread:ID``: the messages of the thread named by this id."""

    thread_id: str


@dataclass(frozen=True)
class ThreadOf:
    """``thread:{QUERY}``: every message in the threads of the matches of ``query``."""

    query: Query


@dataclass(frozen=True)
class ListId:
    """``list:``: the lowercased List-Id, ``prefix`` for a trailing ``*``."""

    list_id: str
    prefix: bool = False


@dataclass(frozen=True)
class DateRange:
    """``date:``: the Date header falls in ``[start, end)``, UTC; None is open."""

    start: datetime | None
    end: datetime | None


@dataclass(frozen=True)
class SizeRange:
    """``size:``: the raw message size in bytes is within ``[low, high]``; None is open."""

    low: int | None
    high: int | None


@dataclass(frozen=True)
class Location:
    """``folder:``/``account:``: a location's name, as written (case kept)."""

    field: Literal["folder", "account"]
    name: str
    prefix: bool = False


@dataclass(frozen=True)
class HasAttachment:
    """``has:attachment``: the message has at least one attachment."""


@dataclass(frozen=True)
class Is:
    """``is:deleted`` / ``is:vanished``: the state of the message's locations."""

    state: Literal["deleted", "vanished"]


@dataclass(frozen=True)
class Flag:
    """``is:unread``, ``flag:flagged``...: a flag of the message, by the rule of
    ``projections.normalize.flags`` (``name`` is one of its ``FLAG_NAMES``)."""

    name: str


@dataclass(frozen=True)
class And:
    """Every child matches (implicit between terms, or ``AND``)."""

    children: tuple[Query, ...]


@dataclass(frozen=True)
class Or:
    """At least one child matches."""

    children: tuple[Query, ...]


@dataclass(frozen=True)
class Not:
    """The child does not match (``NOT x`` or ``-x``)."""

    child: Query


Query = (
    All
    | Word
    | Phrase
    | ExactSubject
    | Address
    | MessageId
    | Thread
    | ThreadOf
    | ListId
    | DateRange
    | SizeRange
    | Location
    | HasAttachment
    | Is
    | Flag
    | And
    | Or
    | Not
)

"""One ``field:value`` (or a bare word or phrase) read into its query node, the
value normalized by the same rule the index it targets was built with."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, tzinfo

from projections.normalize import (
    normalize_address,
    normalize_list_id,
    normalize_msgid,
    normalize_subject,
)
from projections.normalize.flags import FLAG_NAMES
from projections.search.dates import read_date_range, read_size_range
from projections.search.errors import QuerySyntaxError
from projections.search.nodes import (
    Address,
    AddressField,
    AddressPart,
    All,
    DateRange,
    ExactSubject,
    Flag,
    HasAttachment,
    Is,
    ListId,
    Location,
    MessageId,
    Phrase,
    Query,
    SizeRange,
    TextField,
    Thread,
    Word,
)
from projections.search.words import fold_words

__all__ = ["FIELDS", "TermText", "read_term"]

FIELDS: tuple[str, ...] = (
    "from",
    "to",
    "cc",
    "subject",
    "body",
    "filename",
    "id",
    "thread",
    "list",
    "date",
    "size",
    "folder",
    "account",
    "has",
    "is",
    "flag",
)
"""Every ``field:`` prefix the language knows (``thread:{…}`` is read by the parser)."""

_TEXT_FIELDS: dict[str, TextField] = {
    "subject": "subject",
    "body": "body",
    "filename": "filename",
}
_ADDRESS_FIELDS: dict[str, AddressField] = {"from": "from", "to": "to", "cc": "cc"}


@dataclass(frozen=True, kw_only=True)
class TermText:
    """What the scanner read for one term, before it means anything: the field
    (None for a bare word or phrase), the value with its quotes and trailing
    ``*`` removed, where the value starts in the query and where the term ends."""

    field: str | None
    value: str
    value_position: int
    end: int
    quoted: bool = False
    exact: bool = False
    prefix: bool = False


def read_term(term: TermText, now: datetime, tz: tzinfo) -> Query:
    """Return the node ``term`` stands for; raise ``QuerySyntaxError`` at the
    value's position when the value means nothing for its field."""
    field, at = term.field, term.value_position
    if field is None:
        if term.prefix and not term.value and not term.quoted:
            return All()
        return _text("text", term)
    if term.prefix and field in ("id", "thread", "date", "size", "has", "is", "flag"):
        raise QuerySyntaxError(term.end - 1, f"'*' means nothing in {field}:")
    if field in _TEXT_FIELDS:
        if term.exact:
            if term.prefix:
                raise QuerySyntaxError(term.end - 1, "'*' means nothing in subject:=")
            return ExactSubject(normalize_subject(term.value) or "")
        return _text(_TEXT_FIELDS[field], term)
    if field in _ADDRESS_FIELDS:
        return _address(_ADDRESS_FIELDS[field], term)
    if field in ("id", "thread"):
        msgid = normalize_msgid(term.value)
        if msgid is None:
            raise QuerySyntaxError(at, f"{field}: needs a Message-ID")
        return MessageId(msgid) if field == "id" else Thread(msgid)
    if field == "list":
        list_id = normalize_list_id(term.value)
        if list_id is None:
            raise QuerySyntaxError(at, "list: needs a List-Id")
        return ListId(list_id, term.prefix)
    if field == "date":
        start, end = read_date_range(term.value.strip(), at + term.quoted, now, tz)
        return DateRange(start, end)
    if field == "size":
        low, high = read_size_range(term.value.strip(), at + term.quoted)
        return SizeRange(low, high)
    if field in ("folder", "account"):
        if not term.value:
            raise QuerySyntaxError(at, f"{field}: needs a name")
        return Location("folder" if field == "folder" else "account", term.value, term.prefix)
    value = term.value.strip().lower()
    if field == "has" and value == "attachment":
        return HasAttachment()
    if field == "is" and value in ("deleted", "vanished"):
        return Is("deleted" if value == "deleted" else "vanished")
    if field in ("is", "flag") and value in FLAG_NAMES:
        return Flag(value)
    flags = ", ".join(FLAG_NAMES)
    known = {"has": "attachment", "is": f"deleted, vanished, {flags}"}.get(field, flags)
    raise QuerySyntaxError(at, f"{field}:{term.value} is not known (known: {known})")


def _text(field: TextField, term: TermText) -> Word | Phrase:
    """A word, or a phrase when the folded value holds several."""
    words = fold_words(term.value)
    if not words:
        what = "before '*'" if term.prefix else "in this term"
        raise QuerySyntaxError(term.value_position, f"nothing to search for {what}")
    if len(words) == 1:
        return Word(field, words[0], term.prefix)
    return Phrase(field, words, term.prefix)


def _address(field: AddressField, term: TermText) -> Address:
    """``alice@example.com``, ``alice@``, ``@example.com`` or ``alice``, lowercased
    as the address index is (``normalize.addresses``).

    A value with a ``<`` is read as a header would be (``"Alice <a@x>"``,
    ``<a@x>``), quoted or not: ``explain`` quotes a value for its other
    characters, so a reading that depended on the quotes would not read back.
    The addr-spec found is kept only when it is its own normal form, so that
    reading it again gives it again.
    """
    if "<" in term.value:
        full = normalize_address(term.value)
        local, _, domain = (full or "").rpartition("@")
        if full is not None and local and domain and normalize_address(full) == full:
            return Address(field, "address", full, term.prefix)
    value = term.value.strip().lower()
    if not value:
        raise QuerySyntaxError(term.value_position, f"{field}: needs an address")
    part: AddressPart = "any"
    if "@" in value:
        local, _, domain = value.rpartition("@")
        if local and domain:
            part = "address"
        elif local:
            part, value = "local", local
        elif domain:
            part, value = "domain", domain
        else:
            raise QuerySyntaxError(term.value_position, "'@' alone is no address")
    return Address(field, part, value, term.prefix)

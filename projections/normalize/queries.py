"""The query side: which index a ``find(header, value)`` targets and the key its
value gives there, through the same rules the index builder uses."""

from __future__ import annotations

from projections.normalize.addresses import normalize_address
from projections.normalize.dates import query_date_key
from projections.normalize.ids import normalize_list_id, normalize_msgid
from projections.normalize.subjects import normalize_subject

__all__ = ["INDEXED_HEADERS", "index_value", "normalize_header_name"]

_HEADER_INDEX = {
    "subject": "subject",
    "from": "from",
    "to": "to",
    "cc": "to",
    "date": "date",
    "in-reply-to": "in-reply-to",
    "references": "references",
    "list-id": "list-id",
    "message-id": "message-id",
}

INDEXED_HEADERS: frozenset[str] = frozenset(_HEADER_INDEX.values())
"""The index names ``normalize_header_name`` can return."""


def normalize_header_name(name: str) -> str | None:
    """Return the index a ``find(header, value)`` call targets, or None.

    Case-insensitive, surrounding spaces and a trailing colon ignored; ``Cc``
    maps to the ``to`` index. Headers that are not indexed give None.
    """
    if not name:
        return None
    return _HEADER_INDEX.get(name.strip().rstrip(":").strip().lower())


def index_value(header: str, value: str) -> str | None:
    """Return the index key for a query ``value`` on ``header``, or None.

    ``header`` is any header name ``normalize_header_name`` accepts. The value
    goes through the same function the index builder uses, so the key matches
    the stored one. None means no key can match (an unknown header or a
    value that normalizes to nothing).
    """
    index = normalize_header_name(header)
    if index is None or value is None:
        return None
    if index == "subject":
        return normalize_subject(value)
    if index in ("from", "to"):
        return normalize_address(value)
    if index == "date":
        return query_date_key(value)
    if index == "list-id":
        return normalize_list_id(value)
    return normalize_msgid(value)

"""The one copy of the header normalization rules (README, "Rules it follows").

Index building and querying both call these functions, so a value typed by a
user and a value read from a message meet in the same key: ``Fwd: Re: Live
Wire`` and ``live wire`` give the same subject key, ``<Foo@Bar>`` and
``Foo@Bar`` the same Message-ID.

Everything here is pure, stdlib-only and total on ``str`` input: garbage gives
``None`` (or an empty list), never an exception, and no function uses a regular
expression that can backtrack catastrophically, so a 1 MB header costs time in
proportion to its length.
"""

from __future__ import annotations

from projections.normalize.addresses import addresses, normalize_address
from projections.normalize.dates import (
    DATE_REPAIRS,
    DateReading,
    date_key,
    parse_date,
    query_date_key,
    read_date,
)
from projections.normalize.ids import msgid_list, normalize_list_id, normalize_msgid
from projections.normalize.queries import INDEXED_HEADERS, index_value, normalize_header_name
from projections.normalize.subjects import normalize_subject

__all__ = [
    "DATE_REPAIRS",
    "INDEXED_HEADERS",
    "DateReading",
    "addresses",
    "date_key",
    "index_value",
    "msgid_list",
    "normalize_address",
    "normalize_header_name",
    "normalize_list_id",
    "normalize_msgid",
    "normalize_subject",
    "parse_date",
    "query_date_key",
    "read_date",
]

"""The search language: ``parse`` reads a notmuch/mu-style query into a tree of
small frozen nodes, ``explain`` prints a tree back as a query, and ``fold`` is
the word folding both the query and the indexed text go through.

Pure: no index, no clock (relative dates count from the ``now`` passed in).
"""

from __future__ import annotations

from projections.search.errors import QuerySyntaxError
from projections.search.explain import explain
from projections.search.language import MAX_DEPTH, parse
from projections.search.nodes import (
    Address,
    All,
    And,
    DateRange,
    ExactSubject,
    HasAttachment,
    Is,
    ListId,
    Location,
    MessageId,
    Not,
    Or,
    Phrase,
    Query,
    SizeRange,
    Thread,
    ThreadOf,
    Word,
)
from projections.search.terms import FIELDS
from projections.search.words import fold, fold_words

__all__ = [
    "FIELDS",
    "MAX_DEPTH",
    "Address",
    "All",
    "And",
    "DateRange",
    "ExactSubject",
    "HasAttachment",
    "Is",
    "ListId",
    "Location",
    "MessageId",
    "Not",
    "Or",
    "Phrase",
    "Query",
    "QuerySyntaxError",
    "SizeRange",
    "Thread",
    "ThreadOf",
    "Word",
    "explain",
    "fold",
    "fold_words",
    "parse",
]

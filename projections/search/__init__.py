"""The search language: ``parse`` reads a notmuch/mu-style query into a tree of
small frozen nodes, ``explain`` prints a tree back as a query, and ``fold`` is
the word folding both the query and the indexed text go through.

Pure: no index, no clock (relative dates count from the ``now`` passed in).

Its modules are imported when a name is first asked for (PEP 562): the
full-text extraction needs ``fold`` only, and every sync and import extracts
text, where parsing and printing queries (the nodes, the grammar: about 15 ms
of imports) is for ``search`` alone.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from projections.search.errors import QuerySyntaxError
    from projections.search.language import MAX_DEPTH, parse
    from projections.search.nodes import (
        Address,
        All,
        And,
        DateRange,
        ExactSubject,
        Flag,
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
    from projections.search.printing import explain
    from projections.search.terms import FIELDS
    from projections.search.words import fold, fold_words

# Where each public name lives.
_MODULES = {
    "Address": "nodes",
    "All": "nodes",
    "And": "nodes",
    "DateRange": "nodes",
    "ExactSubject": "nodes",
    "FIELDS": "terms",
    "Flag": "nodes",
    "HasAttachment": "nodes",
    "Is": "nodes",
    "ListId": "nodes",
    "Location": "nodes",
    "MAX_DEPTH": "language",
    "MessageId": "nodes",
    "Not": "nodes",
    "Or": "nodes",
    "Phrase": "nodes",
    "Query": "nodes",
    "QuerySyntaxError": "errors",
    "SizeRange": "nodes",
    "Thread": "nodes",
    "ThreadOf": "nodes",
    "Word": "nodes",
    "explain": "printing",
    "fold": "words",
    "fold_words": "words",
    "parse": "language",
}

__all__ = [
    "FIELDS",
    "MAX_DEPTH",
    "Address",
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


def __getattr__(name: str) -> object:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"projections.search.{module}"), name)

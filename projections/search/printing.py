"""A query tree printed back as a query: explicit ``AND``/``OR``/``NOT``, every
group in parentheses, values in their normalized form.

What ``--explain`` shows a user, and a query in its own right:
``parse(explain(tree))`` gives ``tree`` again.
"""

from __future__ import annotations

from datetime import UTC, datetime

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

__all__ = ["explain"]

_UNSAFE = frozenset('()"{}\\*:')
_KEYWORDS = frozenset({"AND", "OR", "NOT"})


def _quote(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def _value(text: str) -> str:
    """``text`` as it can follow a ``field:`` (or stand alone) and read back the same."""
    if (
        not text
        or text.upper() in _KEYWORDS
        or text[0] in "-="
        or any(c.isspace() or c in _UNSAFE for c in text)
    ):
        return _quote(text)
    return text


def _star(prefix: bool) -> str:
    return "*" if prefix else ""


def _instant(when: datetime) -> str:
    when = when.astimezone(UTC)
    text = (
        f"{when.year:04d}-{when.month:02d}-{when.day:02d}"
        f"T{when.hour:02d}:{when.minute:02d}:{when.second:02d}"
    )
    if when.microsecond:
        text += f".{when.microsecond:06d}"
    return text + "Z"


def _term(node: Query) -> str:
    if isinstance(node, All):
        return "*"
    if isinstance(node, Word):
        field = "" if node.field == "text" else f"{node.field}:"
        return f"{field}{_value(node.word)}{_star(node.prefix)}"
    if isinstance(node, Phrase):
        field = "" if node.field == "text" else f"{node.field}:"
        return f"{field}{_quote(' '.join(node.words))}{_star(node.prefix)}"
    if isinstance(node, ExactSubject):
        return f"subject:={_quote(node.key)}"
    if isinstance(node, Address):
        shown = {
            "address": node.value,
            "local": f"{node.value}@",
            "domain": f"@{node.value}",
            "any": node.value,
        }[node.part]
        return f"{node.field}:{_value(shown)}{_star(node.prefix)}"
    if isinstance(node, MessageId):
        return f"id:{_quote(f'<{node.msgid}>')}"
    if isinstance(node, Thread):
        return f"thread:{_quote(f'<{node.thread_id}>')}"
    if isinstance(node, ListId):
        return f"list:{_quote(f'<{node.list_id}>')}{_star(node.prefix)}"
    if isinstance(node, DateRange):
        start = _instant(node.start) if node.start else ""
        end = _instant(node.end) if node.end else ""
        return f"date:{start}..{end}"
    if isinstance(node, SizeRange):
        if node.low is not None and node.low == node.high:
            return f"size:{node.low}"
        low = "" if node.low is None else str(node.low)
        high = "" if node.high is None else str(node.high)
        return f"size:{low}..{high}"
    if isinstance(node, Location):
        return f"{node.field}:{_value(node.name)}{_star(node.prefix)}"
    if isinstance(node, HasAttachment):
        return "has:attachment"
    if isinstance(node, Is):
        return f"is:{node.state}"
    if isinstance(node, Flag):
        return f"is:{node.name}"
    raise TypeError(f"not a query node: {node!r}")


def _explain(node: Query, nested: bool) -> str:
    if isinstance(node, And | Or):
        joiner = " AND " if isinstance(node, And) else " OR "
        text = joiner.join(_explain(child, True) for child in node.children)
        return f"({text})" if nested else text
    if isinstance(node, Not):
        return f"NOT {_explain(node.child, True)}"
    if isinstance(node, ThreadOf):
        return f"thread:{{{_explain(node.query, False)}}}"
    return _term(node)


def explain(node: Query) -> str:
    """Return ``node`` written as a query with every operator and group spelled
    out: ``from:alice subject:budget`` -> ``from:alice AND subject:budget``."""
    return _explain(node, False)

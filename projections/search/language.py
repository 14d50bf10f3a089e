"""The search language: a query string read into a tree of ``nodes``.

notmuch/mu-style: ``from:alice subject:budget date:2025-06..`` and free words.
Terms next to each other must all match (implicit AND); ``or``, ``and`` and
``not`` are keywords in any case, as in notmuch (``OR``, ``And``: a word to be
searched as itself is quoted, ``"and"``), ``-`` before a term is NOT, parentheses group,
``"…"`` is a phrase, a trailing ``*`` a prefix, ``*`` alone every message.
``OR`` binds looser than AND, NOT tighter than both. ``thread:{…}`` nests a
whole query. A field name outside the known ones is an error, not a word
(quote it to search for it: ``"re:"``).

``parse`` is pure: relative dates count back from the ``now`` it is given.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from typing import Literal

from projections.search.errors import QuerySyntaxError
from projections.search.nodes import And, Not, Or, Query, ThreadOf
from projections.search.terms import FIELDS, TermText, read_term

__all__ = ["MAX_DEPTH", "parse"]

MAX_DEPTH = 64
"""How deeply parentheses, ``NOT`` and ``thread:{…}`` may nest."""

_STRUCTURE = frozenset('()"{}')
_KEYWORDS = frozenset({"AND", "OR", "NOT"})
_FIELD_SET = frozenset(FIELDS)

TokenKind = Literal["(", ")", "thread{", "}", "AND", "OR", "NOT", "-", "term"]


@dataclass(frozen=True)
class _Token:
    kind: TokenKind
    position: int
    term: TermText | None = None


class _Scanner:
    """Cuts a query into tokens; raises at the first character it cannot read."""

    def __init__(self, query: str) -> None:
        self.query = query
        self.tokens: list[_Token] = []

    def scan(self) -> list[_Token]:
        q, i = self.query, 0
        while i < len(q):
            c = q[i]
            if c.isspace():
                i += 1
            elif c in "()}":
                self.tokens.append(_Token("(" if c == "(" else ")" if c == ")" else "}", i))
                i += 1
            elif c == "{":
                raise QuerySyntaxError(i, "'{' only opens a thread:{…} query")
            elif c == "-":
                if i + 1 == len(q) or q[i + 1].isspace() or q[i + 1] in ")}":
                    raise QuerySyntaxError(
                        i, "'-' must be followed by a term (quote it to search for it)"
                    )
                self.tokens.append(_Token("-", i))
                i += 1
            elif c == '"':
                i = self._quoted(i, field=None, value_position=i, position=i)
            else:
                i = self._word(i)
        return self.tokens

    def _read_quoted(self, start: int) -> tuple[str, int, bool]:
        """The text of the quoted string opening at ``start``, the index after it,
        and whether a ``*`` follows the closing quote. ``\\`` escapes a character."""
        q, j, out = self.query, start + 1, []
        while j < len(q):
            c = q[j]
            if c == "\\" and j + 1 < len(q):
                out.append(q[j + 1])
                j += 2
            elif c == '"':
                j += 1
                prefix = j < len(q) and q[j] == "*"
                return "".join(out), j + prefix, prefix
            else:
                out.append(c)
                j += 1
        raise QuerySyntaxError(start, "this quote is never closed")

    def _quoted(
        self,
        start: int,
        *,
        field: str | None,
        value_position: int,
        position: int,
        exact: bool = False,
    ) -> int:
        value, end, prefix = self._read_quoted(start)
        term = TermText(
            field=field,
            value=value,
            value_position=value_position,
            end=end,
            quoted=True,
            exact=exact,
            prefix=prefix,
        )
        self.tokens.append(_Token("term", position, term))
        return end

    def _word(self, start: int) -> int:
        q, j = self.query, start
        while j < len(q) and not q[j].isspace() and q[j] not in _STRUCTURE:
            j += 1
        word = q[start:j]
        if word.upper() in _KEYWORDS:  # (any case: notmuch's Xapian FLAG_BOOLEAN_ANY_CASE)
            upper = word.upper()
            kind: TokenKind = "AND" if upper == "AND" else "OR" if upper == "OR" else "NOT"
            self.tokens.append(_Token(kind, start))
            return j
        name, colon, rest = word.partition(":")
        if not colon:
            return self._unquoted(start, None, word, start, j)
        field = name.lower()
        if field not in _FIELD_SET:
            raise QuerySyntaxError(
                start, f"unknown field {name + ':'!r} (quote the word to search for it)"
            )
        value_at = start + len(name) + 1
        if field == "date":
            return self._date(start, value_at)
        exact = field == "subject" and rest.startswith("=")
        if exact:
            rest, value_at = rest[1:], value_at + 1
        if rest:
            return self._unquoted(start, field, rest, value_at, j, exact=exact)
        if j < len(q) and q[j] == '"':
            return self._quoted(j, field=field, value_position=j, position=start, exact=exact)
        if j < len(q) and q[j] == "{" and field == "thread" and not exact:
            self.tokens.append(_Token("thread{", start))
            return j + 1
        raise QuerySyntaxError(value_at, f"{field}: needs a value")

    def _date(self, start: int, value_at: int) -> int:
        """A ``date:`` value: quoted and unquoted pieces up to a blank or a bracket,
        read as one (``date:"last week"..``, ``date:yesterday.."2 hours"``)."""
        q, j, pieces = self.query, value_at, []
        while j < len(q) and not q[j].isspace() and (q[j] == '"' or q[j] not in _STRUCTURE):
            if q[j] == '"':
                text, j, star = self._read_quoted(j)
                pieces.append(text + "*" * star)
            else:
                k = j
                while k < len(q) and not q[k].isspace() and q[k] not in _STRUCTURE:
                    k += 1
                pieces.append(q[j:k])
                j = k
        value = "".join(pieces)
        if not value:
            raise QuerySyntaxError(value_at, "date: needs a value")
        prefix = value.endswith("*")
        term = TermText(
            field="date",
            value=value[:-1] if prefix else value,
            value_position=value_at,
            end=j,
            quoted=q[value_at] == '"',
            prefix=prefix,
        )
        self.tokens.append(_Token("term", start, term))
        return j

    def _unquoted(
        self,
        start: int,
        field: str | None,
        value: str,
        value_at: int,
        end: int,
        *,
        exact: bool = False,
    ) -> int:
        prefix = value.endswith("*")
        if prefix:
            value = value[:-1]
        star = value.find("*")
        if star >= 0:
            raise QuerySyntaxError(value_at + star, "'*' only ends a word")
        term = TermText(
            field=field, value=value, value_position=value_at, end=end, exact=exact, prefix=prefix
        )
        self.tokens.append(_Token("term", start, term))
        return end


class _Parser:
    """Recursive descent over the tokens: or -> and -> unary -> primary."""

    def __init__(self, query: str, tokens: list[_Token], now: datetime, tz: tzinfo) -> None:
        self.query = query
        self.tokens = tokens
        self.at = 0
        self.depth = 0
        self.now = now
        self.tz = tz

    def _peek(self) -> _Token | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def _take(self) -> _Token | None:
        token = self._peek()
        self.at += token is not None
        return token

    def _enter(self, position: int) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise QuerySyntaxError(position, f"the query nests deeper than {MAX_DEPTH} levels")

    def parse(self) -> Query:
        if not self.tokens:
            raise QuerySyntaxError(0, "the query is empty (* matches every message)")
        node = self._or()
        token = self._peek()
        if token is not None:  # only a closing bracket stops _or early
            raise QuerySyntaxError(token.position, f"this {token.kind!r} closes nothing")
        return node

    def _or(self) -> Query:
        children = [self._and()]
        while (token := self._peek()) is not None and token.kind == "OR":
            self._take()
            self._need_term_after(token)
            children.append(self._and())
        return children[0] if len(children) == 1 else Or(tuple(children))

    def _and(self) -> Query:
        children = [self._unary()]
        while (token := self._peek()) is not None and token.kind not in (")", "}", "OR"):
            if token.kind == "AND":
                self._take()
                self._need_term_after(token)
            children.append(self._unary())
        return children[0] if len(children) == 1 else And(tuple(children))

    def _need_term_after(self, keyword: _Token) -> None:
        following = self._peek()
        if following is None or following.kind in (")", "}", "AND", "OR"):
            raise QuerySyntaxError(keyword.position, f"{keyword.kind} needs a term after it")

    def _unary(self) -> Query:
        token = self._peek()
        if token is not None and token.kind in ("NOT", "-"):
            self._take()
            self._enter(token.position)
            child = self._unary()
            self.depth -= 1
            return Not(child)
        return self._primary()

    def _primary(self) -> Query:
        token = self._take()
        if token is None:
            raise QuerySyntaxError(len(self.query), "the query ends where a term was expected")
        if token.kind == "term" and token.term is not None:
            return read_term(token.term, self.now, self.tz)
        if token.kind in ("(", "thread{"):
            close = ")" if token.kind == "(" else "}"
            following = self._peek()
            if following is not None and following.kind == close:
                raise QuerySyntaxError(
                    following.position, f"nothing between {token.kind[-1]!r} and {close!r}"
                )
            self._enter(token.position)
            inner = self._or()
            self.depth -= 1
            end = self._take()
            if end is None or end.kind != close:
                raise QuerySyntaxError(token.position, f"this {token.kind[-1]!r} is never closed")
            return inner if token.kind == "(" else ThreadOf(inner)
        if token.kind in ("AND", "OR"):
            raise QuerySyntaxError(token.position, f"{token.kind} needs a term before it")
        raise QuerySyntaxError(token.position, f"this {token.kind!r} closes nothing")


def parse(query: str, *, now: datetime, tz: tzinfo = UTC) -> Query:
    """Return the tree of ``query``; raise ``QuerySyntaxError`` (with the 0-based
    position) when it cannot be read.

    ``now`` anchors relative dates (``date:2w..``); calendar dates are read in
    ``tz`` (UTC unless given) and every date range comes out in UTC.
    """
    tokens = _Scanner(query).scan()
    return _Parser(query, tokens, now, tz).parse()

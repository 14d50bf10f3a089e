"""A search query tree (``projections.search``) compiled to one SQL condition
over a row of ``messages``, with the notes ``--explain`` prints: which table
each term reads, and what the current tables cannot answer as asked.

Every term becomes a predicate that is true or false, never NULL (an undated
message is not in ``date:2024``, so it is in ``NOT date:2024``). Values are
spelled as SQL literals, not parameters: DuckDB plans an index scan for a
literal ``message_id = '…'``, never for a parameter.

What the read model answers today, and how:

- ``from:`` reads ``messages.from_addr``; ``to:`` and ``cc:`` read
  ``messages.to_addrs``, which holds the To and Cc addresses together, so both
  match either header. A value that names no address part (no ``@``: ``Carl``,
  ``"Carl Worth"``) also matches the display names, as notmuch's does: a word
  (or phrase) of the full-text index's ``from_names`` (``to_names``: To and Cc).
- bare words and phrases (the subject, the body text, and the From/To/Cc names
  and addresses, as notmuch's), ``subject:``,
  ``body:``, ``filename:`` and ``has:attachment`` read the full-text index
  (``projections.fulltext``): each becomes an FTS5 ``MATCH`` expression whose
  matching seqs the plan names as a table (``SearchPlan.text``), and the row's
  condition is ``m.seq IN`` that table. Terms of the same ``AND`` share one
  expression. Words are cut into runs of letters and digits, as the index's
  tokenizer cuts the text (``live-wire`` is the phrase "live wire").
- ``folder:``, ``account:``, ``is:vanished`` and ``is:deleted`` read
  ``locations``: a folder or account where the message was seen (vanished from
  it since or not), ``is:vanished`` gone from at least one place it was seen,
  ``is:deleted`` gone from every one. A message deleted from the store itself
  (``mailledger delete``) is not in the read model and matches nothing.
- ``is:unread``, ``flag:flagged`` and the other flag names read the flags of
  ``locations`` by the rule of ``projections.normalize.flags`` (``MESSAGE_FLAGS``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime

from projections.normalize.flags import FLAG_NAMES
from projections.queries.locations import MESSAGE_FLAGS
from projections.search import (
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
    fold,
)
from projections.tables import sql_string
from stores.errors import UsageError

__all__ = ["IN_THREAD", "SearchPlan", "compile_query"]

# what separates words: anything but a letter or a digit (as FTS5's unicode61 cuts)
_NOT_WORD = re.compile(r"[\W_]+")
_DOMAIN = "regexp_extract({a}, '@([^@]*)$', 1)"

# the index's columns a text field searches (``projections.fulltext.index``)
_COLUMNS = {
    # (as notmuch's: the subject, the body, and the From/To/Cc names and addresses)
    "text": "{subject body names}",
    "subject": "subject",
    "body": "body",
    "filename": "filenames",
}
_TO_CC = (
    "to: and cc: both read the To and Cc addresses together (messages.to_addrs keeps"
    " one list); a cc_addrs column would tell them apart"
)


@dataclass
class SearchPlan:
    """A compiled query: ``where`` is a condition on the ``messages`` row ``m``;
    ``notes`` say, term by term, what is read and what is approximated."""

    where: str
    notes: list[str] = field(default_factory=list)
    text: dict[str, str] = field(default_factory=dict)
    """The full-text matches the condition reads: table name -> FTS5 expression
    (the table holds one column, ``seq``, of the matching messages)."""
    drive: str | None = None
    """A text table every match must be in, when every text table is read by
    ``m`` itself (none in a ``thread:{…}``): a search may then read the matches
    a date window at a time, newest (or oldest) first, and stop when it has a
    page (``queries.search``)."""
    only_text: bool = False
    """The condition is ``drive``'s alone (a query of words and phrases): its
    matches are the index's, with no other condition to test."""
    by_id: bool = False
    """A condition on ``message_id`` itself (``id:``, a thread) is part of it:
    DuckDB reads such a condition through the index only outside a query with
    ``ORDER BY … LIMIT``, so a page is read in two parts (``queries.search``)."""
    names: set[str] = field(default_factory=set)
    """The text tables that read display names for ``from:``/``to:``/``cc:``: a
    condition like the addresses beside them, not words to rank by (relevance
    scores the query's words and phrases)."""
    threads: dict[str, str] = field(default_factory=dict)
    """The threads the condition reads: table name -> the Message-ID whose thread
    it holds (one column, ``message_id``, of the thread's messages). A search
    reads the thread's members through the indexes first and spells them in the
    condition as literals (``queries.search``), so that DuckDB reads them through
    the ``message_id`` index too."""


def compile_query(tree: Query) -> SearchPlan:
    """Return the plan of ``tree``; a ``UsageError`` names a term that holds
    nothing to search for."""
    compiler = _Compiler()
    where = compiler.predicate(tree, "m", conjunct=True)
    drive = None if compiler.nested else compiler.drive
    only = drive is not None and len(compiler.text) == 1 and where in _only(drive)
    notes = list(dict.fromkeys(compiler.notes))
    return SearchPlan(
        where, notes, compiler.text, drive, only, compiler.by_id, compiler.names, compiler.threads
    )


def _only(name: str) -> tuple[str, str]:
    cond = _IN_TEXT.format(m="m", name=name)
    return cond, f"coalesce({cond}, false)"


_IN_TEXT = "{m}.seq IN (SELECT seq FROM {name})"
IN_THREAD = "{m}.message_id IN (SELECT message_id FROM {name})"
"""How a condition reads a thread table (``SearchPlan.threads``)."""


class _NeverNull(str):
    """A condition that is never NULL (on ``message_id``, which never is): left
    bare, not in a ``coalesce`` that would keep DuckDB from its index."""


def _literal(text: str) -> str:
    if "\x00" in text:
        raise UsageError("a query value may not hold a NUL character")
    return sql_string(text)


def _instant(when: datetime) -> str:
    return f"TIMESTAMPTZ '{when.astimezone(UTC).isoformat(sep=' ')}'"


class _Compiler:
    def __init__(self) -> None:
        self.notes: list[str] = []
        self.aliases = 0
        self.text: dict[str, str] = {}
        self.drive: str | None = None  # a text table every match is in
        self.threads: dict[str, str] = {}
        self.names: set[str] = set()
        self.by_id = False  # a condition on message_id itself
        self.nested = False  # a text table is read inside a subquery

    def _alias(self) -> str:
        self.aliases += 1
        return f"m{self.aliases}"

    def predicate(
        self, node: Query | str, m: str, conjunct: bool = False, negated: bool = False
    ) -> str:
        """The condition of ``node`` on row ``m``; ``conjunct``: every match of the
        whole query must meet it; ``negated``: it is under a NOT."""
        if isinstance(node, And):
            node = self._join_text(node, m, conjunct)
        if isinstance(node, str):
            return node
        if isinstance(node, And | Or):
            joiner = " AND " if isinstance(node, And) else " OR "
            inner = conjunct and isinstance(node, And)
            return (
                "(" + joiner.join(self.predicate(c, m, inner, negated) for c in node.children) + ")"
            )
        if isinstance(node, Not):
            return f"(NOT {self.predicate(node.child, m, negated=True)})"
        if isinstance(node, All):
            return "true"
        if isinstance(node, ThreadOf) and isinstance(node.query, MessageId):
            self.notes.append("thread:{id:…}: the thread_nodes of the thread holding the id")
            return self._thread(m, node.query.msgid)
        if isinstance(node, ThreadOf):
            alias = self._alias()
            self.notes.append("thread:{…}: the matches' threads read from thread_nodes")
            matches = f"SELECT {alias}.message_id FROM messages {alias}"
            matches += f" WHERE {self.predicate(node.query, alias)}"
            return self._threads_of(m, matches)
        # A term that may be NULL (a message without a date, a subject) is false,
        # not unknown, under a NOT: coalesced there, each conjunct on its own (a
        # coalesce around a whole AND kept DuckDB from filtering on its cheap part
        # first: subject:budget, 100,000 messages, 150 -> 69 ms). Anywhere else a
        # WHERE drops NULL as it drops false, through AND and OR alike, and a bare
        # comparison is one DuckDB pushes into its scan (a date range's count at
        # 1,000,000 messages: 8.7 -> 4.1 ms).
        term = self._term(node, m, conjunct)
        parts = [
            f"coalesce({p}, false)" if negated and not isinstance(p, _NeverNull) else p
            for p in ([term] if isinstance(term, str) else term)
        ]
        return parts[0] if len(parts) == 1 else "(" + " AND ".join(parts) + ")"

    def _thread(self, m: str, msgid: str) -> str:
        name = f"_thread{len(self.threads) + 1}"
        self.threads[name] = msgid
        self.by_id = True
        return _NeverNull(IN_THREAD.format(m=m, name=name))

    @staticmethod
    def _threads_of(m: str, ids: str) -> str:
        return (
            f"{m}.message_id IN (SELECT message_id FROM thread_nodes WHERE thread_id IN"
            f" (SELECT thread_id FROM thread_nodes WHERE message_id IN ({ids})))"
        )

    def _term(self, node: Query, m: str, conjunct: bool) -> str | list[str]:
        """The condition of a term: one, or conjuncts that must all hold."""
        if isinstance(node, Word | Phrase | HasAttachment):
            return self._matching(self._match(node), m, conjunct)
        if isinstance(node, ExactSubject):
            self.notes.append('subject:="…": messages.subject_key, exact')
            return f"{m}.subject_key = {_literal(node.key)}"
        if isinstance(node, Address):
            return self._address(node, m)
        if isinstance(node, MessageId):
            self.notes.append("id: messages.message_id (its index)")
            self.by_id = True
            return _NeverNull(f"{m}.message_id = {_literal(node.msgid)}")
        if isinstance(node, Thread):
            self.notes.append("thread:ID: the thread_nodes of the thread holding ID")
            _literal(node.thread_id)  # (refused when it cannot be spelled)
            return self._thread(m, node.thread_id)
        if isinstance(node, ListId):
            self.notes.append("list: messages.list_id")
            if node.prefix:
                return f"starts_with({m}.list_id, {_literal(node.list_id)})"
            return f"{m}.list_id = {_literal(node.list_id)}"
        if isinstance(node, DateRange):
            self.notes.append("date: messages.date_utc (an undated message matches no date)")
            parts = []
            if node.start is not None:
                parts.append(f"{m}.date_utc >= {_instant(node.start)}")
            if node.end is not None:
                parts.append(f"{m}.date_utc < {_instant(node.end)}")
            return parts or f"{m}.date_utc IS NOT NULL"
        if isinstance(node, SizeRange):
            self.notes.append("size: messages.size (the raw message, bytes)")
            low = "" if node.low is None else f"{m}.size >= {node.low}"
            high = "" if node.high is None else f"{m}.size <= {node.high}"
            return [p for p in (low, high) if p] or "true"
        if isinstance(node, Location | Is):
            return self._location(node, m)
        if isinstance(node, Flag):
            return self._flag(node, m)
        raise TypeError(f"not a query node: {node!r}")

    def _join_text(self, node: And, m: str, conjunct: bool) -> And | str:
        """``node`` with its full-text children read through one expression (FTS5
        intersects the doclists itself: a two-word search is one match)."""
        text = [c for c in node.children if isinstance(c, Word | Phrase | HasAttachment)]
        if len(text) < 2:
            return node
        joined = self._matching(" AND ".join(self._match(c) for c in text), m, conjunct)
        rest = [c for c in node.children if c not in text]
        if not rest:
            return joined
        return "(" + " AND ".join([joined, *(self.predicate(c, m, conjunct) for c in rest)]) + ")"

    def _matching(self, expression: str, m: str, conjunct: bool) -> str:
        name = f"_text{len(self.text) + 1}"
        self.text[name] = expression
        self.notes.append(f"{name}: the full-text index (fulltext.sqlite), MATCH {expression}")
        if m != "m":
            self.nested = True
        elif conjunct and self.drive is None:
            self.drive = name
        return _IN_TEXT.format(m=m, name=name)

    @staticmethod
    def _match(node: Word | Phrase | HasAttachment) -> str:
        """The FTS5 expression of one text term."""
        if isinstance(node, HasAttachment):
            return 'flags : "attachment"'
        raw = node.words if isinstance(node, Phrase) else (node.word,)
        # words are runs of letters and digits, as the index's tokenizer cuts the text
        words = [w for text in raw for w in _NOT_WORD.split(text) if w]
        if not words:
            raise UsageError(f"{' '.join(raw)!r} holds no letter or digit to search for")
        if "\x00" in "".join(words):
            raise UsageError("a query value may not hold a NUL character")
        phrase = " + ".join(f'"{w}"' for w in words) + ("*" if node.prefix else "")
        return f"{_COLUMNS[node.field]} : ({phrase})"

    def _address(self, node: Address, m: str) -> str:
        names = self._names(node, m)
        if names is not None and any(c.isspace() for c in node.value):
            return names  # (no address holds a blank: a name only, "Carl Worth")
        if node.field == "from":
            self.notes.append("from: messages.from_addr")
            found = self._address_match(node, f"{m}.from_addr")
        else:
            self.notes.append(_TO_CC)
            test = self._address_match(node, "a")
            if node.part == "address" and not node.prefix:
                found = f"list_contains({m}.to_addrs, {_literal(node.value)})"
            else:
                found = f"len(list_filter({m}.to_addrs, lambda a: {test})) > 0"
        return found if names is None else f"(coalesce({found}, false) OR {names})"

    def _names(self, node: Address, m: str) -> str | None:
        """The condition that the display names of ``node``'s header hold its value
        (a word or a phrase); None for a value naming an address or a part of one
        (with an ``@``), or holding no word."""
        if node.part != "any":
            return None
        words = [w for w in _NOT_WORD.split(fold(node.value)) if w]
        if not words or "\x00" in node.value:
            return None
        column = "from_names" if node.field == "from" else "to_names"
        self.notes.append(f"{node.field}: a word or phrase of {column}, the display names")
        phrase = " + ".join(f'"{w}"' for w in words) + ("*" if node.prefix else "")
        matching = self._matching(f"{column} : ({phrase})", m, conjunct=False)
        self.names.add(f"_text{len(self.text)}")
        return matching

    @staticmethod
    def _address_match(node: Address, a: str) -> str:
        value = _literal(node.value)
        domain = _DOMAIN.format(a=a)
        if node.part == "address":
            return f"starts_with({a}, {value})" if node.prefix else f"{a} = {value}"
        if node.part == "local":
            if node.prefix:
                return f"starts_with({a}, {value})"
            return f"starts_with({a}, {_literal(node.value + '@')})"
        # a domain names itself and its subdomains: @example.org finds a@lists.example.org
        if node.prefix:
            on_domain = f"starts_with({domain}, {value})"
        else:
            # (no regular expression: a suffix ``.domain`` holds no ``@``, so with
            # an ``@`` in the address it is the end of the address's domain)
            on_domain = (
                f"(ends_with({a}, {_literal('@' + node.value)})"
                f" OR (ends_with({a}, {_literal('.' + node.value)}) AND contains({a}, '@')))"
            )
        if node.part == "domain":
            return on_domain
        local = _literal(node.value if node.prefix else node.value + "@")
        return f"(starts_with({a}, {local}) OR {on_domain})"

    def _flag(self, node: Flag, m: str) -> str:
        flag = _literal(FLAG_NAMES[node.name])
        self.notes.append(
            f"is:{node.name}: locations.flags, those of the places the message is still at"
            " (else of every place it was seen), where the source showed any"
        )
        test = (
            f"NOT list_contains(flags, {flag})"
            if node.name == "unread"
            else (f"list_contains(flags, {flag})")
        )
        return f"{m}.message_id IN (SELECT message_id FROM ({MESSAGE_FLAGS}) WHERE {test})"

    def _location(self, node: Location | Is, m: str) -> str:
        if isinstance(node, Is):
            if node.state == "vanished":
                self.notes.append("is:vanished: locations, gone from at least one place")
                where = "SELECT message_id FROM locations WHERE vanished"
            else:
                self.notes.append("is:deleted: locations, gone from every place it was seen")
                where = (
                    "SELECT message_id FROM locations GROUP BY message_id HAVING bool_and(vanished)"
                )
            return f"{m}.message_id IN ({where})"
        column = "folder" if node.field == "folder" else "source"
        self.notes.append(
            f"{node.field}: locations.{column}, every place the message was seen"
            " (vanished from it since or not)"
        )
        name = _literal(node.name)
        if node.prefix:
            test = f"starts_with({column}, {name})"
        elif column == "folder" and node.name.upper() == "INBOX":  # (IMAP: any case)
            test = "upper(folder) = 'INBOX'"
        else:
            test = f"{column} = {name}"
        return f"{m}.message_id IN (SELECT message_id FROM locations WHERE {test})"

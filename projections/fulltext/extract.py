"""The searchable text of one raw message: its subject key, the names and addresses
of its From, To and Cc (and the display names of From, and of To and Cc, apart:
``from:Carl`` reads them), its body text and its attachments' file names.

Pure and deterministic (the same bytes always give the same text): the index is
contentless, so removing a message from it means handing it the exact text that
was indexed, extracted again from the blob.

The walk is lean: each part's header block alone is read (``headers``: as the
standard library's parser reads it, without its feed parser for the usual
block), MIME parts are split on their boundary bytes and only text parts are
decoded (about twice the speed of ``email``'s full parse, with the same text).
text/plain is preferred; a message with only text/html has it reduced to text
(selectolax). Charsets are decoded with replacement characters, never an error.
"""

from __future__ import annotations

import binascii
import contextlib
import email.errors
import email.header
import email.utils
import functools
import quopri
import re
from dataclasses import dataclass
from email.message import Message

from projections.fulltext.attachments import is_attachment, is_signature
from projections.fulltext.headers import boundary as part_boundary
from projections.fulltext.headers import charset as part_charset
from projections.fulltext.headers import kind, parse_head
from projections.normalize import normalize_subject
from projections.search import fold

__all__ = ["MessageText", "extract", "html_to_text"]

_MAX_DEPTH = 10  # nested multiparts followed at most this deep (a loop ends here)


@dataclass(frozen=True)
class MessageText:
    """The text fields of a message, each already folded (``search.fold``) the
    way query words are; the subject as its key (``normalize_subject``: reply
    prefixes dropped), as ``subject:`` has always searched it."""

    subject: str
    body: str
    names: str
    filenames: str
    has_attachment: bool
    from_names: str = ""
    """The display names of From (not the addresses: ``from:`` reads those in
    ``messages``)."""
    to_names: str = ""
    """The display names of To and Cc together (as ``to:`` and ``cc:`` read them)."""

    def row(self) -> tuple[str, str, str, str, str, str, str]:
        """The values of the index's columns, in their order (``fulltext.index``)."""
        return (
            self.subject,
            self.body,
            self.names,
            self.filenames,
            "attachment" if self.has_attachment else "",
            self.from_names,
            self.to_names,
        )


def html_to_text(html: str) -> str:
    """The visible text of an HTML body (scripts, styles and the head left out)."""
    from selectolax.lexbor import LexborHTMLParser

    tree = LexborHTMLParser(html)
    for node in tree.css("script, style, head"):
        node.decompose()
    root = tree.body or tree.root
    return root.text(separator=" ", strip=True) if root is not None else ""


# A header's first this many characters are indexed: the standard library's RFC 2047
# decoding is worse than linear on a hostile header of megabytes (the hostile-mail
# campaign held one extraction for minutes), and no one searches past this.
_HEADER_CHARS = 16_384


def _header_text(value: object) -> str:
    """A header value with its RFC 2047 words decoded (as written when they are broken)."""
    if value is None:
        return ""
    if isinstance(value, email.header.Header):  # (8-bit bytes in the header)
        return "".join(_eight_bit(b, c) for b, c in email.header.decode_header(value))
    text = _raw_utf8(str(value)[:_HEADER_CHARS])
    if "=?" not in text:  # (no encoded word: ``make_header`` gives the text back as it is)
        return text
    try:
        return str(email.header.make_header(email.header.decode_header(text)))
    except (ValueError, LookupError, UnicodeError, email.errors.HeaderParseError):
        return text


def _raw_utf8(text: str) -> str:
    """A header holding 8-bit bytes (the parser keeps them as surrogate escapes)
    read as UTF-8, or as Latin-1 where it is not UTF-8."""
    if text.isascii() or not any("\udc80" <= c <= "\udcff" for c in text):
        return text
    raw = text.encode("utf-8", errors="surrogateescape")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def _as_text(value: object) -> str:
    """A header value as text, its 8-bit bytes read (RFC 2047 words left as written)."""
    if isinstance(value, email.header.Header):
        return "".join(_eight_bit(b, c) for b, c in email.header.decode_header(value))
    return _raw_utf8(str(value))


def _eight_bit(data: bytes | str, charset: str | None) -> str:
    if isinstance(data, str):
        return data
    if charset and charset != "unknown-8bit":
        try:
            return data.decode(charset, errors="replace")
        except LookupError:
            pass
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")


def _split(raw: bytes) -> tuple[bytes, bytes]:
    for sep in (b"\r\n\r\n", b"\n\n"):
        i = raw.find(sep)
        if i >= 0:
            return raw[: i + len(sep)], raw[i + len(sep) :]
    return raw, b""


def _decode(body: bytes, cte: str, charset: str) -> str:
    cte = cte.lower().strip()
    if cte == "base64":
        # (indexed as written when broken: it still has words)
        with contextlib.suppress(binascii.Error):
            body = binascii.a2b_base64(body)
    elif cte == "quoted-printable":
        body = quopri.decodestring(body)
    try:
        return body.decode(charset, errors="replace")
    except LookupError:
        return body.decode("utf-8", errors="replace")


class _Walk:
    def __init__(self) -> None:
        self.plain: list[str] = []
        self.html: list[str] = []
        self.names: list[str] = []
        self.attachment = False

    def part(self, raw: bytes, depth: int = 0) -> Message:
        head, body = _split(raw)
        h = parse_head(head)
        ctype, name, disposition = kind(h)
        if is_signature(ctype):  # (no attachment, no text: ``attachments``)
            return h
        if is_attachment(ctype, name, disposition):
            self.attachment = True
            if name:
                self.names.append(_header_text(name))
            return h
        if depth >= _MAX_DEPTH:
            return h
        if ctype.startswith("multipart/"):
            boundary = part_boundary(h)
            if boundary:
                self._multipart(body, boundary, depth)
            return h
        if ctype == "message/rfc822":
            self.part(body, depth + 1)
            return h
        if ctype in ("text/plain", "text/html"):
            cte = str(h.get("Content-Transfer-Encoding", ""))
            charset = part_charset(h) or "utf-8"
            text = _decode(body, cte, charset)
            if name:  # (its name is searched by filename:, as an attachment's is)
                self.names.append(_header_text(name))
            if name and ctype == "text/html":
                # an inline text/html file is body text of its own, not the HTML
                # alternative of the plain body (``attachments.is_inline_text``)
                self.plain.append(html_to_text(text))
            else:
                (self.plain if ctype == "text/plain" else self.html).append(text)
        return h

    def _multipart(self, body: bytes, boundary: str, depth: int) -> None:
        delimiter = b"--" + boundary.encode("latin-1", errors="replace")
        for chunk in body.split(delimiter)[1:]:
            if chunk.startswith(b"--"):
                break
            if chunk.startswith(b"\r\n"):
                chunk = chunk[2:]
            elif chunk.startswith(b"\n"):
                chunk = chunk[1:]
            if chunk.endswith(b"\r\n"):
                chunk = chunk[:-2]
            elif chunk.endswith(b"\n"):
                chunk = chunk[:-1]
            self.part(chunk, depth + 1)


def _people(h: Message) -> str:
    """The display names and addresses of From, To and Cc."""
    found: dict[str, list[str]] = {"from": [], "to": [], "cc": []}
    for name, value in h.raw_items():  # (one pass: ``get_all`` walks every header a name)
        into = found.get(name.lower())
        if into is not None:
            into.append(_as_text(h.policy.header_fetch_parse(name, value)))
    values = (*found["from"], *found["to"], *found["cc"])
    joined = ", ".join(values)  # (as ``getaddresses`` reads its values: one list)
    if _QUOTED.search(joined) is None:
        items = joined.split(",")
        if all(_plain_item(item) for item in items):
            return " ".join(w for item in items if (w := _person(item.strip())))
    if sum(len(v) for v in values) < _PERSON_CACHED_BELOW:
        return _people_cached(values)
    return _people_of(values)


# Senders and recipients repeat from message to message, one address at a time
# (a To list rarely twice): each address is parsed once. A list is cut at its commas
# only where no comma can be inside an address: no quoted string, comment, group,
# escape or domain literal, and at most one <...> an item (else it is parsed whole,
# as it always was; the test compares the two on generated and real headers).
_QUOTED = re.compile(r'["()\\:;\[\]]')
_PERSON_CACHED_BELOW = 1_000  # (hostile mail has huge items: not kept)


def _plain_item(item: str) -> bool:
    opening = item.find("<")
    if opening < 0:
        return ">" not in item
    closing = item.find(">")
    return opening < closing == item.rfind(">") and item.count("<") == 1


def _person(item: str) -> str:
    if len(item) < _PERSON_CACHED_BELOW:
        return _person_cached(item)
    return _people_of((item,))


def _people_of(values: tuple[str, ...]) -> str:
    words: list[str] = []
    for display, address in email.utils.getaddresses(values):
        words.extend(w for w in (_header_text(display), address) if w)
    return " ".join(words)


@functools.lru_cache(maxsize=16_384)
def _person_cached(item: str) -> str:
    return _people_of((item,))


@functools.lru_cache(maxsize=4_096)
def _people_cached(values: tuple[str, ...]) -> str:
    return _people_of(values)


def _display_names(h: Message, wanted: frozenset[str]) -> str:
    """The display names of the headers ``wanted`` (lower-case names) of ``h``."""
    values = tuple(
        _as_text(h.policy.header_fetch_parse(name, value))
        for name, value in h.raw_items()
        if name.lower() in wanted
    )
    if not values:
        return ""
    joined = ", ".join(values)
    if _QUOTED.search(joined) is None:  # (cut at its commas, as ``_people`` does)
        items = joined.split(",")
        if all(_plain_item(item) for item in items):
            return " ".join(n for item in items if (n := _display_name(item.strip())))
    if sum(len(v) for v in values) < _PERSON_CACHED_BELOW:
        return _display_names_cached(values)
    return _display_names_of(values)


def _display_name(item: str) -> str:
    if "<" not in item:  # (a bare address: no name to read)
        return ""
    if len(item) < _PERSON_CACHED_BELOW:
        return _display_names_cached((item,))
    return _display_names_of((item,))


def _display_names_of(values: tuple[str, ...]) -> str:
    names = (_header_text(display) for display, _ in email.utils.getaddresses(values))
    return " ".join(n for n in names if n)


@functools.lru_cache(maxsize=16_384)
def _display_names_cached(values: tuple[str, ...]) -> str:
    return _display_names_of(values)


_FROM = frozenset({"from"})
_TO_CC = frozenset({"to", "cc"})


def extract(raw: bytes) -> MessageText:
    """The folded text fields of the raw message ``raw`` (never raises on bad mail)."""
    walk = _Walk()
    try:
        top = walk.part(raw)
        subject, people = _header_text(top.get("Subject")), _people(top)
        from_names, to_names = _display_names(top, _FROM), _display_names(top, _TO_CC)
    except Exception:  # a message no rule foresaw: its raw text is still searchable
        text = raw.decode("utf-8", errors="replace")
        return MessageText("", fold(text), "", "", False)
    parts = walk.plain or [html_to_text(h) for h in walk.html]
    body = "\n".join(parts)
    return MessageText(
        subject=fold(normalize_subject(subject) or ""),
        body=fold(body),
        names=fold(people),
        filenames=fold(" ".join(walk.names)),
        has_attachment=walk.attachment,
        from_names=fold(from_names),
        to_names=fold(to_names),
    )

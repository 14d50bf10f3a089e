"""A MIME part's header block read into the ``Message`` the standard library's
parser makes of it (``compat32``, ``headersonly``), and the facts the extractor
asks of it, at a fraction of the cost.

The feed parser walks a block line by line through generators: a third of the
extraction's time went there and to the parameter parsing behind
``get_content_type``, ``get_filename`` and the like. Here the usual block (lines
of ``Name: value`` and their continuations) is read by one regular expression,
each header's value made by compat32's rule (``header_source_parse``); a block
with anything else in it (an mbox ``From`` line, a line beginning with ``:`` or
with white space before any header, a lone CR or another line break) is left to
the standard library's parser. What the extractor asks of a part (its
type, file name, disposition, charset) is a function of its first Content-Type
and Content-Disposition: it is worked out once per pair of values (parts of one
kind repeat them) by the same ``Message`` methods.
"""

from __future__ import annotations

import email.parser
import email.policy
import functools
import re
from email.message import Message

__all__ = ["Kind", "boundary", "charset", "kind", "parse_head"]

_PARSER = email.parser.BytesParser(policy=email.policy.compat32)
# a header: its name (the feed parser's ``headerRE``, less a line starting with
# ":"), its first line and its continuation lines, each ending at LF
_FIELD_TEXT = r"([\041-\071\073-\176]+):([^\n]*\n)((?:[ \t][^\n]*\n)*)"
_FIELD = re.compile(_FIELD_TEXT)
_SECTION = re.compile(f"(?:{_FIELD_TEXT})*")
# where ``str.splitlines`` splits an ASCII text and the feed parser does not
# (it splits at CR, LF and CRLF only)
_OTHER_BREAKS = re.compile(r"[\x0b\x0c\x1c-\x1e]")
_CACHED_BELOW = 1_000  # longer header values are not kept (hostile mail has huge ones)
# A multipart Content-Type names a boundary no other message shares, so the facts
# asked of it were never found in the cache and were worked out again each time
# (by far the most common kind of part to miss). A value that is only a type and
# a plain boundary (a token, or quoted printable ASCII without a quote, backslash
# or ";") has no other parameter: the type alone gives the same facts, and its
# boundary is the value as ``get_boundary`` unquotes it.
_TOKEN = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_PLAIN_MULTIPART = re.compile(
    rf'\s*(multipart/{_TOKEN})\s*;\s*boundary=(?:"([\x20\x21\x23-\x3a\x3c-\x5b\x5d-\x7e]*)"|({_TOKEN}))\s*',
    re.ASCII | re.IGNORECASE,
)

Kind = tuple[str, str | None, str]
"""A part's content type, file name and disposition (lower case, "" when none),
as its ``Message`` gives them."""


def parse_head(head: bytes) -> Message:
    """The headers of ``head`` (a header block and its blank line), as
    ``BytesParser(policy=compat32).parsebytes(head, headersonly=True)`` reads them."""
    text = head.decode("ascii", "surrogateescape")
    if _OTHER_BREAKS.search(text) is None:
        msg = _usual(text)
        if msg is not None:
            return msg
    return _PARSER.parsebytes(head, headersonly=True)


def _usual(text: str) -> Message | None:
    """The headers of a usual block, or None when it has a line the feed parser
    treats in its own way."""
    if text.count("\r") != text.count("\r\n"):  # (a lone CR ends a line there)
        return None
    end = _SECTION.match(text).end()  # type: ignore[union-attr]  # (it matches "")
    if not text.startswith(("\n", "\r\n"), end) and end != len(text):
        return None  # (the block goes on with a line no usual header starts)
    msg = Message()
    for name, first, rest in _FIELD.findall(text, 0, end):
        # (compat32's header_source_parse, on the header's lines)
        msg.set_raw(name, (first.lstrip(" \t") + rest).rstrip("\r\n"))
    return msg


def _first(h: Message, wanted: str) -> str | None:
    for name, value in h.raw_items():
        if name.lower() == wanted:
            return str(value)
    return None


def kind(h: Message) -> Kind:
    """The content type, file name and disposition of the part whose headers are ``h``."""
    ctype, disposition = _first(h, "content-type"), _first(h, "content-disposition")
    plain = _PLAIN_MULTIPART.fullmatch(ctype) if ctype is not None else None
    if plain is not None:
        ctype = plain.group(1)
    if len(ctype or "") + len(disposition or "") < _CACHED_BELOW:
        return _kind_of(ctype, disposition)
    return _kind(ctype, disposition)


def boundary(h: Message) -> str | None:
    """The boundary of the multipart part whose headers are ``h`` (``get_boundary``)."""
    ctype = _first(h, "content-type")
    plain = _PLAIN_MULTIPART.fullmatch(ctype) if ctype is not None else None
    if plain is None:
        return h.get_boundary()
    quoted, token = plain.group(2, 3)
    return (token if quoted is None else quoted).rstrip()


def charset(h: Message) -> str | None:
    """The charset of the part whose headers are ``h`` (``get_content_charset``)."""
    ctype = _first(h, "content-type")
    if len(ctype or "") < _CACHED_BELOW:
        return _charset_of(ctype)
    return _headers(ctype, None).get_content_charset()


def _headers(ctype: str | None, disposition: str | None) -> Message:
    h = Message()
    if ctype is not None:
        h.set_raw("Content-Type", ctype)
    if disposition is not None:
        h.set_raw("Content-Disposition", disposition)
    return h


@functools.lru_cache(maxsize=4096)
def _kind_of(ctype: str | None, disposition: str | None) -> Kind:
    return _kind(ctype, disposition)


def _kind(ctype: str | None, disposition: str | None) -> Kind:
    h = _headers(ctype, disposition)
    # (in this order, as the extractor always asked: one that raises stops the rest)
    return h.get_content_type(), h.get_filename(), (h.get_content_disposition() or "").lower()


@functools.lru_cache(maxsize=1024)
def _charset_of(ctype: str | None) -> str | None:
    return _headers(ctype, None).get_content_charset()

"""A message as a person reads it: decoded headers, the text body, the attachments.

``mailledger show`` prints this; the full-text index to come wants the same text
(text/plain preferred, HTML reduced to text, charsets decoded, attachment names).

HTML is reduced with the standard library's ``html.parser``: a mail body needs
its words and paragraphs, not a Markdown rendering, and ``html2text`` (the usual
library for it) is GPL-3.0, which this MIT project cannot take in.
"""

from __future__ import annotations

import email
import email.policy
import re
from collections.abc import Sequence
from dataclasses import dataclass
from email.message import EmailMessage, Message
from html.parser import HTMLParser
from typing import Any

from pipeline.terminal import terminal_text
from projections.fulltext.attachments import is_attachment, is_inline_text, is_signature

__all__ = [
    "Attachment",
    "MessageText",
    "html_to_text",
    "message_json",
    "message_text",
    "parsed",
    "render_text",
]

# the headers ``show`` prints, in this order (each occurrence: To may repeat)
SHOWN_HEADERS = ("From", "To", "Cc", "Date", "Subject", "Message-ID")


@dataclass(frozen=True)
class Attachment:
    """A part that is not the body: its file name (or None), MIME type, decoded
    size, and its number in the message (``show --part N``: notmuch's numbering, a
    depth-first walk of the MIME tree, the whole message's root part 1)."""

    filename: str | None
    content_type: str
    size: int
    part: int


@dataclass(frozen=True)
class MessageText:
    """What a reader of the message sees: the body text and what came with it."""

    body: str
    """The text/plain part, charset decoded; else the text/html part reduced to
    text; empty when the message has no text part at all."""
    body_type: str  # "text/plain", "text/html" or "" (no text part)
    attachments: tuple[Attachment, ...]


# tags that end a paragraph (a blank line) and tags that start a line of their own
_PARAGRAPH = {
    "address", "article", "aside", "blockquote", "div", "dl", "fieldset", "figcaption",
    "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header", "hr", "main",
    "nav", "ol", "p", "pre", "section", "table", "ul",
}  # fmt: skip
_LINE = {"br", "dd", "dt", "li", "tr"}
_HIDDEN = {"script", "style", "head", "title", "template"}


class _TextOf(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.hidden = 0
        self.pre = 0

    def handle_starttag(self, tag: str, attrs: Sequence[tuple[str, str | None]]) -> None:
        if tag in _HIDDEN:
            self.hidden += 1
        elif tag == "pre":
            self.pre += 1
        if tag in _PARAGRAPH:
            self.parts.append("\n\n")
        elif tag in _LINE:
            self.parts.append("\n")
        if tag == "li":
            self.parts.append("- ")
        elif tag in ("td", "th"):
            self.parts.append(" ")

    def handle_endtag(self, tag: str) -> None:
        if tag in _HIDDEN:
            self.hidden = max(0, self.hidden - 1)
        elif tag == "pre":
            self.pre = max(0, self.pre - 1)
        if tag in _PARAGRAPH:
            self.parts.append("\n\n")

    def handle_data(self, data: str) -> None:
        if self.hidden:
            return
        self.parts.append(data if self.pre else re.sub(r"\s+", " ", data))


def html_to_text(html: str) -> str:
    """The readable text of an HTML body: scripts and styles dropped, paragraphs
    (headings, tables, lists...) apart by a blank line, a line per list item,
    table row or ``<br>``, entities decoded, blanks collapsed."""
    parser = _TextOf()
    parser.feed(html)
    parser.close()
    lines = [line.strip() for line in "".join(parser.parts).split("\n")]
    text = "\n".join(lines)
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def _decoded(part: Message) -> str:
    """The text of a text part, decoded by its charset (an unknown or lying charset:
    UTF-8, else latin-1, never an error)."""
    payload = part.get_payload(decode=True)
    if not isinstance(payload, bytes):
        return str(payload or "")
    charset = part.get_content_charset() or "us-ascii"
    try:
        return payload.decode(charset)
    except (LookupError, UnicodeDecodeError):
        try:
            return payload.decode("utf-8")
        except UnicodeDecodeError:
            return payload.decode("latin-1")


def parsed(raw: bytes) -> EmailMessage:
    """The message ``raw`` parsed (``policy.default``): what a page that reads it
    more than one way parses once."""
    msg = email.message_from_bytes(raw, policy=email.policy.default)
    assert isinstance(msg, EmailMessage)
    return msg


def message_text(raw: bytes | EmailMessage) -> MessageText:
    """The body text and the attachments of the message ``raw`` (bytes, or parsed).

    Never raises on bytes: a message whose MIME structure is broken gives what
    the standard library's parser makes of it."""
    msg = parsed(raw) if isinstance(raw, bytes) else raw
    body_part: Message | None = None
    try:
        body_part = msg.get_body(preferencelist=("plain", "html"))
    except Exception:  # a broken multipart: the walk below still lists its parts
        body_part = None
    attachments: list[Attachment] = []
    inline: list[str] = []  # inline text files: body text of their own
    for number, part in enumerate(msg.walk(), 1):
        if part is body_part or part.is_multipart():
            continue
        ctype = part.get_content_type()
        name = part.get_filename()
        disposition = part.get_content_disposition() or ""
        if is_signature(ctype):
            continue  # (it signs the message: nobody opens it)
        if name and is_inline_text(ctype, disposition):
            inline.append(_text_of(part))
            continue
        if not is_attachment(ctype, name, disposition) and ctype.startswith("text/"):
            continue  # an alternative of the body (the HTML beside the plain text)
        payload = part.get_payload(decode=True)
        size = len(payload) if isinstance(payload, bytes) else 0
        attachments.append(Attachment(str(name) if name else None, ctype, size, number))
    if body_part is None and not inline:
        return MessageText("", "", tuple(attachments))
    texts = [_text_of(body_part)] if body_part is not None else []
    body_type = body_part.get_content_type() if body_part is not None else "text/plain"
    text = "\n\n".join([*texts, *inline])
    return MessageText(text.replace("\r\n", "\n"), body_type, tuple(attachments))


def message_json(rec: dict[str, Any], raw: bytes) -> dict[str, Any]:
    """A message as ``show --json`` (and the web API) gives it: its primary record
    ``rec`` (changed in place) with its headers as name/value objects, the body
    text, its type and the attachments with their part numbers."""
    text = message_text(raw)
    rec["headers"] = [{"name": n, "value": v} for n, v in rec["headers"]]
    rec["body"] = text.body
    rec["body_type"] = text.body_type or None
    rec["attachments"] = [
        {"filename": a.filename, "content_type": a.content_type, "size": a.size, "part": a.part}
        for a in text.attachments
    ]
    return rec


def _text_of(part: Message) -> str:
    """A text part's text, HTML reduced to text."""
    text = _decoded(part)
    return html_to_text(text) if part.get_content_type() == "text/html" else text


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    return f"{n / 1024:.1f} KiB" if n < 1 << 20 else f"{n / (1 << 20):.1f} MiB"


def render_text(headers: Sequence[tuple[str, str]], raw: bytes) -> str:
    """The message as ``show`` prints it: the decoded From, To, Cc, Date, Subject and
    Message-ID headers (``headers``: name, decoded value, as the log records
    them), the attachments, a blank line, and the text body. Safe for a terminal
    (``pipeline.terminal``): a control or format character from the message is
    shown, never obeyed; only the body keeps its newlines (a header or a file name
    holding one cannot make a line of its own)."""
    wanted = {h.lower(): h for h in SHOWN_HEADERS}
    lines = [
        f"{wanted[name.lower()]}: {terminal_text(value, tabs=True)}"
        for want in SHOWN_HEADERS
        for name, value in headers
        if name.lower() == want.lower()
    ]
    text = message_text(raw)
    for a in text.attachments:
        name = terminal_text(a.filename or "(no name)", tabs=True)
        lines.append(
            f"Attachment: {name} ({terminal_text(a.content_type)}, {_size(a.size)}, part {a.part})"
        )
    if text.body_type == "text/html":
        lines.append("(the message has HTML only: shown reduced to text)")
    elif not text.body_type:
        lines.append("(the message has no text part)")
    lines.append("")
    lines.append(terminal_text(text.body, newlines=True, tabs=True))
    return "\n".join(lines).rstrip("\n") + "\n"

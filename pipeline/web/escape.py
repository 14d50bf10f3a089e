"""Text from mail shown in a page, and names from mail sent in a header: one
function per medium (``pipeline.terminal`` is the terminal's).

A Subject, a display name, a file name or a Message-ID is hostile input:
``<script>``, ``"><img onerror=...>``, a right-to-left override (U+202E) that
makes ``exe.txt`` read ``txt.exe``, an ESC, a NUL. :func:`page_text` is the one
way such text reaches a page (the templates' ``mail`` filter): every control,
format character and separator shown visibly as ``terminal_text`` shows it
(never dropped, so ``a<ESC>b`` does not read as ``ab``), then HTML-escaped
(``<>&"'``). :func:`content_disposition` is the one way a name reaches a header.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, unquote

from markupsafe import Markup, escape

from pipeline.filenames import safe_filename
from pipeline.terminal import terminal_text

__all__ = ["content_disposition", "id_path", "page_text", "routing_path", "segment"]


def page_text(text: object, *, newlines: bool = False) -> Markup:
    """``text`` (mail's, or anything shown in a page) safe inside an element or a
    quoted attribute: controls, bidi overrides and separators made visible
    (``terminal_text``; ``newlines``: a body keeps its line breaks and tabs), then
    ``<>&"'`` escaped. None shows as nothing."""
    if text is None:
        return Markup("")
    shown = terminal_text(str(text), newlines=newlines, tabs=newlines)
    return escape(shown)


def id_path(message_id: str) -> str:
    """A Message-ID as one URL path segment: every character but the unreserved
    ones percent-encoded (``/``, ``?``, ``#``, ``..`` cannot leave the segment)."""
    return quote(message_id, safe="@")


def routing_path(raw_path: bytes) -> str:
    """The path a request is routed on, from the bytes it sent: each segment
    percent-decoded once, except that a ``/`` or ``%`` decoded stays ``%2F`` /
    ``%25``: a Message-ID holding ``/`` (``a/raw``) stays one segment, never
    another route (``/m/a/raw``). :func:`segment` decodes a segment's value."""
    segments = raw_path.decode("latin-1").partition("?")[0].split("/")
    return "/".join(
        unquote(s, errors="surrogateescape").replace("%", "%25").replace("/", "%2F")
        for s in segments
    )


def segment(request: Any, name: str) -> str:
    """The path parameter ``name`` of ``request`` as the client meant it (a
    Message-ID, an account, a folder): the value :func:`routing_path` kept."""
    return unquote(request.path_params[name])


def content_disposition(name: str | None, *, fallback: str) -> str:
    """The ``Content-Disposition`` of a download named ``name`` (from mail, or
    None): the name made safe by the mail-filename rule (``safe_filename``: no
    path, no control, no bidi override), sent as RFC 6266 ``filename*`` UTF-8
    percent-encoding, with an ASCII ``filename`` beside it for old clients: no
    quote, semicolon or line break of the name can reach the header."""
    safe = safe_filename(name, fallback=fallback)
    ascii_name = "".join(c if (c.isascii() and c.isalnum()) or c in "._- ()" else "_" for c in safe)
    return f"attachment; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(safe, safe='')}"

"""How the command line prints: JSON, plain values (never a Python repr), whole
lines straight from an Arrow column, aligned tables that fit a terminal, and a
quiet end when the reader of stdout has gone.

This module is the only one that writes to stdout or stderr (a test holds every
other module of ``pipeline`` to it): text for people through :func:`echo` (or
:func:`write_column`, :func:`format_table`), which pass it through
``pipeline.terminal.terminal_text``, so mail never drives the reader's terminal;
machine formats through :func:`print_json`, :func:`write_exact` and
:func:`write_bytes`, which keep their bytes."""

from __future__ import annotations

import functools
import json
import os
import struct
import sys
from collections.abc import Mapping, Sequence
from datetime import date, datetime
from typing import Any, TextIO

from pipeline.terminal import json_escape, re2_class, suspect_bytes, terminal_text

__all__ = [
    "cell",
    "echo",
    "fit",
    "format_table",
    "json_default",
    "note",
    "plain",
    "print_json",
    "silence",
    "stdout_closed",
    "text_width",
    "utf8_of",
    "write_bytes",
    "write_column",
    "write_exact",
]


def json_default(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def print_json(value: Any) -> None:
    """``value`` as one line of JSON on stdout: every string exact (a parser reads
    back what the store holds), controls, format characters and separators as
    ``\\uXXXX`` escapes, other non-ASCII text as it is."""
    text = json.dumps(value, default=json_default, ensure_ascii=False, indent=None)
    print(json_escape(text))


def echo(
    text: str = "",
    *,
    file: TextIO | None = None,
    newlines: bool = False,
    tabs: bool = False,
    flush: bool = False,
) -> None:
    """Print ``text`` and a newline for people to read (on ``file``, default stdout),
    passed through ``terminal_text``: a control or format character from mail is
    shown, never obeyed. ``newlines`` / ``tabs``: the text's format has them (a
    message body, a table, a multi-line reason)."""
    print(terminal_text(text, newlines=newlines, tabs=tabs), file=file, flush=flush)


def note(text: str) -> None:
    """Print ``text`` on stderr for people, unless the run is quiet (``-q``: errors
    only, see ``pipeline.verbosity``): a remark about the answer, never the answer
    or an error ("no messages match", "note: ...")."""
    import logging

    from pipeline.verbosity import level

    if level() <= logging.WARNING:
        echo(text, file=sys.stderr, newlines=True)


def write_exact(text: str) -> None:
    """Write ``text`` to stdout as it is, for a machine format whose values must stay
    exact (``search --format=ids|text0``, a completion script, a manual page):
    never text shown to people."""
    sys.stdout.write(text)


def write_bytes(data: bytes) -> None:
    """Write ``data`` to stdout byte for byte (``show --raw``)."""
    sys.stdout.flush()  # (what was printed before goes first)
    sys.stdout.buffer.write(data)


def plain(value: Any, none: str = "-") -> str:
    """A value as plain output shows it: never a Python repr (``None``, ``['a@x']``,
    ``{'k': 1}``); lists comma-separated, mappings as ``key=value``."""
    if value is None:
        return none
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={plain(v, none)}" for k, v in value.items())
    if isinstance(value, list | tuple | set | frozenset):
        return ", ".join(plain(v, none) for v in value)
    return str(value)


def stdout_closed() -> bool:
    """True when nobody reads stdout any more (``mailledger query ... | head -1``
    after ``head`` exited): the write end of a pipe without readers polls as an
    error. A broken pipe elsewhere (a server's socket) is not this."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(ev & select.POLLERR for _, ev in poller.poll(0))
    except (AttributeError, OSError, ValueError):
        return False


def silence(stream: Any) -> None:
    """Send what ``stream`` still has to print nowhere (its reader has gone), so
    neither a later print nor Python's flush at exit complains of a broken pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, stream.fileno())
        finally:
            os.close(devnull)
    except (AttributeError, OSError, ValueError):
        pass


def write_column(column: Any) -> None:
    """Print a string column (``pyarrow.ChunkedArray``) whose values are whole,
    tab-separated lines for people: the UTF-8 bytes of each chunk straight from its
    Arrow buffer, with no Python string per line (250,000 lines were 0.5 s of str
    objects and joins). A line holding a character ``terminal_text`` changes is
    written as it gives it (see ``_safe_pieces``)."""
    out = getattr(sys.stdout, "buffer", None)
    if out is None:  # (a text stream only: a caller's StringIO)
        for chunk in column.chunks:
            for piece in _safe_pieces(chunk):
                sys.stdout.write(bytes(piece).decode())
        return
    sys.stdout.flush()  # (what was printed before goes first)
    for chunk in column.chunks:
        for piece in _safe_pieces(chunk):
            out.write(piece)
    out.flush()


@functools.cache
def _harmless_bytes() -> bytes:
    """The bytes that begin no character ``terminal_text`` changes in a listing."""
    suspects = suspect_bytes(newlines=True, tabs=True)
    return bytes(b for b in range(256) if b not in suspects)


def _safe_pieces(chunk: Any) -> list[bytes | memoryview]:
    """The UTF-8 of the lines of ``chunk`` (a string array), safe for a terminal.

    Most text holds no byte that can begin a control or format character: one
    translation of the buffer at memory speed tells, and the buffer is written as
    it is. Otherwise Arrow's regular expressions (the same characters as
    ``terminal_text``'s) find the lines to pass through it; the others are still
    written from the buffer."""
    data = utf8_of(chunk)
    if not bytes(data).translate(None, _harmless_bytes()):  # (what is left: suspects)
        return [data]
    import pyarrow.compute as pc

    flagged = pc.match_substring_regex(chunk, re2_class(newlines=True, tabs=True))
    pieces: list[bytes | memoryview] = []
    start = 0
    for i in pc.indices_nonzero(flagged).to_pylist():
        pieces.append(utf8_of(chunk.slice(start, i - start)))
        pieces.append(terminal_text(chunk[i].as_py(), newlines=True, tabs=True).encode())
        start = i + 1
    pieces.append(utf8_of(chunk.slice(start)))
    return pieces


def utf8_of(chunk: Any) -> bytes | memoryview:
    """The values of a string array, concatenated: a slice of its data buffer
    (its NULLs, which hold no bytes, left out)."""
    import pyarrow as pa

    if len(chunk) == 0:
        return b""
    if chunk.type not in (pa.string(), pa.large_string()) or chunk.null_count:
        return "".join(v for v in chunk.to_pylist() if v is not None).encode()
    _, offsets, data = chunk.buffers()
    fmt = "=i" if chunk.type == pa.string() else "=q"
    width = struct.calcsize(fmt)
    (start,) = struct.unpack_from(fmt, offsets, chunk.offset * width)
    (end,) = struct.unpack_from(fmt, offsets, (chunk.offset + len(chunk)) * width)
    return memoryview(data)[start:end]


_CONTROL = str.maketrans({"\n": "\\n", "\r": "\\r", "\t": "\\t"})


def cell(value: Any) -> str:
    """A query result value in a table cell: NULL for null, lists and structs the way
    DuckDB writes them (``[a, b]``, ``{k: v}``), line breaks and tabs escaped so
    that one row stays one line, every other control or format character shown
    as ``terminal_text`` shows it."""
    return terminal_text(_cell(value))


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {_cell(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_cell(v) for v in value) + "]"
    if isinstance(value, datetime | date):
        return str(value)
    if isinstance(value, bytes):
        return value.hex()
    return str(value).translate(_CONTROL)


def text_width(text: str) -> int:
    """Terminal columns ``text`` takes (East Asian wide characters take two)."""
    import unicodedata

    if text.isascii():
        return len(text)
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def fit(text: str, width: int) -> str:
    """``text`` padded to ``width`` columns, or cut to it with ``…`` marking the cut."""
    have = text_width(text)
    if have <= width:
        return text + " " * (width - have)
    out, used = [], 0
    for c in text:
        w = text_width(c)
        if used + w > width - 1:
            break
        out.append(c)
        used += w
    return "".join(out) + "…" + " " * (width - 1 - used)


def format_table(
    columns: Sequence[str], rows: Sequence[Sequence[Any]], width: int | None = None
) -> str:
    """An aligned table. ``width`` (a terminal's columns): the widest columns are
    narrowed until a row fits, and every cell cut to fit ends in ``…``. None (not a
    terminal): every value whole."""
    columns = [terminal_text(c) for c in columns]  # (a query names them: `AS "..."`)
    cells = [[cell(v) for v in row] for row in rows]
    widths = [
        max([text_width(c)] + [text_width(r[i]) for r in cells]) for i, c in enumerate(columns)
    ]
    if width is not None and widths:
        room = width - 2 * (len(widths) - 1)
        if sum(widths) > room:
            # the largest cap that fits: narrow columns keep their width, wide ones share
            # what is left (never below 4 columns: a table too wide for that overflows)
            cap = max(widths)
            while cap > 4 and sum(min(w, cap) for w in widths) > room:
                cap -= 1
            widths = [min(w, cap) for w in widths]

    def line(vals: Sequence[str]) -> str:
        return "  ".join(fit(v, w) for v, w in zip(vals, widths, strict=True)).rstrip()

    return "\n".join([line(list(columns)), line(["-" * w for w in widths]), *map(line, cells)])

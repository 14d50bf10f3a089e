"""Text meant for a terminal: mail never drives it.

A Subject, a display name, a folder or a file name is hostile input: ``ESC ] 52``
in it would write the reader's clipboard, ``ESC [ 2 J`` clear the screen, an
``OSC 8`` hide a link, a right-to-left override (U+202E) make ``exe.txt`` read
``txt.exe``. Every line the command line, its log and its progress display show
people goes through :func:`terminal_text`, which shows each such character
*visibly* (never dropped, so ``a<ESC>b`` does not read as ``ab``):

- a C0 control (U+0000-U+001F) as its Unicode control picture, U+2400-U+241F
  (ESC is ``␛``, BEL ``␇``, CR ``␍``), and DEL (U+007F) as ``␡`` (U+2421);
  tab and newline pass only when the caller's format has them;
- a C1 control (U+0080-U+009F), a format character (Unicode category Cf: the
  bidirectional embeddings, overrides and isolates U+202A-U+202E and
  U+2066-U+2069, the marks U+200E/U+200F, zero-width spaces and joiners, the
  soft hyphen, the BOM, tag characters...), the line and paragraph separators
  (U+2028, U+2029) and a lone surrogate (undecodable bytes) as ``<U+XXXX>``.

Machine formats are not text for a terminal and keep their bytes: JSON (whose
escapes it leaves exact: :func:`json_escape`), ``show --raw``, ``export``,
``search --format=ids|text0``.
"""

from __future__ import annotations

import functools
import re

__all__ = ["UNSAFE_RANGES", "json_escape", "re2_class", "suspect_bytes", "terminal_text"]

# The characters a terminal must not receive as they are (first, last code point):
# Unicode's categories Cc, Cf, Cs, Zl and Zp (Unicode 15; tests/unit/test_terminal.py
# checks them against the running Python's unicodedata).
UNSAFE_RANGES: tuple[tuple[int, int], ...] = (
    (0x0000, 0x001F), (0x007F, 0x009F), (0x00AD, 0x00AD), (0x0600, 0x0605),
    (0x061C, 0x061C), (0x06DD, 0x06DD), (0x070F, 0x070F), (0x0890, 0x0891),
    (0x08E2, 0x08E2), (0x180E, 0x180E), (0x200B, 0x200F), (0x2028, 0x202E),
    (0x2060, 0x2064), (0x2066, 0x206F), (0xD800, 0xDFFF), (0xFEFF, 0xFEFF),
    (0xFFF9, 0xFFFB), (0x110BD, 0x110BD), (0x110CD, 0x110CD), (0x13430, 0x1343F),
    (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A), (0xE0001, 0xE0001), (0xE0020, 0xE007F),
)  # fmt: skip


def _allowed(newlines: bool, tabs: bool) -> str:
    return ("\n" if newlines else "") + ("\t" if tabs else "")


def _ranges(allowed: str) -> list[tuple[int, int]]:
    """``UNSAFE_RANGES`` with the code points of ``allowed`` cut out."""
    out: list[tuple[int, int]] = []
    for lo, hi in UNSAFE_RANGES:
        start = lo
        for cp in sorted(ord(c) for c in allowed if lo <= ord(c) <= hi):
            if start < cp:
                out.append((start, cp - 1))
            start = cp + 1
        if start <= hi:
            out.append((start, hi))
    return out


@functools.cache
def _pattern(allowed: str) -> re.Pattern[str]:
    cls = "".join(
        re.escape(chr(lo)) if lo == hi else f"{re.escape(chr(lo))}-{re.escape(chr(hi))}"
        for lo, hi in _ranges(allowed)
    )
    return re.compile(f"[{cls}]")


def _visible(match: re.Match[str]) -> str:
    cp = ord(match.group())
    if cp < 0x20:
        return chr(0x2400 + cp)
    return "\u2421" if cp == 0x7F else f"<U+{cp:04X}>"


def terminal_text(text: str, *, newlines: bool = False, tabs: bool = False) -> str:
    """``text`` safe to write to a terminal: every control, format character and
    separator shown visibly (the module's docstring lists the forms), newlines and
    tabs kept only when asked (the format has them: a message body, a
    tab-separated listing). Text without any comes back as it is; the result has
    none, so applying it twice changes nothing."""
    pattern = _pattern(_allowed(newlines, tabs))
    if pattern.search(text) is None:
        return text
    return pattern.sub(_visible, text)


def re2_class(*, newlines: bool = False, tabs: bool = False) -> str:
    """The characters ``terminal_text`` changes, as an RE2 character class (for
    Arrow's and DuckDB's regular expressions), surrogates left out: valid UTF-8
    holds none."""
    parts = []
    for lo, hi in _ranges(_allowed(newlines, tabs)):
        if lo >= 0xD800 and hi <= 0xDFFF:
            continue
        parts.append(f"\\x{{{lo:X}}}" if lo == hi else f"\\x{{{lo:X}}}-\\x{{{hi:X}}}")
    return f"[{''.join(parts)}]"


@functools.cache
def suspect_bytes(*, newlines: bool = False, tabs: bool = False) -> bytes:
    """The bytes that may begin the UTF-8 of a character ``terminal_text`` changes:
    UTF-8 text without any of them needs no change (most text: a scan at memory
    speed)."""
    leads = set()
    for lo, hi in _ranges(_allowed(newlines, tabs)):
        for cp in range(lo, hi + 1):
            if not 0xD800 <= cp <= 0xDFFF:
                leads.add(chr(cp).encode()[0])
    return bytes(sorted(leads))


def _json_unit(match: re.Match[str]) -> str:
    cp = ord(match.group())
    if cp > 0xFFFF:  # a JSON escape is UTF-16: a surrogate pair
        cp -= 0x10000
        return f"\\u{0xD800 + (cp >> 10):04x}\\u{0xDC00 + (cp & 0x3FF):04x}"
    return f"\\u{cp:04x}"


def json_escape(document: str) -> str:
    """A JSON document with every character ``terminal_text`` changes written as a
    ``\\uXXXX`` escape: the same JSON (a parser reads back exactly the same
    strings), and nothing in it a terminal would obey. (Such characters can only be
    inside its strings: JSON's own syntax is ASCII.)"""
    pattern = _pattern("\n\t")  # (``json.dumps`` already escapes those inside strings)
    if pattern.search(document) is None:
        return document
    return pattern.sub(_json_unit, document)

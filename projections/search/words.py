"""How a query word meets the indexed text: case folded, compatibility forms
decomposed and diacritics dropped, so ``motorhead`` finds ``Motörhead`` and
``ﬁle`` finds ``file``.

The full-text projection must fold the text it indexes with ``fold`` too, so
both sides meet in the same form.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["fold", "fold_words"]

# Each pass can expose work for another (NFKD of "ℌ" is an upper-case "H";
# casefold of "ǰ" leaves a combining caron), so passes repeat until the text
# stops changing. Three are enough for every code point; the bound keeps the
# cost linear whatever the input.
_MAX_PASSES = 4


def _fold_once(text: str) -> str:
    decomposed = unicodedata.normalize("NFKD", text.casefold())
    if decomposed.isascii():  # nothing combining to drop: skip the walk over each character
        return decomposed
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def _fold_run(text: str) -> str:
    for _ in range(_MAX_PASSES):
        folded = _fold_once(text)
        if folded == text:
            break
        text = folded
    return text


# Runs of non-ASCII characters, kept by ``split`` at the odd indexes.
_NON_ASCII = re.compile(r"([^\x00-\x7f]+)")


def fold(text: str) -> str:
    """Return ``text`` case folded, NFKD-decomposed, without combining marks.

    Idempotent: ``fold(fold(t)) == fold(t)``. ``"Motörhead"`` -> ``"motorhead"``,
    ``"Straße"`` -> ``"strasse"``.
    """
    if text.isascii():  # most mail text: casefold is lower() there, and NFKD changes nothing
        return text.lower()
    # Mail text holding some non-ASCII is still mostly ASCII (a body of 4,000
    # characters has a few): only its non-ASCII runs take the passes, each on its
    # own. The same text as passing over the whole: casefold, NFKD and dropping
    # combining marks work character by character, and NFKD's reordering of
    # combining marks stops at an ASCII character (it combines with nothing).
    # The regular expression walks its text character by character (100 us a body):
    # only the lines holding non-ASCII are given to it (a line break is ASCII too).
    lines = text.split("\n")
    if len(lines) > 1:
        return "\n".join(line.lower() if line.isascii() else _fold_mixed(line) for line in lines)
    return _fold_mixed(text)


def _fold_mixed(text: str) -> str:
    parts = _NON_ASCII.split(text)
    parts[0::2] = [p.lower() for p in parts[0::2]]
    parts[1::2] = [_fold_run(p) for p in parts[1::2]]
    return "".join(parts)


def fold_words(text: str) -> tuple[str, ...]:
    """Return the folded words of ``text``, split on white space.

    Folding can itself make white space (``"a\u00a8b"`` decomposes to ``a``, a
    space and a diaeresis), so the split comes after it.
    """
    return tuple(fold(text).split())

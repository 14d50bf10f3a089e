"""How a query word meets the indexed text: case folded, compatibility forms
decomposed and diacritics dropped, so ``motorhead`` finds ``Motörhead`` and
``ﬁle`` finds ``file``.

The full-text projection must fold the text it indexes with ``fold`` too, so
both sides meet in the same form.
"""

from __future__ import annotations

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


def fold(text: str) -> str:
    """Return ``text`` case folded, NFKD-decomposed, without combining marks.

    Idempotent: ``fold(fold(t)) == fold(t)``. ``"Motörhead"`` -> ``"motorhead"``,
    ``"Straße"`` -> ``"strasse"``.
    """
    if text.isascii():  # most mail text: casefold is lower() there, and NFKD changes nothing
        return text.lower()
    for _ in range(_MAX_PASSES):
        folded = _fold_once(text)
        if folded == text:
            break
        text = folded
    return text


def fold_words(text: str) -> tuple[str, ...]:
    """Return the folded words of ``text``, split on white space.

    Folding can itself make white space (``"a\u00a8b"`` decomposes to ``a``, a
    space and a diaeresis), so the split comes after it.
    """
    return tuple(fold(text).split())

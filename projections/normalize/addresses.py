"""The addr-specs of address headers (From, To, Cc), lowercased, display names
and comments dropped."""

from __future__ import annotations

import re
from collections.abc import Iterable
from email.utils import getaddresses

from projections.normalize.comments import comment_depth

__all__ = ["addresses", "normalize_address"]

_ADDR_TOKEN = re.compile(r'[^()"\\]+|\\.?|[()"]', re.DOTALL)
_ADDR_FALLBACK_SPLIT = re.compile(r'[\s<>(),;:"\[\]]+')


def _strip_comments(value: str) -> str:
    """Return ``value`` with RFC 5322 comments replaced by a space.

    Quoted strings are kept whole, so ``"Joe (work)" <j@x>`` keeps its
    parenthesis. Done here rather than in ``getaddresses``, which recurses once
    per nested ``(`` and so fails on hostile input.
    """
    if "(" not in value and ")" not in value:
        return value
    out: list[str] = []
    depth = 0
    quoted = False
    for match in _ADDR_TOKEN.finditer(value):
        token = match.group()
        if depth:
            depth = comment_depth(depth, token)
        elif quoted:
            out.append(token)
            if token == '"':
                quoted = False
        elif token == "(":
            depth = 1
            out.append(" ")
        elif token == ")":
            out.append(" ")
        else:
            out.append(token)
            if token == '"':
                quoted = True
    return "".join(out)


# Characters that make an address list need the real parser: quoting,
# comments, groups, domain literals, quoted-pairs.
_HARD_ADDRESS_CHARS = frozenset('"():;[]\\')
_SIMPLE_ADDR_SPEC = re.compile(r"[^\s<>@,;:\\\"()\[\]]+@[^\s<>@,;:\\\"()\[\]]+")


def _simple_addr_specs(value: str) -> list[str] | None:
    """Return the addr-specs of a plain address list, or None if it is not one.

    Plain means comma-separated ``addr`` or ``Name <addr>`` entries with no
    quoting, comments or groups: most real headers. For those this gives what
    ``getaddresses`` gives (a property test checks it) at a fraction of the
    cost; anything else returns None and goes to ``getaddresses``.
    """
    if not _HARD_ADDRESS_CHARS.isdisjoint(value):
        return None
    specs: list[str] = []
    for entry in value.split(","):
        entry = entry.strip()
        if not entry:
            continue
        if entry.endswith(">"):
            open_at = entry.rfind("<")
            if open_at < 0:
                return None
            name, spec = entry[:open_at], entry[open_at + 1 : -1]
            if "<" in name or ">" in name or "@" in name:
                return None
        else:
            spec = entry
        if not _SIMPLE_ADDR_SPEC.fullmatch(spec):
            return None
        specs.append(spec)
    return specs


def _addr_specs(value: str) -> list[str]:
    """Return the raw addr-specs ``getaddresses`` finds in one header value.

    Should the stdlib parser fail (it recurses on nested groups), fall back to
    the words that contain ``@``.
    """
    simple = _simple_addr_specs(value)
    if simple is not None:
        return simple
    cleaned = _strip_comments(value)
    try:
        return [addr for _name, addr in getaddresses([cleaned])]
    except Exception:
        return [word for word in _ADDR_FALLBACK_SPLIT.split(cleaned) if "@" in word]


def addresses(values: Iterable[str]) -> list[str]:
    """Return the lowercased addr-specs of some address header values.

    Each value (a To, Cc or From header) is parsed with
    ``email.utils.getaddresses`` after its comments are removed; display names
    are dropped. Only results containing ``@`` are kept: bare local parts,
    group names (``undisclosed-recipients:;``) and empties are dropped. Order
    is kept and duplicates removed. A single ``str`` is taken as one value.
    """
    if isinstance(values, str):
        values = [values]
    seen: dict[str, None] = {}
    for value in values:
        if not value:
            continue
        for addr in _addr_specs(value):
            spec = addr.strip().lower()
            if "@" in spec:
                seen.setdefault(spec, None)
    return list(seen)


def normalize_address(value: str) -> str | None:
    """Return the first addr-spec of a query value, lowercased, or None.

    ``"Joe <JOE@Example.com>"`` -> ``"joe@example.com"``.
    """
    found = addresses([value])
    return found[0] if found else None

"""The subject key: lowercased, reply and forward prefixes stripped, so that a
reply and its thread's first message meet."""

from __future__ import annotations

import re

__all__ = ["normalize_subject"]

# Applied to a lowercased, whitespace-collapsed subject, so at most one space
# sits between parts and the pattern stays linear. Each repetition must eat a
# prefix word and a colon, which also makes the repetition unambiguous.
_REPLY_PREFIXES = re.compile(
    r"(?:(?:re|fwd?|aw|wg|sv|vs|odp|pd|antw|rif|tr) ?(?:\[\d+\]|\(\d+\))? ?: ?)+"
)


def normalize_subject(value: str | None) -> str | None:
    """Return the subject key: lowercased, reply/forward prefixes stripped.

    Leading ``Re``, ``Fwd``, ``Fw``, ``AW``, ``WG``, ``SV``, ``VS``, ``Odp``,
    ``PD``, ``Antw``, ``Rif`` and ``Tr`` prefixes are removed repeatedly, with
    optional ``[n]`` / ``(n)`` counters and any spacing around the colon
    (``RE :``, ``Re[2]:``, ``Re:Re:``); whitespace is collapsed to single
    spaces and the ends stripped. A subject of prefixes only gives ``""``;
    None gives None.

    Mailing-list tags such as ``[list]`` are deliberately kept, and stripping
    stops at them: ``Re: [list] Re: x`` gives ``[list] re: x``. Guessing which
    brackets are tags would make the key unpredictable for users.
    """
    if value is None:
        return None
    text = " ".join(value.lower().split())
    match = _REPLY_PREFIXES.match(text)
    if match:
        text = text[match.end() :]
    return text.strip()

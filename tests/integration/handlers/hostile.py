"""A handler that fails quoting the mail it was handed, as a careless one would."""

from __future__ import annotations

from collections.abc import Sequence
from email.message import EmailMessage


def process(pairs: Sequence[tuple[str, EmailMessage]]) -> list[str]:
    raise RuntimeError("cannot handle: " + ", ".join(str(msg["subject"]) for _, msg in pairs))

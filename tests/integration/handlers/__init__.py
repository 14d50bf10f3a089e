"""Real handler modules for the dispatch tests (``handlers.jobs``, ``handlers.lists``).

Each records what it was handed in ``CALLS`` (in-process tests) and, when
``MAILLEDGER_TEST_HANDLER_LOG`` names a file, as JSON lines there (subprocess
tests).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from email.message import EmailMessage


def record(handler: str, pairs: Sequence[tuple[str, EmailMessage]]) -> None:
    path = os.environ.get("MAILLEDGER_TEST_HANDLER_LOG")
    if not path:
        return
    with open(path, "a") as fh:
        for mid, msg in pairs:
            fh.write(json.dumps({"handler": handler, "id": mid, "subject": msg["subject"]}) + "\n")
        fh.flush()
        os.fsync(fh.fileno())

"""What a run is given and what it counts: an offered message with its place
(``Incoming``) and the run accounting (``RunCounts``, kept with the reports:
read without loading the ingest machinery)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pipeline.reports import RunCounts

__all__ = ["Incoming", "RunCounts"]


@dataclass(frozen=True)
class Incoming:
    """One raw message and where a source showed it to us.

    ``path``: the file holding the message, read by ``prepare`` (``raw`` is then
    unused and ``size``, the file's size when it was listed, bounds the batch).
    """

    raw: bytes
    folder: str
    uidl: str | None = None
    uidvalidity: int | None = None
    uid: int | None = None
    internal_date: datetime | None = None
    message_id: str | None = None  # overrides the parsed id (legacy UIDL import)
    path: str | None = None
    size: int = 0
    # the flags the source showed there (``projections.normalize.flags``); None: none shown
    flags: tuple[str, ...] | None = None

    @property
    def nbytes(self) -> int:
        return self.size if self.path is not None else len(self.raw)

    @property
    def where(self) -> tuple[Any, ...]:
        return (self.folder, self.uidvalidity, self.uid, self.uidl)

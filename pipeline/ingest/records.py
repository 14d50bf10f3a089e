"""What a run is given and what it counts: an offered message with its place
(``Incoming``) and the run accounting (``RunCounts``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

__all__ = ["Incoming", "RunCounts"]


@dataclass
class RunCounts:
    """Per-source run counts; ``balanced`` checks the accounting equations."""

    uids_seen: int = 0
    processed: int = 0
    vanished: int = 0
    errors: int = 0
    bodies_fetched: int = 0
    known_skipped: int = 0
    # bodies downloaded only to confirm that known UIDs still name the same
    # messages: none is processed, so they stay out of the accounting equations
    bodies_checked: int = 0
    new_messages: int = 0
    duplicates: int = 0
    conflicts_other_source: int = 0
    malformed: int = 0
    bytes_read: int = 0
    events: int = 0
    error_details: list[str] = field(default_factory=list)
    # files an importer found in the source that are not mail at all (a Maildir's
    # control files, say): not messages, so outside the sums; {"path", "reason"} each
    not_mail: int = 0
    not_mail_files: list[dict[str, str]] = field(default_factory=list)

    @property
    def balanced(self) -> bool:
        return (
            self.uids_seen == self.processed + self.vanished + self.errors
            and self.processed == self.bodies_fetched + self.known_skipped
            and self.processed == self.new_messages + self.duplicates + self.conflicts_other_source
        )

    def as_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k != "error_details"}
        d["balanced"] = self.balanced
        d["error_details"] = list(self.error_details)
        d["not_mail_files"] = list(self.not_mail_files)
        return d

    def add(self, other: RunCounts) -> None:
        for k, v in other.__dict__.items():
            if isinstance(v, int):
                setattr(self, k, getattr(self, k) + v)
        self.error_details.extend(other.error_details)
        self.not_mail_files.extend(other.not_mail_files)


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

    @property
    def nbytes(self) -> int:
        return self.size if self.path is not None else len(self.raw)

    @property
    def where(self) -> tuple[Any, ...]:
        return (self.folder, self.uidvalidity, self.uid, self.uidl)

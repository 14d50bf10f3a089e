"""What a sync is asked to do and what it did: options in, reports out.

The reports say what happened (counts, errors, alarms, whether the sums
balance); the command line alone turns that into an exit code. Used by the
IMAP sync, the POP3 sync and the CLI alike, so none of them imports another
for these.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["AccountReport", "FolderReport", "RunCounts", "RunReport", "SyncOptions"]


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
    # messages at a place on record shown with other flags (a ``flags-changed``
    # each): processed like any message seen again, so outside the sums
    flags_changed: int = 0
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
class SyncOptions:
    apply: bool = False
    limit: int | None = None
    reconcile: bool = False
    measure: bool = False
    mode_label: str | None = None  # "watch" when run by --watch
    workers: int = 0  # processes that parse and compress fetched bodies


@dataclass
class FolderReport:
    folder: str
    mode: str = "delta"
    uidvalidity: int | None = None
    cursor_from: int | None = None
    cursor_to: int | None = None
    new: int = 0
    bodies: int = 0  # every full body downloaded, ``bodies_checked`` included
    bodies_checked: int = 0  # of those, downloaded to confirm known UIDs (no new message)
    known: int = 0
    vanished: int = 0
    # locations on record whose flags changed on the server (seen by a reconcile)
    flags_changed: int = 0
    errors: int = 0
    bytes_fetched: int = 0
    failed_uids: list[int] = field(default_factory=list)
    error: str | None = None
    alarm: str | None = None
    would_fetch: int | None = None  # dry run: UIDs a real run would take

    def line(self, account: str) -> str:
        cursor = f"{self.cursor_from if self.cursor_from is not None else '-'}->" + (
            f"{self.cursor_to if self.cursor_to is not None else '-'}"
        )
        text = (
            f"{self.mode} {account} {self.folder}:"
            f" uidvalidity={self.uidvalidity if self.uidvalidity is not None else '-'}"
            f" cursor={cursor} new={self.new} bodies={self.bodies} known={self.known}"
            f" errors={self.errors}"
        )
        if self.bodies_checked:
            text += f" checked={self.bodies_checked}"
        if self.vanished:
            text += f" vanished={self.vanished}"
        if self.flags_changed:
            text += f" flags_changed={self.flags_changed}"
        if self.failed_uids:
            text += " failed_uids=" + ",".join(map(str, self.failed_uids[:20]))
        if self.would_fetch is not None:
            text += f" dry-run would_fetch={self.would_fetch}"
        if self.error:
            text += f" ERROR: {self.error}"
        return text

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class AccountReport:
    name: str
    folders: dict[str, FolderReport] = field(default_factory=dict)
    counts: RunCounts = field(default_factory=RunCounts)
    error: str | None = None
    folder_errors: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "error": self.error,
            "folder_errors": self.folder_errors,
            "counts": self.counts.as_dict(),
            "folders": {k: v.as_dict() for k, v in self.folders.items()},
        }


@dataclass
class RunReport:
    run_id: str
    applied: bool
    accounts: dict[str, AccountReport] = field(default_factory=dict)
    alarms: list[str] = field(default_factory=list)
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)
    """A cluster sync's task of each account: its shard, wall and CPU seconds."""
    snapshots: dict[str, dict[str, Any]] = field(default_factory=dict)
    """A cluster sync's snapshot of each shard it synced into: epoch and seq."""

    @property
    def errors(self) -> int:
        return sum(
            a.counts.errors + a.folder_errors + (1 if a.error else 0)
            for a in self.accounts.values()
        ) + sum(1 for s in self.snapshots.values() if "error" in s)

    @property
    def balanced(self) -> bool:
        return all(a.counts.balanced for a in self.accounts.values())

    @property
    def failed(self) -> bool:
        """An error anywhere, or sums that do not balance (the CLI exits 1)."""
        return bool(self.errors) or not self.balanced

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "applied": self.applied,
            "balanced": self.balanced,
            "alarms": list(self.alarms),
            "accounts": {k: v.as_dict() for k, v in self.accounts.items()},
            **({"tasks": self.tasks} if self.tasks else {}),
            **({"snapshots": self.snapshots} if self.snapshots else {}),
        }

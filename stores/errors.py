"""The one error root of mailledger. Exit codes are mapped in ``pipeline.cli.main``."""

from __future__ import annotations

__all__ = [
    "BlobIntegrityError",
    "ConfigError",
    "CursorMovedError",
    "FencedError",
    "LockTimeout",
    "LogIntegrityError",
    "MailledgerError",
    "NotFoundError",
    "SourceError",
    "StaleEpochError",
    "TerminalSourceError",
    "TransientSourceError",
    "UsageError",
]


class MailledgerError(Exception):
    """Base of every error mailledger raises on purpose."""


class UsageError(MailledgerError):
    """The command line asked for something that does not make sense (exit 2)."""


class ConfigError(MailledgerError):
    """A configuration file or value is missing or wrong (exit 2)."""


class NotFoundError(MailledgerError):
    """The message or thread asked for is not in the store."""


class LogIntegrityError(MailledgerError):
    """The event log is damaged: a file unreadable, tampered with, a seq gap or overlap."""


class BlobIntegrityError(MailledgerError):
    """A blob is missing or its bytes no longer match its sha256."""


class LockTimeout(MailledgerError):
    """Another process held the writer lock or the projection database for too long."""


class FencedError(MailledgerError):
    """The store refused a commit (``stores.fence``): its batch is discarded, nothing
    of it is in the log."""


class StaleEpochError(FencedError):
    """A committer whose writer epoch another committer has since taken."""


class CursorMovedError(FencedError):
    """A batch whose cursor events start from a position the folder's cursor has
    left: another commit moved it meanwhile (a task run twice commits once)."""


class SourceError(MailledgerError):
    """A mail source (server or file) failed."""


class TransientSourceError(SourceError):
    """A source failure worth retrying on the next run (network, timeout)."""


class TerminalSourceError(SourceError):
    """A source failure that retrying will not fix (bad credentials, missing folder)."""

"""The one error a query can raise: where it went wrong and why."""

from __future__ import annotations

from stores.errors import UsageError

__all__ = ["QuerySyntaxError"]


class QuerySyntaxError(UsageError):
    """A query that cannot be parsed: ``position`` is the 0-based index of the
    character where reading stopped, ``reason`` says what was expected there.

    A ``UsageError``, so the command line exits 2 with the message, which names
    the position.
    """

    def __init__(self, position: int, reason: str) -> None:
        super().__init__(f"query error at position {position}: {reason}")
        self.position = position
        self.reason = reason

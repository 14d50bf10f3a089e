"""Time enters mailledger here, once per event, from an injected clock."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Protocol

__all__ = ["Clock", "SystemClock", "new_run_id"]


class Clock(Protocol):
    def now(self) -> datetime:
        """The current time, timezone-aware UTC."""
        ...


class SystemClock:
    """The real clock (freezegun controls it in tests)."""

    def now(self) -> datetime:
        return datetime.now(UTC)


def new_run_id(clock: Clock) -> str:
    """A run id that sorts by time: ``20261130T071500Z-1a2b3c4d``."""
    return f"{clock.now().strftime('%Y%m%dT%H%M%SZ')}-{uuid.uuid4().hex[:8]}"

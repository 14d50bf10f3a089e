"""The DuckDB file that holds the projections.

DuckDB lets one process open a file for writing and nobody else open it at all,
so every caller holds it briefly and retries while another process has it.
"""

from __future__ import annotations

import time
from pathlib import Path

import duckdb

from stores.errors import LockTimeout

__all__ = ["CONFIG", "connect"]

# A sync run from cron should stay small: DuckDB would otherwise size its buffer
# pool from the machine's RAM and start a thread per core for tiny queries.
CONFIG = {"memory_limit": "512MB", "threads": "2"}


def connect(path: Path, *, read_only: bool, timeout: float = 30.0) -> duckdb.DuckDBPyConnection:
    """Open the projection database, waiting up to ``timeout`` s for another process."""
    deadline = time.monotonic() + timeout
    delay = 0.01
    while True:
        try:
            return duckdb.connect(str(path), read_only=read_only, config=dict(CONFIG))
        except duckdb.IOException as exc:
            if "lock" not in str(exc).lower() or time.monotonic() > deadline:
                if "lock" in str(exc).lower():
                    raise LockTimeout(
                        f"{path}: held by another process for {timeout:.0f}s"
                    ) from exc
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.25)

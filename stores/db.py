"""The DuckDB file that holds the projections.

DuckDB lets one process open a file for writing and nobody else open it at all,
so every caller holds it briefly and retries while another process has it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import duckdb

from stores.errors import LockTimeout

__all__ = ["CONFIG", "all_threads", "connect"]

# A sync run from cron should stay small: DuckDB would otherwise size its buffer
# pool from the machine's RAM and start a thread per core for tiny queries.
CONFIG = {"memory_limit": "512MB", "threads": "2"}
# A read-only connection answers point lookups (get, find, walk_thread): handing
# their few small pipelines to a second thread cost more than it gave (find p50
# 2.3 ms with two threads, 1.7 ms with one, on the 100k bench store). Ad-hoc
# queries get CONFIG's threads back (``all_threads``).
READER_THREADS = "1"


def connect(path: Path, *, read_only: bool, timeout: float = 30.0) -> duckdb.DuckDBPyConnection:
    """Open the projection database, waiting up to ``timeout`` s for another process."""
    deadline = time.monotonic() + timeout
    delay = 0.01
    while True:
        try:
            config = dict(CONFIG, threads=READER_THREADS) if read_only else dict(CONFIG)
            return duckdb.connect(str(path), read_only=read_only, config=config)
        except duckdb.IOException as exc:
            if "lock" not in str(exc).lower() or time.monotonic() > deadline:
                if "lock" in str(exc).lower():
                    raise LockTimeout(
                        f"{path}: held by another process for {timeout:.0f}s"
                    ) from exc
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.25)


@contextlib.contextmanager
def all_threads(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """Run with CONFIG's threads (an ad-hoc query may scan everything), then
    restore the connection's own setting."""
    before = con.execute("SELECT current_setting('threads')").fetchall()[0][0]
    con.execute(f"SET threads = {int(CONFIG['threads'])}")
    try:
        yield
    finally:
        con.execute(f"SET threads = {int(before)}")

"""A store read at rest, without opening it: what a sync that finds nothing new
and ``stats`` need, from the cursor snapshot (``projections.snapshot``), the log's
directory and the blob index; neither DuckDB nor pyarrow is loaded.

``settled_seq`` says when that is sound: the store's marker is right, no
leftover of a crash waits for the open to clean it, and every log file is one
the open would not read again (``checked_last_seq``). Anything else: the caller
opens the store, as before.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from projections import snapshot
from stores.blobs import BlobStore
from stores.errors import MailledgerError
from stores.log.checks import checked_last_seq
from stores.log.files import LogDirectory, LogFile
from stores.marker import check_marker

__all__ = ["quick_stats", "settled_seq", "stats_of"]

# what the store's open would clean up or warn of: a store holding one is opened
_LEFTOVERS = ("purge-journal.json", "projections.duckdb.rebuild", "projections.verify.duckdb")


def settled_seq(root: Path) -> int | None:
    """The log's last seq when the store at ``root`` can be read at rest (see the
    module's doc); None when it must be opened."""
    try:
        check_marker(root, create=False)
        names = os.listdir(root)
        tmp = root / "blobs" / ".tmp"
        if tmp.exists() and any(tmp.iterdir()):
            return None
    except (MailledgerError, OSError, ValueError):
        return None  # (the open says what is wrong)
    if any(n.startswith(_LEFTOVERS) for n in names) or "projections.duckdb" not in names:
        return None
    return checked_last_seq(root / "log")


def stats_of(
    counts: dict[str, int], blobs: BlobStore, files: Sequence[LogFile], db_path: Path
) -> dict[str, Any]:
    """What ``mailledger stats`` prints, from the projections' ``counts``, the
    blobs, the log's ``files`` (listed once: 1,000 files are 25 ms a listing)
    and the projection file."""
    blob_count = blobs.count()
    blob_bytes = blobs.stored_bytes()
    log_bytes = sum(f.path.stat().st_size for f in files)
    db_bytes = db_path.stat().st_size if db_path.exists() else 0
    return {
        "events": files[-1].last if files else 0,
        "log_files": len(files),
        **counts,
        "blobs": blob_count,
        "blob_bytes": blob_bytes,
        "log_bytes": log_bytes,
        "projection_bytes": db_bytes,
        "bytes": blob_bytes + log_bytes + db_bytes,
    }


def quick_stats(root: Path) -> dict[str, Any] | None:
    """``stats`` of the store at ``root`` read at rest, its counts from the
    snapshot; None when the store must be opened (then ``upkeep.stats``)."""
    seq = settled_seq(root)
    counts = snapshot.read_counts(root, seq) if seq is not None else None
    if counts is None:
        return None
    files = LogDirectory(root / "log").files()
    if not files or files[-1].last != seq:
        return None  # (a commit meanwhile)
    blobs = BlobStore(root / "blobs")
    try:
        return stats_of(counts, blobs, files, root / "projections.duckdb")
    finally:
        blobs.close()

"""Reading, parsing, compressing and storing messages: the costly part of an
ingest, run by worker processes when there is a pool.

This module and what it imports (the parser, the blob store, the IMAP client for
``pipeline.sources.imap.fetch``) load neither pyarrow nor DuckDB: a worker process
started from it takes about 25 MB and 0.1 s instead of 85 MB and 0.35 s. A test
keeps it so.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from pipeline.parse import ParsedMessage, parse_message
from stores.blobs import BlobStore, encode_blob

__all__ = ["Prepared", "prepare", "watch_parent"]


def watch_parent(pid: int, log_level: int | None = None) -> None:
    """In a worker: exit when the importing process is gone (killed with -9, say);
    nothing else would ever tell a worker of a forkserver that its job has died.
    ``log_level``: the parent's verbosity (``pipeline.verbosity``), so a worker's
    warnings obey -q and its IMAP conversation shows under --debug."""
    import threading
    import time

    if log_level is not None:
        from pipeline.verbosity import LogSetup

        LogSetup(log_level)  # for the life of the worker

    def watch() -> None:
        while True:
            time.sleep(0.5)
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                os._exit(0)
            except PermissionError:
                pass

    threading.Thread(target=watch, daemon=True, name="parent-watch").start()


class Prepared(NamedTuple):
    """What ``prepare`` made of one message."""

    parsed: ParsedMessage | None  # None: the file could not be read (see error)
    written: bool  # this call wrote the blob: its bytes were new
    blob: bytes | None = None  # the encoded blob, left for the committing process to write
    error: str | None = None


_blob_stores: dict[tuple[str, int, int], BlobStore] = {}
_PENDING_BYTES = 16 << 20


def blobs_at(root: str) -> BlobStore:
    """This process's writer for the blob store at ``root`` (kept across chunks for
    its index of the packs it has read; one store at a time). Kept for that very
    directory only: a store removed and made again at the same path (a test's, a
    scratch store) is another store, and the kept writer's idea of which blobs
    are already stored would skip writing bodies the new one lacks."""
    try:
        st = os.stat(root)
        key = (root, st.st_dev, st.st_ino)
    except FileNotFoundError:
        key = (root, -1, -1)
    blobs = _blob_stores.get(key)
    if blobs is None:
        _blob_stores.clear()
        blobs = _blob_stores[key] = BlobStore(Path(root))
    return blobs


def _read_ahead(paths: Sequence[str]) -> None:
    """Ask the kernel to read the files ``paths`` into the page cache now, without
    waiting: it reads them while this process parses the first ones, where each
    read would otherwise wait for the disk in turn (a maildir not in the cache)."""
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # (a FIFO: no wait here)
        except OSError:
            continue  # (the read below says what is wrong)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
        except OSError:
            pass
        finally:
            os.close(fd)


def prepare(
    items: Sequence[bytes | str],
    blobs_root: str,
    held: Mapping[int, frozenset[str]] | None = None,
) -> list[Prepared]:
    """Read (an item that is a path), parse, compress and store each message: the
    costly part of an ingest, run by worker processes when there is a pool.

    A blob already stored is not compressed again. The blob of item ``i`` whose
    sha256 is in ``held[i]`` is not written but returned encoded: its location
    is on record for a message since deleted, and only the committing process
    knows whether it may come back (see ``Ingest._commit``). A file that cannot
    be read is returned with its ``error``; a blob that cannot be written (a full
    disk) raises the OSError naming it.
    """
    # (no listing of the packs: whether a blob is stored is asked of the shared
    # index, whose cost does not grow with the number of packs; a listing per
    # chunk made an import's cost per message grow with the store)
    blobs = blobs_at(blobs_root)
    _read_ahead([item for item in items if isinstance(item, str)])
    out: list[Prepared] = []
    new: list[tuple[int, str, bytes]] = []  # (position in out, sha256, encoded blob)
    # messages parsed but not yet looked up: asked of the index together (one query,
    # not one a message), at most _PENDING_BYTES of raw bytes held at once
    pending: list[tuple[int, str, bytes]] = []
    pending_bytes = 0

    def look_up() -> None:
        nonlocal pending_bytes
        stored = blobs.holding(sha for _, sha, _ in pending)
        for at, sha, raw in pending:
            if sha not in stored:  # a blob already stored is not compressed again
                new.append((at, sha, encode_blob(raw)))
        pending.clear()
        pending_bytes = 0

    for i, item in enumerate(items):
        if isinstance(item, str):
            try:
                with open(item, "rb") as fh:
                    raw = fh.read()
            except OSError as exc:
                out.append(Prepared(None, False, error=f"unreadable: {exc.strerror or exc}"))
                continue
        else:
            raw = item
        p = parse_message(raw)
        if held is not None and p.sha256 in held.get(i, ()):
            out.append(Prepared(p, False, encode_blob(raw)))
            continue
        pending.append((len(out), p.sha256, raw))
        out.append(Prepared(p, False))
        pending_bytes += len(raw)
        if pending_bytes >= _PENDING_BYTES:
            look_up()
    look_up()
    # the chunk's new blobs go into one pack: one file, not one per message
    written = blobs.put_many((sha, blob) for _, sha, blob in new)
    for at, sha, _ in new:
        if sha in written:
            written.discard(sha)  # a second copy in the chunk finds it written
            out[at] = out[at]._replace(written=True)
    return out

"""Text extraction in worker processes, for the many messages of a rebuild: the
extraction costs more than FTS5's indexing, so workers extract while the one
SQLite writer indexes (both cores work)."""

from __future__ import annotations

import functools
import itertools
import logging
import multiprocessing
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path

from projections.fulltext.extract import extract
from stores.blobs import BlobStore, Location
from stores.errors import MailledgerError

__all__ = ["INLINE_BELOW", "Extracted", "Item", "Row", "extracted", "text_row"]

log = logging.getLogger("mailledger.store")

Item = tuple[int, str, str, int | None]
"""``(seq, message_id, sha256, date)`` of a stored message (its date in whole
seconds since the epoch, None when undated)."""
Row = tuple[str, str, str, str, str, str, str]
"""The index's column values for a message (``MessageText.row``)."""
Extracted = list[tuple[Item, Row | None]]
"""Each message of a chunk with the index's column values for it (None: its
blob could not be read)."""

_CHUNK = 256  # messages a worker extracts per call
INLINE_BELOW = 1_000  # fewer messages than this: extracted here (starting workers costs more)


@functools.lru_cache(maxsize=2)
def _blobs(root: str) -> BlobStore:
    """The blob store a worker process reads (opened once per worker: a pool lives
    for one build). Never used in the writer's own process, whose store a purge
    may rewrite between two builds (a cached one would read packs gone since)."""
    return BlobStore(Path(root))


def text_row(blobs: BlobStore, sha: str, at: Location | None = None) -> Row | None:
    """The index's column values for blob ``sha`` (``at`` where ``locate`` found
    it); None when it cannot be read (a damaged store: the message is indexed
    without text, and ``verify`` names the blob)."""
    try:
        raw = blobs.get(sha, at=at)
    except (MailledgerError, OSError) as exc:
        log.warning("full-text index: blob %s not read: %s", sha, exc)
        return None
    # (lone surrogates, which hostile bytes can leave, are no text SQLite can store:
    # each becomes U+FFFD, the same way for the text a removal gives again; ASCII
    # text has none)
    return tuple(
        v if v.isascii() else v.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
        for v in extract(raw).row()
    )  # type: ignore[return-value]


def _extract_with(blobs: BlobStore, items: Sequence[Item]) -> Extracted:
    where = blobs.locate([item[2] for item in items])  # (one query a chunk, not a blob)
    return [(item, text_row(blobs, item[2], where.get(item[2]))) for item in items]


def _extract_chunk(root: str, items: Sequence[Item]) -> Extracted:
    return _extract_with(_blobs(root), items)


def extracted(blobs: BlobStore, items: Iterable[Item], workers: int) -> Iterator[Extracted]:
    """The extracted text of each message of ``items``, in their order, chunk by
    chunk: by ``workers`` processes when there are many (forkserver: this
    process may hold DuckDB threads a forked child must not inherit), else here,
    from ``blobs`` (the caller's own store, as it stands now)."""
    where = str(blobs.root)
    chunks = _chunks(iter(items))
    first = list(itertools.islice(chunks, -(-INLINE_BELOW // _CHUNK)))
    if sum(len(c) for c in first) < INLINE_BELOW or workers <= 1:
        for chunk in itertools.chain(first, chunks):
            yield _extract_with(blobs, chunk)
        return
    ctx = multiprocessing.get_context("forkserver")
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        window: deque[Future[Extracted]] = deque()
        for chunk in itertools.chain(first, chunks):
            window.append(pool.submit(_extract_chunk, where, chunk))
            if len(window) >= 3 * workers:  # bounded: results are written in order
                yield window.popleft().result()
        while window:
            yield window.popleft().result()


def _chunks(items: Iterator[Item]) -> Iterator[list[Item]]:
    while chunk := list(itertools.islice(items, _CHUNK)):
        yield chunk

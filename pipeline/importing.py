"""The one import driver: a :class:`~pipeline.sources.MessageSource` read from
start to end, its messages offered to an ``Ingest`` and committed in batches.

Memory stays flat however large the source: messages are read one at a time,
and the driver holds at most ``lookahead`` batches. Re-running an import adds
nothing for messages already on record at the same location.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
from collections.abc import Iterator

from pipeline.ingest import Ingest, RunCounts, worker_pool
from pipeline.progress import NO_PROGRESS, Progress
from pipeline.sources import MessageSource
from pipeline.store import MessageStore

__all__ = ["run_import"]


_GC_THRESHOLDS = (50_000, 20, 100)


@contextlib.contextmanager
def _bulk(store: MessageStore) -> Iterator[None]:
    """An import folds its batches into the projections in large steps: a fold
    costs mostly per call (and each ends with a checkpoint of the database), so
    fewer, larger folds are faster. Memory stays bounded: pending events are kept
    without their headers and a fold also runs once they hold 128 MB
    (``pipeline.store``), and DuckDB spills a large fold to disk."""
    saved = store.projector.fold_every, store.projector.fold_share
    # 50,000 events, or a quarter of what the store held at the last fold: a fold
    # costs in part a scan of what it touches, so folds spaced in proportion to
    # the store keep an import's cost per message the same into a large store
    store.projector.fold_every, store.projector.fold_share = 50_000, 0.25
    # Python's cyclic collector, spaced out: the run's own record (``Ingest``: a
    # set entry per message, and the source's listing) is walked whole by every
    # full collection, and with the default thresholds one came every ten
    # collections of the younger generation, whatever the size of that record:
    # 227 full collections, 27 s of the import's own process, at 1,000,000
    # messages (1.2 s at 100,000). The run makes few reference cycles to collect.
    thresholds = gc.get_threshold()
    gc.set_threshold(_GC_THRESHOLDS[0], *_GC_THRESHOLDS[1:])
    try:
        with store.session():
            yield
    finally:
        gc.set_threshold(*thresholds)
        store.projector.fold_every, store.projector.fold_share = saved


def run_import(
    store: MessageStore,
    source: MessageSource,
    *,
    batch_size: int = 1000,
    progress: Progress = NO_PROGRESS,
    workers: int = 0,
) -> RunCounts:
    """Every message of ``source`` offered to an ``Ingest`` of ``source.label`` and
    committed in batches, with the import's folding policy (``_bulk``); returns
    the run counts.

    ``workers`` processes read, parse, compress and store the messages (0: all
    in this one); none start when the source has no message, so a source that
    cannot be read fails before any pool.
    """
    it = source.messages(progress)
    first = next(it, None)
    with worker_pool(workers if first is not None else 0) as pool, _bulk(store):
        ingest = Ingest(
            store, source.label, batch_size=batch_size, pool=pool, lookahead=source.lookahead
        )
        if first is not None:
            for item, units in itertools.chain([first], it):
                ingest.offer(item)
                progress.advance(units)
        ingest.flush()
    source.finish(ingest.counts, progress)
    return ingest.counts

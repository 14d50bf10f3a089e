"""The processes that prepare messages (read or fetch, parse, compress, write
the blob) while the run's own process decides and commits."""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from typing import Any

from pipeline.held_code import check_install
from pipeline.prepare import Prepared, watch_parent

__all__ = ["Done", "WorkerPool", "worker_pool"]


class WorkerPool(Executor):
    """Processes that read (or fetch), parse, compress and store messages while
    this one commits: started at the first ``submit``, given back by ``release``
    (the next ``submit`` starts them again).

    A sync releases them at the end of each folder's fetch: idle, they would keep
    their memory and their IMAP connections through the folder's fold and every
    small folder after it.

    forkserver, not fork: this process may hold DuckDB threads and locks that a
    forked child must not inherit. The server preloads only what a worker runs
    (``pipeline.prepare``, ``pipeline.sources.imap.fetch``), which loads neither pyarrow
    nor DuckDB: each process of the pool is about 25 MB, not 85, and starting
    the pool again costs a fork per worker.
    """

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._pool: ProcessPoolExecutor | None = None

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        if self._pool is None:
            check_install()  # (a new process runs the files on disk, not the run's code)
            ctx = multiprocessing.get_context("forkserver")
            ctx.set_forkserver_preload(["pipeline.prepare", "pipeline.sources.imap.fetch"])
            self._pool = ProcessPoolExecutor(
                max_workers=self.workers,
                mp_context=ctx,
                initializer=watch_parent,
                initargs=(
                    os.getpid(),
                    logging.getLogger("mailledger").getEffectiveLevel(),
                ),
            )
        return self._pool.submit(fn, *args, **kwargs)

    def release(self, *, cancel: bool = False) -> None:
        """End the processes (after the calls already running; ``cancel``: drop
        those still queued)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=cancel)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self.release(cancel=cancel_futures)


@contextlib.contextmanager
def worker_pool(workers: int) -> Iterator[WorkerPool | None]:
    """A ``WorkerPool`` of ``workers`` processes for a run (None for 0 workers)."""
    if workers <= 0:
        yield None
        return
    pool = WorkerPool(workers)
    try:
        yield pool
    except BaseException:
        # the run failed (a full disk, say): chunks still queued would only write
        # more blobs that no event will name
        pool.release(cancel=True)
        raise
    pool.release()


class Done:
    """A finished call with the interface of a Future (no pool in use): like a
    worker's, its exception is raised by ``result()``, when the batch commits."""

    def __init__(self, fn: Callable[..., list[Prepared]], *args: Any) -> None:
        self._exc: Exception | None = None
        self._value: list[Prepared] = []
        try:
            self._value = fn(*args)
        except Exception as exc:
            self._exc = exc

    def result(self) -> list[Prepared]:
        if self._exc is not None:
            raise self._exc
        return self._value

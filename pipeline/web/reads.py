"""The store as the web app reads it: one ``MessageStore`` for the app, reads taken
one request at a time under a lock (the store's projector is not shared between
threads), within a ``session`` that is kept while requests queue for it: the
projection file is opened by the first of a burst of requests and released when
the last of them is done, so a process with no request under way holds nothing.

Kept across requests, it is let go at once, between two requests, when a writer
wants it, when the log has events the file lacks, or when the file was replaced
(``pipeline.keeping``). Opening it per request cost 4-8 ms of a 10-25 ms request
(the ATTACH, the checks of its version and of the log, the blocks DuckDB read
again) at 10,000 messages."""

from __future__ import annotations

import collections
import contextlib
import json
import threading
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from pipeline.keeping import Keeper
from pipeline.store import MessageStore
from pipeline.terminal import json_escape
from stores.errors import UsageError
from stores.log.reading import drop_groups, keep_groups

__all__ = ["FairLock", "Reads", "json_bytes", "locked_iter", "search_plan"]

# the log's decoded row groups a kept session keeps (``stores.log.reading.keep_groups``):
# the headers of about 25,000 events in row groups of 1,000, dropped when it lets go
_KEPT_GROUPS_BYTES = 32 << 20

_T = TypeVar("_T")


class Reads:
    """The app's store and the lock its reads take turns under."""

    def __init__(self, store_path: Path) -> None:
        self.store = MessageStore.open(store_path, create=False)
        keep_groups(_KEPT_GROUPS_BYTES)
        self.lock = FairLock()
        self._wanting = 0  # requests of this process in or waiting for ``session``
        self._count = threading.Lock()  # (guards _wanting)
        # the projection file, kept across requests (and the log's row groups with it:
        # idle, a web child holds nothing of the store)
        self._kept = Keeper(self.store, on_let_go=drop_groups)

    @contextlib.contextmanager
    def session(self) -> Iterator[MessageStore]:
        """The store for one request's reads: the projection file kept for the next
        request when one waits already and no writer does, else released (and after
        a failure: nothing kept that a failed query may have left half done)."""
        with self._count:
            self._wanting += 1
        with self.lock:
            done = False
            try:
                self._kept.keep()
                yield self.store
                done = True
            finally:
                with self._count:
                    self._wanting -= 1
                    alone = self._wanting == 0
                if not done or alone or self._kept.writer_waiting():
                    self._kept.let_go()

    @property
    def held(self) -> bool:
        """True while the projection file is kept (between requests too)."""
        return self._kept.held

    def let_go(self) -> None:
        """Under ``lock``: the projection file released."""
        self._kept.let_go()

    def now(self) -> datetime:
        """The instant relative dates (``date:2w..``) count back from."""
        now: datetime = self.store.clock.now()
        return now

    def close(self) -> None:
        with self.lock:
            self._kept.let_go()
            keep_groups(0)
            self.store.__exit__()


class FairLock:
    """A lock taken in the order it was asked for: each holder hands it to the
    longest waiting. ``threading.Lock`` wakes any waiter, and one that had just
    let go often took it again: under 50 clients the requests queued in a web
    child's threads waited from nothing to many times the queue (p99 2.5x p50)."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._held = False
        self._waiting: collections.deque[threading.Lock] = collections.deque()

    def __enter__(self) -> None:
        with self._guard:
            if not self._held:
                self._held = True
                return
            turn = threading.Lock()
            turn.acquire()
            self._waiting.append(turn)
        turn.acquire()  # (released by the holder handing the lock over)

    def __exit__(self, *exc: object) -> None:
        with self._guard:
            if self._waiting:
                self._waiting.popleft().release()  # (still held: now the waiter's)
            else:
                self._held = False


def locked_iter(reads: Reads, chunks: Iterable[_T]) -> Iterator[_T]:
    """``chunks`` drawn one at a time under the store's lock (a streamed download:
    other requests are answered between its pages; nothing held between them)."""
    it = iter(chunks)
    while True:
        with reads.lock:
            try:
                chunk = next(it)
            except StopIteration:
                return
            finally:
                reads.let_go()
                reads.store.close()
        yield chunk


def search_plan(query: str, now: datetime) -> Any:
    """The compiled plan of ``query`` in the search language (``QuerySyntaxError``,
    a ``UsageError``, names the position of a mistake); an empty query is one."""
    from projections.queries import compile_query
    from projections.search import parse

    if not query.strip():
        raise UsageError("an empty query: type a search (`*` matches every message)")
    return compile_query(parse(query, now=now, tz=UTC))


def json_bytes(value: Any) -> bytes:
    """``value`` as the command line's ``--json`` prints it (``output.print_json``:
    strings exact, controls and format characters as ``\\uXXXX``)."""
    from pipeline.cli.output import json_default

    text = json.dumps(value, default=json_default, ensure_ascii=False, indent=None)
    return json_escape(text).encode("utf-8")

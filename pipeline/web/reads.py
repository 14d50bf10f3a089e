"""The store as the web app reads it: one ``MessageStore`` for the app, reads taken
one request at a time under a lock (the store's projector is not shared between
threads), each within a short ``session``: the projection file is released when
the request's reads end, never held between requests, so a ``sync`` in another
process still commits."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from pipeline.store import MessageStore
from pipeline.terminal import json_escape
from stores.errors import UsageError

__all__ = ["Reads", "json_bytes", "locked_iter", "search_plan"]

_T = TypeVar("_T")


class Reads:
    """The app's store and the lock its reads take turns under."""

    def __init__(self, store_path: Path) -> None:
        self.store = MessageStore.open(store_path, create=False)
        self.lock = threading.Lock()

    @contextlib.contextmanager
    def session(self) -> Iterator[MessageStore]:
        """The store for one request's reads (the projection file released after)."""
        with self.lock, self.store.session() as store:
            yield store

    def now(self) -> datetime:
        """The instant relative dates (``date:2w..``) count back from."""
        now: datetime = self.store.clock.now()
        return now

    def close(self) -> None:
        with self.lock:
            self.store.__exit__()


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

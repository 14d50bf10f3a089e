"""A worker that runs read commands one after another, the served store kept open.

A served command's worker opened the store and attached its projection file cold,
then exited: at 100,000 messages the first page of a search took 15-21 ms of
DuckDB on a freshly attached file and 7.5 ms on one a previous query had read. So
a worker whose command was a plain read (``REUSED``) of the served store, ended
without a failure, does not exit: it tells the server it stays (``again``) and
waits for the next command with the store and its projection file kept
(``pipeline.keeping``). Before each command what is kept is checked as a new
process's open would be (the log's files, the file's place, the log's end); while
it waits, a writer that announces itself is let in at once (the file let go within
``_POLL`` s), and after ``keep_for`` s without a command (``serve --keep-warm``,
default 30 s) the worker exits (the
server forks a cold spare in its place: an idle server holds nothing of the store
and keeps its memory small).

What a command leaves in the process is what the command line's ``main`` leaves
behind it (its logging undone, its umask restored); a worker also ends after
``_MAX_COMMANDS`` commands or once it has grown past ``_MAX_RSS``.
"""

from __future__ import annotations

import os
import select
import socket
import time
from pathlib import Path
from typing import Any

from pipeline.clock import Clock
from pipeline.event_factory import EventFactory
from pipeline.keeping import Keeper
from pipeline.store import MessageStore

__all__ = ["REUSED", "WarmStore"]

REUSED = frozenset({"search", "find", "show", "thread", "stats", "cursor"})
"""The commands after which a worker stays: reads of the projections whose every
effect on the process ends with them (not ``query``: its SQL may change the
connection's settings or attach other files)."""

_POLL = 0.005  # seconds between two asks, while waiting, whether a writer wants the file
_MAX_COMMANDS = 1000
_MAX_RSS = 512 << 20


class _KeptStore(MessageStore):
    """The served store as a command opens it in a warm worker: its end lets the
    command go, not the projection file or the blob index (the next command's)."""

    def __exit__(self, *exc: object) -> None:
        self.log.settle()


class WarmStore:
    """The store at ``root``, kept from one command to the next (an ``App``'s
    ``kept``) for ``keep_for`` s; ``command`` is told each command's name."""

    def __init__(self, root: Path, keep_for: float) -> None:
        self.root = Path(os.path.realpath(root))
        self.keep_for = keep_for
        self.store: MessageStore | None = None
        self._keeper: Keeper | None = None
        self._budget = 0  # the store's own memory budget (a command may set another)
        self._commands = 0
        self.reused: bool = False  # (this command may leave the worker warm)

    def __call__(
        self, path: Path, *, clock: Clock, run_id: str, check: bool
    ) -> MessageStore | None:
        if not self.reused or os.path.realpath(path) != str(self.root):
            return None  # (another command opens the store as the command line does)
        store, keeper = self.store, self._keeper
        if store is None or keeper is None:
            store = _KeptStore.open(
                self.root, create=False, clock=clock, run_id=run_id, check=check
            )
            self.store, self._keeper = store, keeper = store, Keeper(store)
            self._budget = store.projector.memory_budget
        else:
            store.clock, store.run_id = clock, run_id
            store.events = EventFactory(clock, run_id)
            store.projector.memory_budget = self._budget
            if check:
                store.log.check()  # (as an open does: a file changed behind our back)
        keeper.keep()
        return store

    def command(self, name: str | None, cluster: Any) -> None:
        """The command about to run: a read of ``REUSED`` gets the kept store; for
        any other (a write), the projection file is let go first."""
        self.reused = name in REUSED and cluster is None
        if not self.reused and self._keeper is not None:
            self._keeper.let_go()

    def again(self, code: int) -> bool:
        """After a command that ended with ``code``: True when this worker stays for
        another (else it exits); the projection file let go after a failure."""
        self._commands += 1
        if code != 0 and self._keeper is not None:
            self._keeper.let_go()  # (a failed read may leave the connection half done)
        return (
            self.reused
            and self.keep_for > 0
            and code in (0, 1)
            and self._commands < _MAX_COMMANDS
            and _rss() < _MAX_RSS
        )

    def wait(self, channel: socket.socket) -> bool:
        """Wait for the server's next message on ``channel`` (True), letting the file
        go at once for a writer; False after ``keep_for`` s without one."""
        deadline = time.monotonic() + self.keep_for
        while True:
            held = self._keeper is not None and self._keeper.held
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            ready, _, _ = select.select([channel], [], [], min(left, _POLL) if held else left)
            if ready:
                return True
            if held and self._keeper is not None and self._keeper.writer_waiting():
                self._keeper.let_go()


def _rss() -> int:
    """This process's resident bytes."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0

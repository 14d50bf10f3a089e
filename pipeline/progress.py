"""Progress of long work (import, replay, verify, a sync's bodies) on a terminal.

Long-running library functions take a ``Progress`` and report through it; the
default, ``NO_PROGRESS``, does nothing, so library users and tests see no
change. The command line alone decides whether a terminal shows it
(``progress_for``): never under cron or in a pipe, never when asked to be quiet.

The terminal implementation draws a tqdm bar (done/total, rate, ETA) on stderr,
from this process only: the worker processes never report (they are started by
a forkserver and know nothing of a bar). It redraws at least every second,
even while no unit finishes (a FETCH of large bodies on a slow link): the
elapsed time moves while the count waits for the batch. A bar is cleared when
it closes: what the command prints afterwards is what it prints without a
terminal.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol, TextIO, TypeVar

from pipeline.terminal import terminal_text

__all__ = [
    "NO_PROGRESS", "NoProgress", "Progress", "TerminalProgress", "counted", "progress_for",
]  # fmt: skip


class Progress(Protocol):
    """What long work reports: one task at a time, ``start`` .. ``advance`` .. ``close``."""

    def start(self, total: int | None, label: str, *, unit: str | None = "msg") -> None:
        """A new task of ``total`` units (None: not known in advance; the rate is
        shown). ``unit`` None: work that cannot be counted (a rebuild in SQL): only
        the elapsed time is shown. Closes the task before it, if any."""

    def advance(self, n: int = 1) -> None:
        """``n`` more units of the current task are done."""

    def close(self) -> None:
        """The current task is over (its display is removed). Idempotent."""


class NoProgress:
    """Reports nowhere: the default of every function that takes a ``Progress``."""

    def start(self, total: int | None, label: str, *, unit: str | None = "msg") -> None:
        pass

    def advance(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


NO_PROGRESS: Progress = NoProgress()

_T = TypeVar("_T")


def counted(items: Iterable[_T], progress: Progress) -> Iterator[_T]:
    """``items``, one more counted done each time the loop over them comes back
    for the next (so a unit counts once its loop body is over, ``continue`` too)."""
    for item in items:
        yield item
        progress.advance()


def progress_for(enabled: bool, *, delay: float = 0.0, stream: TextIO | None = None) -> Progress:
    """The progress display a command uses: a bar on ``stream`` (default stderr)
    when ``enabled``, else ``NO_PROGRESS``. ``enabled`` is the command line's
    decision (stderr is a terminal, and neither ``-q`` nor a log level above
    WARNING asks for silence). ``delay``: see ``TerminalProgress``."""
    if not enabled:
        return NO_PROGRESS
    return TerminalProgress(stream, delay=delay)


def _size(stream: TextIO) -> tuple[int, int]:
    """(columns, lines) of the terminal ``stream`` writes to (0: unknown)."""
    try:
        size = os.get_terminal_size(stream.fileno())
    except (AttributeError, OSError, ValueError):
        return 0, 0
    return size.columns, size.lines


@functools.cache
def _bar_class() -> type[Any]:
    """tqdm, imported when a bar is first drawn (a command without one never loads it),
    with two class-wide choices of its own made on a subclass: no monitor thread
    (``heartbeat`` below redraws instead, and a bar advanced by hand needs no
    throttling of its own), and a thread lock rather than tqdm's default
    multiprocessing one: bars are drawn from this process only, and a
    multiprocessing lock is a semaphore for nothing."""
    from tqdm import tqdm

    class _Bar(tqdm):  # type: ignore[misc]
        monitor_interval = 0

    _Bar.set_lock(threading.RLock())
    return _Bar


class TerminalProgress:
    """A tqdm bar on ``stream`` (stderr when None), one task at a time.

    ``delay``: seconds a task runs before its bar appears (a sync's folder of a
    few messages shows none). ``heartbeat``: the longest time between two redraws
    while a bar shows. ``clock``: ``time.monotonic`` (a test may pass its own).
    """

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        delay: float = 0.0,
        heartbeat: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._stream = stream
        self.delay = delay
        self.heartbeat = heartbeat
        self._clock = clock
        self._lock = threading.Lock()  # advance (this thread) and the heartbeat's redraws
        self._task: tuple[int | None, str, str | None] | None = None
        self._t0 = 0.0
        self._n = 0
        self._bar: Any = None
        self._redrawn = 0.0  # (tqdm's clock) the heartbeat's last redraw
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, total: int | None, label: str, *, unit: str | None = "msg") -> None:
        self.close()
        with self._lock:
            self._task = (total, label, unit)
            self._t0 = self._clock()
            self._n = 0
            self._draw_if_due()
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._beat, args=(self._stop,), name="mailledger-progress", daemon=True
        )
        self._thread.start()

    def advance(self, n: int = 1) -> None:
        with self._lock:
            if self._task is None:
                return
            self._n += n
            if self._bar is not None:
                self._bar.update(n)
            else:
                self._draw_if_due()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        self._thread = None
        with self._lock:
            if self._bar is not None:
                self._bar.close()
            self._bar = None
            self._task = None

    def __enter__(self) -> TerminalProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _draw_if_due(self) -> None:
        """Create the bar once ``delay`` has passed (under ``_lock``)."""
        if self._task is None or self._bar is not None:
            return
        if self._clock() - self._t0 < self.delay:
            return
        total, label, unit = self._task
        stream = self._stream if self._stream is not None else sys.stderr
        kwargs: dict[str, Any] = {}
        columns, lines = _size(stream)
        if columns > 0 and lines > 0:
            kwargs["dynamic_ncols"] = True  # follows a resized window
        else:  # a terminal that says it has no size (a bare pty): tqdm would draw nothing
            kwargs.update(ncols=80, nrows=24)
        if unit is None:  # nothing to count: the label and the time it has taken
            kwargs["bar_format"] = "{desc} [{elapsed}]"
        elif unit == "B":
            kwargs.update(unit="B", unit_scale=True, unit_divisor=1024)
        else:
            kwargs["unit"] = f" {unit}"
        self._bar = _bar_class()(
            total=total,
            initial=self._n,
            desc=terminal_text(label),  # (a folder's name, a file's: mail's text)
            file=stream,
            leave=False,
            # every advance may redraw, at most every 0.5 s: a chunk of a slow
            # FETCH is never held back by a count of units seen earlier
            miniters=1,
            mininterval=0.5,
            smoothing=0.1,
            **kwargs,
        )

    def _beat(self, stop: threading.Event) -> None:
        """Redraw a bar nothing advanced for ``heartbeat`` seconds (the elapsed time
        moves); create it once its ``delay`` has passed."""
        while not stop.wait(min(self.heartbeat, 0.25)):
            with self._lock:
                if stop.is_set():
                    return
                if self._bar is None:
                    self._draw_if_due()
                    continue
                # tqdm's own clock; its last_print_t is left alone (its rate is
                # measured between two advances, not between redraws)
                now = self._bar._time()
                if now - max(self._bar.last_print_t, self._redrawn) >= self.heartbeat:
                    self._bar.refresh()
                    self._redrawn = now

"""The server's long-lived children (``serve --listen``'s web app, ``serve --sync``'s
sync): each a process forked from the server, which imported the libraries but
opened nothing of the store (so the child may open it: DuckDB is safe to start in
a child of a process that never started it), supervised by the server.

A child starts with the server; when it dies, it starts again after a backoff
(1 s, doubling to 60 s; back to 1 s after a child that had run a minute); when
the server stops, it gets SIGTERM, and SIGKILL after its grace. What it prints
(stdout and stderr) comes to the server through a pipe and goes to the server's
log, line by line, under the child's name."""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pipeline.serve.worker import exit_status, flush_stdio

__all__ = ["RECYCLED", "Child", "describe_group", "fork_child"]

log = logging.getLogger("mailledger-serve")

FIRST_BACKOFF = 1.0  # seconds before a dead child starts again, doubled each time...
MOST_BACKOFF = 60.0  # ...up to this
STEADY = 60.0  # a child that ran this long had started well: the backoff begins again
RECYCLED = 75
"""A child's exit status for "replace me now" (a web child idle after a load gives
back the memory its allocators kept): started again at once, without a backoff."""
_LINE = 4000  # characters of a child's line kept in the log


def fork_child(target: Callable[[], int], keep: Sequence[int], output: int) -> int:
    """Fork a child that runs ``target`` and exits with its code; its pid.

    The child is a session of its own (a Ctrl-C on the server's terminal is the
    server's to pass on), takes SIGINT and SIGTERM as a fresh process does (and
    ignores SIGUSR1 until it takes it: ``sync --watch``), keeps
    no descriptor of the server's but ``keep``, and prints to ``output`` (stdout
    and stderr both)."""
    for handler in log.handlers:
        handler.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    server = os.getpid()
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        _die_with(server)
        os.setsid()
        signal.set_wakeup_fd(-1)  # (the server's event loop's, not ours)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        # ("sync now" to a sync child still starting: not its death; sync --watch
        # takes SIGUSR1 once it runs)
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        os.dup2(output, 1)
        os.dup2(output, 2)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        _close_all_but(keep)
        for handler in list(log.handlers):
            log.removeHandler(handler)
        sys.stdout, sys.stderr = _text(1), _text(2)
        code = target()
    except SystemExit as exc:
        code = exit_status(exc)
    except BaseException:  # (in the server's log: a bug)
        with contextlib.suppress(BaseException):
            traceback.print_exc()
    finally:
        flush_stdio()
        os._exit(code)


def _die_with(server: int) -> None:
    """SIGTERM to this child when the server dies, even by SIGKILL (Linux's
    ``PR_SET_PDEATHSIG``): an orphaned web child would hold the address and an
    orphaned sync would run on, unsupervised, beside the next server's."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    if os.getppid() != server:  # (it died before the line above)
        os.kill(os.getpid(), signal.SIGTERM)


def _text(fd: int) -> io.TextIOWrapper:
    """A line-buffered text stream over ``fd`` (the pipe to the server's log)."""
    raw = io.FileIO(fd, "w", closefd=False)
    return io.TextIOWrapper(raw, encoding="utf-8", errors="replace", line_buffering=True)


def _close_all_but(keep: Sequence[int]) -> None:
    low = 3
    for fd in sorted(k for k in keep if k >= 3):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, os.sysconf("SC_OPEN_MAX"))


@dataclass
class Child:
    """One supervised child: ``spawn(output)`` forks it (printing to the descriptor
    ``output``) and answers its pid; ``on_line`` sees each line it prints."""

    name: str
    spawn: Callable[[int], int]
    grace: float
    on_line: Callable[[str], None] | None = None
    pid: int | None = None
    started: float | None = None  # (wall clock: status shows it)
    starts: int = 0
    last_exit: int | None = None
    ended: float | None = None  # (wall clock: when it last exited)
    next_start: float | None = None
    _task: asyncio.Task[None] | None = field(default=None, repr=False)

    def describe(self) -> dict[str, Any]:
        """pid (None between two runs), starts, the last exit code, the next start."""
        return {
            "pid": self.pid,
            "started": self.started,
            "starts": self.starts,
            "last_exit": self.last_exit,
            "next_start": self.next_start,
        }

    def start(self, stopping: asyncio.Event) -> None:
        """Run and supervise the child until ``stopping`` is set."""
        self._task = asyncio.get_running_loop().create_task(self._supervise(stopping))

    async def stop(self) -> None:
        """SIGTERM to the child (``stopping`` set already), SIGKILL after ``grace``;
        returns once it ended."""
        if self._task is None:
            return
        pid = self.pid
        if pid is not None:
            _signal(pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.shield(self._task), self.grace)
        except TimeoutError:
            if self.pid is not None:
                log.warning(
                    "%s: pid %d still running after %.0f s: killed", self.name, pid, self.grace
                )
                _signal(self.pid, signal.SIGKILL)
            await self._task

    def signal(self, sig: int) -> int | None:
        """Send ``sig`` to the running child; its pid, or None when none runs."""
        pid = self.pid
        if pid is not None:
            _signal(pid, sig)
        return pid

    async def _supervise(self, stopping: asyncio.Event) -> None:
        backoff = FIRST_BACKOFF
        while not stopping.is_set():
            began = time.monotonic()
            code = await self._run_once()
            if stopping.is_set():
                return
            if code == RECYCLED:
                log.info("%s: idle for --keep-warm: replaced by a fresh one", self.name)
                continue
            if time.monotonic() - began >= STEADY:
                backoff = FIRST_BACKOFF
            log.warning("%s: exit %s; starting again in %.0f s", self.name, code, backoff)
            self.next_start = time.time() + backoff
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), backoff)
            self.next_start = None
            backoff = min(backoff * 2, MOST_BACKOFF)

    async def _run_once(self) -> int | None:
        """Start the child, log what it prints, and answer its exit code once it ended
        (None: it could not be started)."""
        loop = asyncio.get_running_loop()
        read_end, write_end = os.pipe()
        try:
            pid = self.spawn(write_end)
        except OSError as exc:
            log.warning("%s: could not start: %s", self.name, exc)
            os.close(read_end)
            return None
        finally:
            os.close(write_end)
        self.pid, self.started = pid, time.time()
        self.starts += 1
        log.info("%s: pid %d started", self.name, pid)
        printed = loop.create_future()
        lines = _Lines(self.name, pid, self.on_line)

        def readable() -> None:
            try:
                chunk = os.read(read_end, 65536)
            except BlockingIOError:
                return
            lines.feed(chunk)
            if not chunk and not printed.done():
                loop.remove_reader(read_end)
                printed.set_result(None)

        os.set_blocking(read_end, False)
        loop.add_reader(read_end, readable)
        try:
            code = await _exited(pid)
            # (what it printed last is in the pipe still: read to its end; a grandchild
            # that kept the pipe open is not waited for long)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(printed), 2.0)
        finally:
            with contextlib.suppress(ValueError, OSError):
                loop.remove_reader(read_end)
            os.close(read_end)
            self.pid = None
        self.last_exit, self.ended = code, time.time()
        log.info("%s: pid %d exit %d", self.name, pid, code)
        return code


class _Lines:
    """A child's output cut into lines for the log (and ``on_line``)."""

    def __init__(self, name: str, pid: int, on_line: Callable[[str], None] | None) -> None:
        self.prefix = f"{name} {pid}"
        self.on_line = on_line
        self.rest = b""

    def feed(self, chunk: bytes) -> None:
        data = self.rest + chunk
        *whole, self.rest = data.split(b"\n")
        if not chunk and self.rest:  # (the end: a last line without its newline)
            whole, self.rest = [*whole, self.rest], b""
        for raw in whole:
            line = raw.decode("utf-8", "replace").rstrip("\r")
            log.info("%s: %s", self.prefix, line[:_LINE])
            if self.on_line is not None:
                self.on_line(line)


async def _exited(pid: int) -> int:
    """``pid``'s exit code (``-N``: killed by signal N), once it ended."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[int] = loop.create_future()
    pidfd = os.pidfd_open(pid)

    def ended() -> None:
        loop.remove_reader(pidfd)
        _, status = os.waitpid(pid, 0)
        if not done.done():
            done.set_result(os.waitstatus_to_exitcode(status))

    loop.add_reader(pidfd, ended)
    try:
        return await done
    finally:
        with contextlib.suppress(ValueError, OSError):
            loop.remove_reader(pidfd)
        os.close(pidfd)


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def describe_group(children: Sequence[Child]) -> dict[str, Any]:
    """Children doing the same work (``serve --listen``'s web children) as status
    shows them: ``pids`` of those running (``pid``: the first, None when none
    runs), every start, the last exit seen and the next start; ``each`` child's own."""
    each = [child.describe() for child in children]
    pids = [d["pid"] for d in each if d["pid"] is not None]
    ended = [c for c in children if c.last_exit is not None]
    last = max(ended, key=lambda c: c.ended or 0.0) if ended else None
    starts = [d["next_start"] for d in each if d["next_start"] is not None]
    return {
        "pid": pids[0] if pids else None,
        "pids": pids,
        "children": len(children),
        "starts": sum(d["starts"] for d in each),
        "last_exit": last.last_exit if last is not None else None,
        "next_start": min(starts) if starts else None,
        "each": each,
    }

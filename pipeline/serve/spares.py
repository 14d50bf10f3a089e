"""The one idle worker the server keeps ready for the next command.

It is forked cold (``worker.spare``: its DuckDB instance started, nothing of the
store open) or it is a warm one: a worker back from a read command, the store's
projection file still attached (``pipeline.serve.warm``), which the next command
reads at once. A warm worker takes the place of a cold one. The slot watches its
worker: one that ends while idle (a warm worker's keep is over, a crash) is
reaped and a cold one forked in its place, off any command's path.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Idle", "SpareSlot"]


@dataclass
class Idle:
    """A worker waiting for a command: its pid and the server's end of its channel."""

    pid: int
    channel: socket.socket
    warm: bool = False  # (back from a command, the store kept: see ``warm``)
    pidfd: int | None = None  # (while in the slot: watched for its end)


class SpareSlot:
    """Holds at most one ``Idle`` worker (``fork`` makes a cold one)."""

    def __init__(self, fork: Callable[[], Idle], ended: Callable[[Idle, int], None]) -> None:
        self._fork = fork
        self._ended = ended  # (told of an idle worker that ended, with its wait status)
        self.idle: Idle | None = None

    def describe(self) -> dict[str, Any]:
        """The idle worker for ``serve status``: its pid, and whether it keeps the store."""
        idle = self.idle
        return {"pid": idle.pid, "warm": idle.warm} if idle is not None else {"pid": None}

    def keep(self) -> None:
        """A worker in the slot: forked now when it is empty."""
        if self.idle is None:
            self._put(self._fork())

    def take(self) -> Idle:
        """The idle worker (forked now when there is none), out of the slot."""
        idle = self.idle or self._fork()
        self._unwatch(idle)
        self.idle = None
        return idle

    def give_back(self, worker: Idle) -> None:
        """A worker back from a command with the store kept: in the slot, in place of
        a cold one (which is stopped)."""
        worker.warm = True
        if self.idle is not None:
            self.drop()
        self._put(worker)

    def drop(self) -> None:
        """The idle worker stopped (SIGTERM) and reaped; the slot empty."""
        idle, self.idle = self.idle, None
        if idle is not None:
            self._unwatch(idle)
            idle.channel.close()
            with contextlib.suppress(ProcessLookupError):
                os.kill(idle.pid, signal.SIGTERM)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(idle.pid, 0)

    def _put(self, idle: Idle) -> None:
        self.idle = idle
        try:
            idle.pidfd = os.pidfd_open(idle.pid)
        except ProcessLookupError:  # (ended already: reaped at once)
            self.idle = None
            _, status = os.waitpid(idle.pid, 0)
            self._ended(idle, status)
            return
        asyncio.get_running_loop().add_reader(idle.pidfd, self._on_end, idle)

    def _on_end(self, idle: Idle) -> None:
        self._unwatch(idle)
        if self.idle is idle:
            self.idle = None
        idle.channel.close()
        _, status = os.waitpid(idle.pid, 0)
        self._ended(idle, status)

    @staticmethod
    def _unwatch(idle: Idle) -> None:
        if idle.pidfd is not None:
            with contextlib.suppress(ValueError, OSError):
                asyncio.get_running_loop().remove_reader(idle.pidfd)
            os.close(idle.pidfd)
            idle.pidfd = None

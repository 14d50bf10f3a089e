"""``serve --sync``: the store's one writer inside the server, a child running
``mailledger --store STORE sync --apply --watch --interval I [--config FILE]``,
the same ``pipeline.cli.main`` as that command line, until the server stops it.

Its lines go to the server's log; the server reads each run's summary line
(``sync run=... exit=N``) to say in ``serve status`` when it last ran and how it
ended. SIGUSR1 ("sync now": ``POST /api/v1/sync``) ends its wait at once."""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.serve.children import Child, fork_child

__all__ = ["SyncChild", "sync_argv"]

_GRACE = 30.0  # seconds a run under way has to end after SIGTERM (then SIGKILL: the
# fence makes a killed run safe, it is only lost work)
_SUMMARY = re.compile(r"^sync run=(\S+) .* exit=(\d+)$")


def sync_argv(store: Path, config: Path | None, interval: float) -> list[str]:
    """The command line the sync child runs."""
    argv = ["--store", str(store), "sync", "--apply", "--watch", "--interval", repr(interval)]
    return argv + (["--config", str(config)] if config is not None else [])


@dataclass
class SyncChild:
    """The supervised sync child and what its summary lines told."""

    argv: list[str]
    env: Mapping[str, str]
    interval: float
    runs: int = 0
    last_run: float | None = None  # (wall clock: when the last run ended)
    last_run_exit: int | None = None
    last_run_id: str | None = None
    child: Child = field(init=False)

    def __post_init__(self) -> None:
        self.child = Child("sync", self._spawn, grace=_GRACE, on_line=self._line)

    def _spawn(self, output: int) -> int:
        def run() -> int:
            from pipeline.cli.entry import main

            return main(self.argv, dict(self.env))

        return fork_child(run, keep=[], output=output)

    def _line(self, line: str) -> None:
        found = _SUMMARY.match(line)
        if found:
            self.runs += 1
            self.last_run = time.time()
            self.last_run_id = found[1]
            self.last_run_exit = int(found[2])

    def describe(self) -> dict[str, Any]:
        """The child's state, the interval, and the last run's end and exit code."""
        return {
            **self.child.describe(),
            "interval": self.interval,
            "runs": self.runs,
            "last_run": self.last_run,
            "last_run_exit": self.last_run_exit,
            "last_run_id": self.last_run_id,
        }

"""``pipeline.serve.children``: the supervision of the server's long-lived children,
with real forked processes: what a child prints reaches the log line by line, a
child that dies is started again after a doubling backoff, and one that ignores
SIGTERM is killed after its grace."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import time

import pytest

from pipeline.serve.children import Child, fork_child


def _printing(*lines: str, code: int = 0, sleep: float = 0.0) -> int:
    for line in lines:
        sys.stdout.write(line + "\n")  # (the child's stdout: the pipe to the server's log)
    sys.stdout.flush()
    time.sleep(sleep)
    return code


def test_a_child_s_lines_reach_the_log_and_its_reader(caplog: pytest.LogCaptureFixture) -> None:
    seen: list[str] = []
    child = Child(
        "probe",
        lambda out: fork_child(lambda: _printing("one", "two ✓", code=3), [], out),
        grace=5.0,
        on_line=seen.append,
    )

    async def main() -> None:
        stopping = asyncio.Event()
        child.start(stopping)
        for _ in range(100):  # until its first run ended
            await asyncio.sleep(0.05)
            if child.last_exit is not None:
                break
        stopping.set()
        await child.stop()

    with caplog.at_level(logging.INFO, logger="mailledger-serve"):
        asyncio.run(main())
    assert seen[:2] == ["one", "two ✓"]
    assert child.last_exit == 3
    assert any(r.getMessage().endswith(": one") for r in caplog.records)


def test_a_dying_child_is_started_again_after_a_doubling_backoff(
    caplog: pytest.LogCaptureFixture,
) -> None:
    child = Child("dying", lambda out: fork_child(lambda: 1, [], out), grace=5.0)

    async def main() -> None:
        stopping = asyncio.Event()
        child.start(stopping)
        while child.starts < 3:
            await asyncio.sleep(0.05)
        stopping.set()
        await child.stop()

    with caplog.at_level(logging.INFO, logger="mailledger-serve"):
        asyncio.run(main())
    waits = [r.getMessage() for r in caplog.records if "starting again" in r.getMessage()]
    assert waits[:2] == [
        "dying: exit 1; starting again in 1 s",
        "dying: exit 1; starting again in 2 s",
    ]


def _deaf() -> int:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    time.sleep(60)
    return 0


def test_a_child_that_ignores_sigterm_is_killed_after_its_grace() -> None:
    ready: list[str] = []
    child = Child("deaf", lambda out: fork_child(_deaf, [], out), grace=0.5, on_line=ready.append)

    async def main() -> int:
        stopping = asyncio.Event()
        child.start(stopping)
        while not ready:
            await asyncio.sleep(0.05)
        pid = child.pid
        assert pid is not None
        stopping.set()
        await child.stop()
        return pid

    pid = asyncio.run(main())
    assert child.last_exit == -signal.SIGKILL and child.pid is None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)

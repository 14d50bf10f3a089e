"""Shared fixtures: a fresh store per test, the real-mail corpora beside the repo."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from pipeline.store import MessageStore

REPO = Path(__file__).resolve().parents[1]
CORPORA = REPO.parent / "shared" / "corpora"


class StepClock:
    """A clock that advances one second per reading: deterministic recorded_at."""

    def __init__(self, start: datetime | None = None) -> None:
        self.t = start or datetime(2026, 11, 30, 12, 0, tzinfo=UTC)

    def now(self) -> datetime:
        self.t += timedelta(seconds=1)
        return self.t


def stderr_on_a_terminal(argv: list[str]) -> tuple[int, bytes]:
    """Run ``argv`` with its stderr on a pseudo-terminal (stdout discarded): its exit
    code and all it drew there (a progress display shows only on a terminal)."""
    import os
    import pty
    import subprocess

    leader, follower = pty.openpty()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=follower)
    os.close(follower)
    seen = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the terminal closed: the command ended
            break
        if not chunk:
            break
        seen += chunk
    os.close(leader)
    return proc.wait(timeout=120), seen


@pytest.fixture
def clock() -> StepClock:
    return StepClock()


@pytest.fixture
def store(tmp_path: Path, clock: StepClock) -> Iterator[MessageStore]:
    s = MessageStore.open(tmp_path / "store", clock=clock, run_id="test-run")
    yield s
    s.close()


@pytest.fixture(scope="session")
def notmuch_corpus() -> Path:
    path = CORPORA / "notmuch"
    if not path.is_dir():
        pytest.skip(f"corpus folder absent: {path} (CI always has it)")
    return path


# --- a real Dovecot on loopback (testkit/dovecot.py) ----------------------------
# Imports stay inside the fixtures: tests that do not use Dovecot never load it.


@pytest.fixture(scope="session")
def dovecot() -> Iterator[object]:
    """One private Dovecot 2.3 for the whole session (a `dovecot.Dovecot`).

    Skipped only where the `dovecot` binary is absent; CI installs it (.ci/run).
    Users keep their mail between tests: use `imap_user` for a clean one.
    """
    from testkit.dovecot import Dovecot, find_dovecot

    if find_dovecot() is None:
        pytest.skip(
            "dovecot not installed (apt-get install -y dovecot-imapd dovecot-pop3d "
            "openssl; .ci/run does this)"
        )
    server = Dovecot()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def imap_user(dovecot: object) -> object:
    """A factory: `imap_user("gmail")` resets that user (no mail, new UIDVALIDITYs)
    and returns a `dovecot.MailUser` bound to the session's server."""
    from testkit.dovecot import Dovecot, MailUser

    assert isinstance(dovecot, Dovecot)

    def make(name: str = "gmail") -> MailUser:
        dovecot.reset_user(name)
        return dovecot.user(name)

    return make

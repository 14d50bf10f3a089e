"""Shared fixtures: a fresh store per test, the real-mail corpora beside the repo."""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

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


# --- hypothesis: the same examples every run, the search apart (make fuzz) ------
# `make test` and CI run the property tests derandomized: each test draws the examples
# a hash of its own code gives, so a landing is never blocked by a lucky draw, and
# nothing is read from or saved to .hypothesis/. `make fuzz` runs them randomized
# (HYPOTHESIS_PROFILE=release) before a release; every failure it finds becomes an
# @example or a plain test. A test's own @settings(max_examples=...) sets only that
# key: derandomize and database still come from the profile loaded here, before any
# test module is imported (hypothesis takes the defaults when @settings is applied).
# No deadline and no too_slow check in either: both time the machine, and two cores
# shared by a whole suite are no measure of a property (the benchmarks time things).
settings.register_profile(
    "ci",
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "release",
    derandomize=False,
    deadline=None,
    print_blob=True,
    max_examples=500,
    suppress_health_check=[HealthCheck.too_slow],
)


def pytest_configure(config: pytest.Config) -> None:
    """``ci`` unless ``HYPOTHESIS_PROFILE`` or ``--hypothesis-profile`` names another."""
    if config.getoption("hypothesis_profile", None) is None:
        settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


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

"""Server anomalies on a real Dovecot (the make-test slice of `torture/anomalies.py`).

Each scenario makes Dovecot misbehave for real (a lost index, an old
UIDVALIDITY forced back, a folder deleted under the client) and checks the
exit code, the ALARM, the cursor and the store against what the server holds.
Only the missing UIDNEXT needs the fault proxy: Dovecot always sends it.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testkit.faultproxy import FaultProxy
from torture.anomalies import SCENARIOS, Ctx, random_trial


@pytest.fixture
def ctx(dovecot: Any, tmp_path: Path) -> Iterator[Ctx]:
    with FaultProxy(("127.0.0.1", dovecot.imap_port)) as proxy:
        yield Ctx(dovecot, proxy, tmp_path)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_server_anomaly(name: str, ctx: Ctx) -> None:
    outcome = SCENARIOS[name](ctx)
    assert outcome.problems == [], outcome.observed


def test_reused_uids_are_found_and_nothing_is_lost_in_random_trials(ctx: Ctx) -> None:
    rng = random.Random(7)
    trials = [random_trial(ctx, rng, n, runs=4) for n in range(2)]
    assert [p for t in trials for p in t.problems] == []
    assert all(t.lost == 0 for t in trials)

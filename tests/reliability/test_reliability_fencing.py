"""Fencing under chaos, the quick slice (``make fencing-chaos`` runs the gate's 100
kills and 20 pauses): sync tasks of four accounts on one shard killed and paused
mid-run lose nothing, double nothing, leave no seq gap, and every cursor
converges; a paused task resumed after a second attempt took its account's
epoch is refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from torture import fencing


@pytest.mark.slow
def test_killed_and_paused_committers_lose_and_double_nothing(tmp_path: Path) -> None:
    result = fencing.main(
        trials=fencing.QUICK_TRIALS,
        pauses=fencing.QUICK_PAUSES,
        workdir=tmp_path,  # (the first pause lands after the task's first commit)
    )
    if result.skipped:
        pytest.fail(f"not run: {result.skipped}")  # (CI installs dovecot: never skipped)
    assert result.failures == []
    assert result.trials == fencing.QUICK_TRIALS + fencing.QUICK_PAUSES
    assert result.figures["stale_epoch_refusals"] >= 1
    assert result.figures["messages"] > 0

"""``publish delta`` killed with SIGKILL at random points and told a landed commit
failed: the quick slice of ``torture/delta.py`` (no (shard, seq) twice, the table
equal to the logs, older table versions giving the events as of then)."""

from __future__ import annotations

from pathlib import Path

import pytest

from torture import delta

pytestmark = pytest.mark.slow


def test_delta_publish_campaign_quick_slice(tmp_path: Path) -> None:
    result = delta.main(trials=delta.QUICK_TRIALS, workdir=tmp_path)
    assert result.ok, result.failures
    assert result.trials == delta.QUICK_TRIALS
    assert result.figures["duplicates"] == 0
    assert result.figures["lost_answers"] == delta.QUICK_TRIALS  # (one injected each trial)
    assert result.figures["killed_mid_publish"] >= 1  # (a kill landed after a commit of its run)

"""delete + compact --purge against a store synced from a real Dovecot: the quick
slice of ``torture/erasure.py`` (byte search of the whole store, cursors and the
other messages intact, the erased mail never comes back)."""

from __future__ import annotations

from pathlib import Path

import pytest

from torture import erasure

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("dovecot")]


def test_erasure_campaign_quick_slice(tmp_path: Path) -> None:
    result = erasure.main(trials=erasure.QUICK_TRIALS, workdir=tmp_path)
    assert result.ok, result.failures
    assert result.trials == erasure.QUICK_TRIALS and result.faults >= erasure.QUICK_TRIALS

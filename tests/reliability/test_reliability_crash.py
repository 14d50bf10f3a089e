"""kill -9 during import, sync, compact, purge and replay: the quick slice of
``torture/crash.py`` (5 trials per operation), and the regression it found."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.sources.maildir import import_maildir
from pipeline.store import MessageStore
from torture import crash

pytestmark = pytest.mark.slow


def test_crash_campaign_quick_slice(tmp_path: Path) -> None:
    from testkit.dovecot import find_dovecot

    ops = crash.OPERATIONS if find_dovecot() else tuple(o for o in crash.OPERATIONS if o != "sync")
    trials = 5 * len(ops)
    result = crash.main(trials=trials, operations=ops, workdir=tmp_path)
    assert result.ok, result.failures
    assert result.trials == trials
    for op in ops:
        figs = result.figures[op]
        assert figs["trials"] == 5 and figs["completions"] >= 1, (op, figs)
    assert result.faults >= 3, f"too few kills landed mid-operation: {result.figures}"


def _maildir(root: Path, n: int) -> Path:
    for d in ("cur", "new", "tmp"):
        (root / d).mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (root / "cur" / f"{i}.M{i}P1.h:2,S").write_bytes(
            f"Subject: s{i}\r\nMessage-ID: <c{i}@x>\r\n\r\nbody {i}\r\n".encode()
        )
    return root


def test_a_rerun_after_a_kill_before_the_fold_records_no_location_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by the campaign: an import killed after its commits but before it folded
    them left projections behind the log; the re-run decided from those stale
    projections and recorded every location again."""
    src = _maildir(tmp_path / "md", 30)
    first = MessageStore.open(tmp_path / "s")
    monkeypatch.setattr(first, "catch_up", lambda: -1)  # killed before its fold
    import_maildir(first, src, batch_size=5)
    first.close()
    monkeypatch.undo()
    again = MessageStore.open(tmp_path / "s")
    counts = import_maildir(again, src, batch_size=5)
    assert counts.events == 0
    dup = again.query(
        "SELECT count(*) AS n FROM (SELECT folder, uidl, sha256 FROM events"
        " WHERE type = 'message-seen' GROUP BY ALL HAVING count(*) > 1)"
    )
    assert dup.to_pylist() == [{"n": 0}]
    assert again.verify() == []

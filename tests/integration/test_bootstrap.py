"""The composition root: one clock and run id per run, given to every store it
opens and to every event those stores write."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.bootstrap import App, Sources


class _Clock:
    def __init__(self) -> None:
        from datetime import UTC, datetime

        self.t = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)

    def now(self) -> Any:
        return self.t


def test_a_run_stamps_its_id_and_clock_on_what_its_stores_write(tmp_path: Path) -> None:
    clock = _Clock()
    app = App({}, clock=clock)
    with app.open_store(tmp_path / "store", create=True) as store:
        store.add("u1", b"Message-ID: <a@x>\r\nSubject: s\r\n\r\nbody\r\n", source="t")
        store.delete("a@x", actor="test", reason="test")
        rows = store.query("SELECT run_id, recorded_at FROM events ORDER BY seq").to_pylist()
    assert [r["run_id"] for r in rows] == [app.run_id, app.run_id]
    assert all(r["recorded_at"] == clock.t for r in rows)


def test_the_next_run_has_its_own_id_and_the_same_clock_and_sources(tmp_path: Path) -> None:
    sources = Sources(imap=lambda a, s: None, pop3=lambda a, s: None)  # type: ignore[arg-type,return-value]
    first = App({}, clock=_Clock(), sources=sources)
    second = first.next_run()
    assert second.run_id != first.run_id
    assert second.clock is first.clock and second.sources is sources


def test_the_real_sources_are_the_imap_and_pop3_clients() -> None:
    from pipeline.sources.imap import ImapSource
    from pipeline.sources.pop3 import Pop3Source

    assert App({}).sources == Sources(imap=ImapSource, pop3=Pop3Source)

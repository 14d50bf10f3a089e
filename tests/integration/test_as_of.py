"""``--as-of SEQ|DATETIME`` on ``search``, ``thread`` and ``query``: answers from
the projections as they stood after an earlier event, replayed into the store's
cache; the live projection file untouched; a purge takes the cache with it."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from pipeline.cli import main
from pipeline.store import MessageStore
from tests.conftest import StepClock
from torture import search_store


def _mail(mid: str, subject: str, *, reply_to: str | None = None) -> bytes:
    head = f"From: ada@example.org\nSubject: {subject}\nMessage-ID: <{mid}>\n"
    head += "Date: Wed, 26 Jun 2024 10:00:00 +0000\n"
    if reply_to:
        head += f"In-Reply-To: <{reply_to}>\n"
    return (head + "\nbody\n").encode()


def run(capsys: pytest.CaptureFixture[str], store: Path, *argv: str) -> tuple[int, str, str]:
    code = main(["--store", str(store), *argv], env={})
    out, err = capsys.readouterr()
    return code, out, err


def _ids(capsys: pytest.CaptureFixture[str], store: Path, *argv: str) -> set[str]:
    code, out, err = run(capsys, store, "search", "*", "--format=ids", *argv)
    assert code == 0, err
    return set(out.split())


@pytest.fixture
def history(tmp_path: Path) -> tuple[Path, int, datetime]:
    """A store whose first 2 events stored a.1 and a.2; then b.1 (a reply to a.1)
    came, and a.2 was deleted. Returns the store, the seq of that first moment and
    an instant between it and the rest."""
    root = tmp_path / "store"
    clock = StepClock(datetime(2026, 1, 1, tzinfo=UTC))
    with MessageStore.open(root, clock=clock, run_id="one") as store:
        store.add(None, _mail("a.1@x", "budget plan"))
        store.add(None, _mail("a.2@x", "secret salary list"))
        then = store.log.last_seq()
        between = clock.t
        store.add(None, _mail("b.1@x", "Re: budget plan", reply_to="a.1@x"))
        store.delete("a.2@x")
    return root, then, between


def _live(root: Path) -> tuple[str, int]:
    path = root / "projections.duckdb"
    return hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns


def test_search_thread_and_query_answer_as_the_store_stood_then(
    history: tuple[Path, int, datetime], capsys: pytest.CaptureFixture[str]
) -> None:
    root, then, between = history
    assert _ids(capsys, root) == {"a.1@x", "b.1@x"}  # (and the live file caught up)
    live = _live(root)
    assert _ids(capsys, root, f"--as-of={then}") == {"a.1@x", "a.2@x"}
    assert _ids(capsys, root, "--as-of", between.isoformat()) == {"a.1@x", "a.2@x"}
    assert _ids(capsys, root, "--as-of", "2026-01-01T00:00:00Z") == set()  # (before any event)
    assert _ids(capsys, root, "--as-of=1") == {"a.1@x"}
    assert _ids(capsys, root, "--as-of=0") == set()
    code, out, _ = run(capsys, root, "thread", "a.1@x", "--json", "--as-of", str(then))
    assert (code, json.loads(out)) == (0, ["a.1@x"])
    code, out, _ = run(capsys, root, "thread", "a.1@x", "--json")
    assert json.loads(out) == ["a.1@x", "b.1@x"]
    sql = "SELECT (SELECT count(*) FROM events) AS e, (SELECT count(*) FROM messages) AS m"
    code, out, _ = run(capsys, root, "query", sql, "--json", "--as-of", str(then))
    assert json.loads(out) == [{"e": then, "m": 2}]
    code, out, _ = run(capsys, root, "query", sql, "--json")
    assert json.loads(out) == [{"e": then + 2, "m": 2}]
    # the live projections were never opened by the answers from the past
    assert _live(root) == live
    assert sorted(p.name for p in (root / "cache").iterdir()) == [
        f"asof-{n}.duckdb" for n in sorted({0, 1, then}, key=str)
    ]


def test_a_seq_the_log_does_not_hold_or_a_bad_date_is_a_usage_error(
    history: tuple[Path, int, datetime], capsys: pytest.CaptureFixture[str]
) -> None:
    root = history[0]
    code, _, err = run(capsys, root, "search", "*", "--as-of=99")
    assert code == 2 and "holds events 1..4" in err
    code, _, err = run(capsys, root, "query", "select 1", "--as-of=yesterday")
    assert code == 2 and "--as-of" in err
    assert not (root / "cache").exists()


def test_a_cached_past_is_used_again_and_rebuilt_when_it_is_not_whole(
    history: tuple[Path, int, datetime], capsys: pytest.CaptureFixture[str]
) -> None:
    root, then, _ = history
    assert _ids(capsys, root, f"--as-of={then}") == {"a.1@x", "a.2@x"}
    cached = root / "cache" / f"asof-{then}.duckdb"
    inode = cached.stat().st_ino
    assert _ids(capsys, root, f"--as-of={then}") == {"a.1@x", "a.2@x"}
    assert cached.stat().st_ino == inode  # (read again, not rebuilt)
    cached.write_bytes(b"half a file")
    assert _ids(capsys, root, f"--as-of={then}") == {"a.1@x", "a.2@x"}
    assert cached.stat().st_ino != inode


def test_a_purge_removes_the_past_that_still_holds_the_erased_message(
    history: tuple[Path, int, datetime], capsys: pytest.CaptureFixture[str]
) -> None:
    root, then, _ = history
    assert _ids(capsys, root, f"--as-of={then}") == {"a.1@x", "a.2@x"}
    needles = {"subject": b"secret salary list"}
    assert any("cache/" in place for place in search_store(root, needles)["subject"])
    assert run(capsys, root, "compact", "--purge")[0] == 0
    assert search_store(root, needles) == {"subject": []}
    assert not (root / "cache").exists()
    # asked again, the past is replayed from the purged log: the message is a pseudonym
    ids = _ids(capsys, root, f"--as-of={then}")
    assert "a.1@x" in ids and "a.2@x" not in ids and len(ids) == 2
    assert search_store(root, needles) == {"subject": []}


def test_the_past_is_refused_while_a_purge_is_unfinished(
    history: tuple[Path, int, datetime], capsys: pytest.CaptureFixture[str]
) -> None:
    root, then, _ = history
    (root / "purge-journal.json").write_text("{}")
    code, _, err = run(capsys, root, "search", "*", f"--as-of={then}")
    assert code == 2 and "purge" in err
    assert not (root / "cache").exists()


def test_what_a_killed_build_of_the_past_left_is_removed_at_the_next_open(
    history: tuple[Path, int, datetime], capsys: pytest.CaptureFixture[str]
) -> None:
    root, then, _ = history
    assert _ids(capsys, root, f"--as-of={then}") == {"a.1@x", "a.2@x"}
    cache = root / "cache"
    for name in ("asof-1.duckdb.building", "asof-3.duckdb.building.stage"):
        (cache / name).write_bytes(b"secret salary list")
    MessageStore.open(root).close()
    assert sorted(p.name for p in cache.iterdir()) == [f"asof-{then}.duckdb"]


def test_full_text_terms_are_refused_as_of_an_earlier_event(
    capsys: pytest.CaptureFixture[str], history: tuple[Path, int, datetime]
) -> None:
    """The full-text index is kept for the present only: a word asked of the past
    is a usage error (exit 2, saying why), never an answer from today's text."""
    root, then, _ = history
    code, _, err = run(capsys, root, "search", "salary", "--as-of", str(then))
    assert code == 2 and "full-text" in err
    assert _ids(capsys, root, "--as-of", str(then)) == {"a.1@x", "a.2@x"}

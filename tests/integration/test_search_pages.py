"""A page of search results read in two steps (its ids, then their columns; for
text, a date window of the full-text index at a time) is the same page as the
whole ordered answer would give, whatever the query, sort, limit and offset;
and ``--sort=relevance`` ranks by FTS5's bm25. Over a store whose dates make the
order hard: many messages in one second, undated ones, dates before 1970, and
Message-IDs that do not follow arrival."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

import projections.queries.search as search_module
from pipeline.cli import main
from pipeline.sources.maildir import import_maildir
from pipeline.store import MessageStore
from projections.queries import compile_query
from projections.search import parse
from tests.conftest import StepClock

NOW = datetime(2024, 7, 1, 12, 0, tzinfo=UTC)


def _date(n: int) -> str | None:
    if n % 7 == 0:
        return None  # undated
    if n % 5 == 0:
        return "Mon, 01 Jan 2024 00:00:00 +0000"  # one second for many
    if n % 11 == 0:
        return f"Tue, 03 Mar 1964 10:{n % 60:02d}:00 +0000"  # before 1970
    return f"Wed, {1 + n % 28:02d} Feb 2023 {n % 24:02d}:{n % 60:02d}:07 +0100"


def _mail(n: int) -> bytes:
    words = ["alpha"] + (["beta"] if n % 2 else []) + (["gamma delta"] if n % 3 else [])
    head = [
        f"From: {'ada' if n % 4 else 'bob'}@example.org",
        "To: team@example.org",
        # ids in the reverse of arrival: a tie within a second is broken by id
        f"Message-ID: <{999 - n:03d}.page@example.org>",
        f"Subject: note {n} {words[-1]}",
    ]
    if (date := _date(n)) is not None:
        head.append(f"Date: {date}")
    return ("\n".join(head) + "\n\n" + " ".join(words) + f" body{n}\n").encode()


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MessageStore]:
    base = tmp_path_factory.mktemp("pages")
    for sub in ("cur", "new", "tmp"):
        (base / "mail" / sub).mkdir(parents=True)
    for n in range(90):
        (base / "mail" / "cur" / f"{n:04d}.page:2,S").write_bytes(_mail(n))
    with MessageStore.open(base / "store", clock=StepClock(), run_id="test-run") as s:
        import_maildir(s, base / "mail")
        yield s


def _ids(store: MessageStore, query: str, **kw: object) -> list[str]:
    plan = compile_query(parse(query, now=NOW))
    table = store.search(plan, "summary", **kw)  # type: ignore[arg-type]
    ids: list[str] = table.column("message_id").to_pylist()
    return ids


QUERIES = [
    "alpha",  # every message: text alone
    "beta",
    '"gamma delta"',
    "beta gamma",
    "beta from:ada",  # text and a structured condition
    "beta -from:ada",
    "alpha -beta",  # a NOT of text beside the driving text
    "beta date:2023",
    "beta OR from:bob",  # no text every match must hold: one query
    "from:ada",  # no text at all
    "nosuchword",
    "id:995.page@example.org",  # read through the message_id index
    "thread:995.page@example.org OR from:bob",
    "thread:{id:994.page@example.org} OR beta",
    "thread:{id:nosuch@example.org}",
]


@pytest.mark.parametrize("query", QUERIES)
@pytest.mark.parametrize("sort", ["newest", "oldest"])
def test_every_page_is_the_slice_of_the_whole_order(
    store: MessageStore, monkeypatch: pytest.MonkeyPatch, query: str, sort: str
) -> None:
    whole = _ids(store, query, sort=sort)
    assert len(whole) == len(set(whole))
    # the smallest windows: a page takes many (a window holds whole seconds)
    monkeypatch.setattr(search_module, "FIRST_WINDOW", 1)
    for limit, offset in [(1, 0), (2, 1), (3, 0), (5, 2), (7, 30), (50, 0), (40, 45), (5, 200)]:
        page = _ids(store, query, sort=sort, limit=limit, offset=offset)
        assert page == whole[offset : offset + limit], (limit, offset)


def test_a_thread_too_large_to_spell_is_read_as_a_table(
    store: MessageStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    query = "thread:995.page@example.org OR from:bob"
    spelled = _ids(store, query, limit=5)
    monkeypatch.setattr(search_module, "INDEX_KEYS_MAX", 0)
    assert _ids(store, query, limit=5) == spelled and len(spelled) == 5
    assert "995.page@example.org" in _ids(store, query)


def test_the_hard_dates_are_there_to_order(store: MessageStore) -> None:
    newest = _ids(store, "alpha")
    assert len(newest) == 90
    undated = {f"{999 - n:03d}.page@example.org" for n in range(90) if n % 7 == 0}
    assert set(newest[-len(undated) :]) == undated  # undated last
    assert sorted(newest[-len(undated) :]) == newest[-len(undated) :]
    one_second = [
        m
        for n, m in ((n, f"{999 - n:03d}.page@example.org") for n in range(90))
        if _date(n) == "Mon, 01 Jan 2024 00:00:00 +0000"
    ]
    assert newest[: len(one_second)] == sorted(one_second)  # newest, ties by id
    oldest = _ids(store, "alpha", sort="oldest")
    assert oldest[0].endswith(".page@example.org") and _date(999 - int(oldest[0][:3])) is not None
    assert "1964" in (_date(999 - int(oldest[0][:3])) or "")


def test_relevance_ranks_by_bm25_then_newest(store: MessageStore, tmp_path: Path) -> None:
    ranked = _ids(store, "gamma", sort="relevance")
    assert set(ranked) == set(_ids(store, "gamma"))
    # every message holds gamma once in the subject and once in the body: the
    # shorter documents rank first, so the order is not the date order
    assert ranked != _ids(store, "gamma")
    # a page of words alone is ranked by SQLite, the same order
    for limit, offset in [(1, 0), (3, 2), (50, 10)]:
        page = _ids(store, "gamma", sort="relevance", limit=limit, offset=offset)
        assert page == ranked[offset : offset + limit]
    assert (
        _ids(store, "beta gamma", sort="relevance", limit=7)
        == _ids(store, "beta gamma", sort="relevance")[:7]
    )
    # a query with no text ranks nothing: newest first
    assert _ids(store, "from:bob", sort="relevance") == _ids(store, "from:bob")
    # the threads output ranks threads by their best match
    plan = compile_query(parse("gamma", now=NOW))
    threads = store.search(plan, "threads", sort="relevance").to_pylist()
    assert len(threads) == len(ranked)


def test_a_subject_word_outranks_a_body_word(tmp_path: Path) -> None:
    mail = tmp_path / "mail"
    for sub in ("cur", "new", "tmp"):
        (mail / sub).mkdir(parents=True)
    texts = {
        "subject": ("Subject: budget\n", "see the sheet\n"),
        "body": ("Subject: weekly notes\n", "the budget is late\n"),
        "newer": ("Subject: weekly notes\n", "nothing on money\n"),
    }
    for day, (name, (subject, body)) in enumerate(texts.items(), start=1):
        raw = f"Message-ID: <{name}@x>\nDate: 0{day} Jan 2024 10:00:00 +0000\n{subject}\n{body}"
        (mail / "cur" / f"{name}:2,S").write_bytes(raw.encode())
    root = tmp_path / "store"
    with MessageStore.open(root, clock=StepClock(), run_id="test-run") as s:
        import_maildir(s, mail)
    code = main(["--store", str(root), "search", "--sort=relevance", "--format=ids", "budget"])
    assert code == 0
    with MessageStore.open(root, clock=StepClock(), run_id="test-run") as s:
        assert _ids(s, "budget", sort="relevance") == ["subject@x", "body@x"]
        assert _ids(s, "budget") == ["body@x", "subject@x"]  # (newest: the body one)

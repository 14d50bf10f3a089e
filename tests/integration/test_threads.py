"""The thread graph (SPEC §3): ghost nodes, gaps, loops, walk order, the DuckDB macro."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.store import MessageStore
from stores.errors import NotFoundError


class StepClock:
    def __init__(self) -> None:
        self._t = datetime(2026, 6, 26, 9, 0, tzinfo=UTC)

    def now(self) -> datetime:
        self._t += timedelta(seconds=1)
        return self._t


@pytest.fixture
def store(tmp_path: Path):  # type: ignore[no-untyped-def]
    s = MessageStore.open(tmp_path / "store", clock=StepClock())
    yield s
    s.close()


def mail(
    mid: str,
    *,
    irt: str | None = None,
    refs: str | None = None,
    date: str | None = "Fri, 26 Jun 2026 10:00:00 +0000",
) -> bytes:
    """A small raw message; ``irt`` / ``refs`` are header values as written."""
    lines = [f"Message-ID: <{mid}>", "From: joe@example.com", f"Subject: about {mid}"]
    if date is not None:
        lines.append(f"Date: {date}")
    if irt is not None:
        lines.append(f"In-Reply-To: {irt}")
    if refs is not None:
        lines.append(f"References: {refs}")
    return ("\r\n".join(lines) + "\r\n\r\nbody of " + mid + "\r\n").encode()


def day(n: int) -> str:
    return f"{n:02d} Jun 2026 10:00:00 +0000"  # the day-of-week is optional in RFC 2822


def add_all(store: MessageStore, *raws: bytes) -> None:
    for i, raw in enumerate(raws):
        store.add(f"uidl-{i}", raw)


def macro_ids(store: MessageStore, mid: str) -> list[str]:
    return store.query(f"select message_id from thread('<{mid}>')").column(0).to_pylist()


def test_replies_to_a_parent_never_stored_join_one_thread_through_a_ghost(
    store: MessageStore,
) -> None:
    add_all(
        store,
        mail("b@x", irt="<ghost@x>", date=day(2)),
        mail("c@x", irt="<ghost@x>", date=day(3)),
        mail("lonely@x", date=day(1)),
    )
    assert store.walk_thread("b@x") == ["b@x", "c@x"]
    assert store.walk_thread("c@x") == ["b@x", "c@x"]
    assert store.walk_thread("lonely@x") == ["lonely@x"]
    stats = store.stats()
    assert (stats["threads"], stats["ghosts"]) == (2, 1)


def test_walking_from_a_ghost_id_returns_the_stored_messages_of_its_thread(
    store: MessageStore,
) -> None:
    add_all(store, mail("b@x", irt="<ghost@x>", date=day(2)), mail("c@x", refs="<ghost@x>"))
    assert store.walk_thread("ghost@x") == ["b@x", "c@x"]
    assert store.walk_thread("<ghost@x>") == ["b@x", "c@x"]


def test_a_thread_whose_middle_message_was_deleted_holds_together_via_references(
    store: MessageStore,
) -> None:
    add_all(
        store,
        mail("a@x", date=day(1)),
        mail("b@x", irt="<a@x>", refs="<a@x>", date=day(2)),
        mail("c@x", irt="<b@x>", refs="<a@x> <b@x>", date=day(3)),
    )
    assert store.delete("b@x", reason="handled")
    assert store.walk_thread("a@x") == ["a@x", "c@x"]
    assert store.walk_thread("c@x") == ["a@x", "c@x"]
    assert store.walk_thread("b@x") == ["a@x", "c@x"]  # now a ghost, still walkable
    assert store.stats()["threads"] == 1


def test_a_deleted_message_linked_only_by_in_reply_to_stays_a_ghost_joining_its_replies(
    store: MessageStore,
) -> None:
    add_all(store, mail("a@x", date=day(1)), mail("b@x", irt="<a@x>", date=day(2)))
    store.delete("a@x")
    assert store.walk_thread("b@x") == ["b@x"]
    assert store.walk_thread("a@x") == ["b@x"]


def test_in_reply_to_alone_chains_a_whole_thread(store: MessageStore) -> None:
    add_all(
        store,
        mail("a@x", date=day(1)),
        mail("b@x", irt="<a@x>", date=day(2)),
        mail("c@x", irt="<b@x>", date=day(3)),
        mail("d@x", irt="<c@x>", date=day(4)),
    )
    for start in ("a@x", "b@x", "c@x", "d@x"):
        assert store.walk_thread(start) == ["a@x", "b@x", "c@x", "d@x"]


def test_references_in_the_wrong_order_still_join_the_thread(store: MessageStore) -> None:
    add_all(
        store,
        mail("c@x", refs="<b@x> <a@x>", date=day(3)),  # newest first, and stored first
        mail("a@x", date=day(1)),
        mail("b@x", refs="<a@x>", date=day(2)),
    )
    assert store.walk_thread("a@x") == ["a@x", "b@x", "c@x"]


def test_a_reply_stored_before_its_parent_is_joined_when_the_parent_arrives(
    store: MessageStore,
) -> None:
    add_all(store, mail("b@x", irt="<a@x>", date=day(2)))
    assert store.stats()["ghosts"] == 1
    add_all(store, mail("a@x", date=day(1)))
    assert store.walk_thread("b@x") == ["a@x", "b@x"]
    assert store.stats()["ghosts"] == 0


def test_a_reference_loop_terminates(store: MessageStore) -> None:
    add_all(
        store,
        mail("a@x", refs="<b@x>", date=day(1)),
        mail("b@x", refs="<a@x>", irt="<a@x>", date=day(2)),
    )
    assert store.walk_thread("a@x") == ["a@x", "b@x"]
    assert store.walk_thread("b@x") == ["a@x", "b@x"]
    assert store.stats()["threads"] == 1


def test_a_self_reference_terminates_and_makes_a_thread_of_one(store: MessageStore) -> None:
    add_all(store, mail("a@x", irt="<a@x>", refs="<a@x> <a@x>"))
    assert store.walk_thread("a@x") == ["a@x"]
    assert store.query("select * from thread_edges").num_rows == 0
    assert store.stats()["threads"] == 1


def test_walk_returns_stored_messages_in_date_order_undated_last(store: MessageStore) -> None:
    add_all(
        store,
        mail("late@x", irt="<root@x>", date=day(9)),
        mail("nodate@x", irt="<root@x>", date=None),
        mail("baddate@x", irt="<root@x>", date="not a date"),
        mail("early@x", irt="<root@x>", date=day(1)),
        # 23:30 -0200 on the 4th is 01:30 UTC on the 5th: ordered by the UTC instant
        mail("offset@x", irt="<root@x>", date="Thu, 04 Jun 2026 23:30:00 -0200"),
        mail("mid@x", irt="<root@x>", date="Fri, 05 Jun 2026 00:30:00 +0000"),
    )
    want = ["early@x", "mid@x", "offset@x", "late@x", "baddate@x", "nodate@x"]
    assert store.walk_thread("root@x") == want
    assert store.walk_thread("nodate@x") == want  # the start is always included


def test_walking_an_unknown_id_raises_not_found(store: MessageStore) -> None:
    add_all(store, mail("a@x"))
    with pytest.raises(NotFoundError):
        store.walk_thread("nobody@x")


def test_walking_a_deleted_message_that_nothing_references_raises_not_found(
    store: MessageStore,
) -> None:
    add_all(store, mail("a@x"), mail("b@x", irt="<ghost@x>"))
    store.delete("a@x")
    store.delete("b@x")
    for gone in ("a@x", "b@x", "ghost@x"):
        with pytest.raises(NotFoundError):
            store.walk_thread(gone)
    assert store.stats()["threads"] == 0


def test_the_thread_macro_returns_the_same_ids_as_walk_thread(store: MessageStore) -> None:
    add_all(
        store,
        mail("a@x", date=day(1)),
        mail("b@x", irt="<a@x>", date=None),
        mail("c@x", irt="<b@x>", refs="<ghost@x> <a@x>", date=day(3)),
        mail("d@x", refs="<ghost@x>", date=day(2)),
        mail("other@x", date=day(1)),
    )
    store.delete("b@x")
    for start in ("a@x", "c@x", "d@x", "ghost@x", "b@x", "other@x"):
        assert macro_ids(store, start) == store.walk_thread(start), start
    assert macro_ids(store, "nobody@x") == []


def test_stats_counts_connected_components_holding_a_stored_message(
    store: MessageStore,
) -> None:
    add_all(
        store,
        # thread 1: a <- b, and c joined through the ghost g1
        mail("a@x"),
        mail("b@x", irt="<a@x>"),
        mail("c@x", refs="<g1@x> <a@x>"),
        # thread 2: d alone, pointing at ghost g2
        mail("d@x", irt="<g2@x>"),
        # thread 3: e alone
        mail("e@x"),
        # f points at g3; f is then deleted: no stored message left there
        mail("f@x", irt="<g3@x>"),
    )
    assert store.stats()["threads"] == 4
    store.delete("f@x")
    assert store.stats()["threads"] == 3
    store.delete("a@x")  # a becomes a ghost; b and c still hold thread 1 together
    assert store.stats()["threads"] == 3
    assert store.walk_thread("b@x") == ["b@x", "c@x"]
    stored = (
        store.query(
            "select count(distinct thread_id) from thread_nodes join messages using (message_id)"
        )
        .column(0)[0]
        .as_py()
    )
    assert stored == store.stats()["threads"]


def test_threads_survive_a_reindex_unchanged(store: MessageStore) -> None:
    add_all(
        store,
        mail("a@x", date=day(1)),
        mail("b@x", irt="<a@x>", refs="<b@x>", date=day(2)),
        mail("c@x", refs="<b@x> <zz@x>", date=day(3)),
    )
    store.delete("a@x")
    before = {m: store.walk_thread(m) for m in ("a@x", "b@x", "c@x", "zz@x")}
    store.reindex()
    assert {m: store.walk_thread(m) for m in before} == before


def test_thread_macro_accepts_an_id_with_a_comment_like_walk_thread(store: MessageStore) -> None:
    store.add("u1", b"Message-ID: <root@x>\nSubject: a\n\nbody\n")
    store.add("u2", b"Message-ID: <reply@x>\nIn-Reply-To: <root@x>\nSubject: Re: a\n\nbody\n")
    ids = store.query("select message_id from thread(' <reply@x> (a comment)')")
    assert sorted(ids.column("message_id").to_pylist()) == ["reply@x", "root@x"]
    assert sorted(store.walk_thread(" <reply@x> (a comment)")) == ["reply@x", "root@x"]


def _reference_components(
    stored: list[str], children: list[str], parents: list[str]
) -> dict[str, str]:
    """A plain union-find: each node's component labelled by its smallest id."""
    parent = {x: x for x in [*stored, *children, *parents]}

    def find(x: str) -> str:
        while parent[x] != x:
            x = parent[x]
        return x

    for c, p in zip(children, parents, strict=True):
        rc, rp = find(c), find(p)
        if rc != rp:
            parent[max(rc, rp)] = min(rc, rp)
    return {x: find(x) for x in parent}


@settings(deadline=None)
@given(
    st.lists(st.sampled_from("abcdefghij"), max_size=6),
    st.lists(
        st.tuples(st.sampled_from("abcdefghijklé€𝄞"), st.sampled_from("abcdefghijklé€𝄞")),
        max_size=25,
    ),
)
def test_vectorized_components_equal_a_plain_union_find(
    stored: list[str], edges: list[tuple[str, str]]
) -> None:
    """The vectorized fold labels each node with its component's smallest id
    (code point order, non-ASCII ids included), exactly as a textbook union-find."""
    import pyarrow as pa

    from projections.fold import components

    children = [c for c, _ in edges]
    parents = [p for _, p in edges]
    nodes, labels = components(
        pa.array(stored, pa.string()),
        pa.array(children, pa.string()),
        pa.array(parents, pa.string()),
    )
    expected = _reference_components(stored, children, parents)
    assert nodes.to_pylist() == sorted(expected)
    assert dict(zip(nodes.to_pylist(), labels.to_pylist(), strict=True)) == expected

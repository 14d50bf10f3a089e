"""Projections: incremental folding equals a full replay, and the fold's rules (SPEC §3)."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from pipeline.store import MessageStore
from projections import snapshot
from projections.fold import applied_seq, apply, apply_chunks, rebuild
from projections.tables import TABLES, fingerprint, parts_of
from stores.events import (
    CursorMoved,
    Event,
    FlagsChanged,
    LocationVanished,
    MessageDeleted,
    MessageSeen,
    UidvalidityChanged,
)
from stores.log import EventLog

T0 = datetime(2026, 6, 26, 9, 0, tzinfo=UTC)
RUN = "20260626T090000Z-test0001"


class StepClock:
    """An injected clock: each ``now()`` is one second after the previous one."""

    def __init__(self, start: datetime = T0) -> None:
        self._t = start

    def now(self) -> datetime:
        self._t += timedelta(seconds=1)
        return self._t


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def seen(
    mid: str,
    *,
    at: datetime = T0,
    source: str = "imap-a",
    folder: str = "INBOX",
    uidvalidity: int | None = 7,
    uid: int | None = 1,
    uidl: str | None = None,
    irt: str | None = None,
    refs: Sequence[str] = (),
    subject: str | None = "hello",
    date: datetime | None = T0,
    sha: str | None = None,
    from_addr: str | None = "joe@example.com",
    to_addrs: Sequence[str] = ("ann@example.com",),
    flags: tuple[str, ...] | None = None,
) -> MessageSeen:
    return MessageSeen(
        run_id=RUN, recorded_at=at, source=source, folder=folder, uidvalidity=uidvalidity,
        uid=uid, uidl=uidl, message_id=mid, sha256=sha or _sha(mid), size=100,
        headers=(("Message-ID", f"<{mid}>"), ("Subject", subject or "")),
        date_utc=date, date_offset_min=0 if date else None, from_addr=from_addr,
        to_addrs=tuple(to_addrs), in_reply_to=irt, references=tuple(refs),
        list_id=None, subject=subject, flags=flags,
    )  # fmt: skip


def deleted(mid: str, *, at: datetime = T0, reason: str = "test") -> MessageDeleted:
    return MessageDeleted(run_id=RUN, recorded_at=at, message_id=mid, actor="test", reason=reason)


def moved(
    folder: str, uidvalidity: int, frm: int | None, to: int, *, at: datetime = T0,
    source: str = "imap-a", mode: str = "delta", reason: str = "new mail", run_id: str = RUN,
    uidnext: int | None = None,
) -> CursorMoved:  # fmt: skip
    return CursorMoved(
        run_id=run_id, recorded_at=at, source=source, folder=folder, uidvalidity=uidvalidity,
        cursor_from=frm, cursor_to=to, mode=mode, reason=reason, uidnext=uidnext,
    )  # fmt: skip


def uidv_changed(
    folder: str, old: int | None, new: int, *, at: datetime = T0, source: str = "imap-a"
) -> UidvalidityChanged:
    return UidvalidityChanged(
        run_id=RUN, recorded_at=at, source=source, folder=folder, old_uidvalidity=old,
        new_uidvalidity=new, action="rescan",
    )  # fmt: skip


def vanished(ev: MessageSeen, *, at: datetime = T0) -> LocationVanished:
    return LocationVanished(
        run_id=RUN, recorded_at=at, source=ev.source, folder=ev.folder,
        message_id=ev.message_id, uidvalidity=ev.uidvalidity, uid=ev.uid, uidl=ev.uidl,
        reason="reconcile",
    )  # fmt: skip


def flags_changed(ev: MessageSeen, flags: tuple[str, ...], *, at: datetime = T0) -> FlagsChanged:
    return FlagsChanged(
        run_id=RUN, recorded_at=at, source=ev.source, folder=ev.folder,
        message_id=ev.message_id, uidvalidity=ev.uidvalidity, uid=ev.uid, uidl=ev.uidl,
        flags=flags,
    )  # fmt: skip


def open_store(root: Path, **kw: Any) -> MessageStore:
    store = MessageStore.open(root, clock=StepClock(), **kw)
    store.log.durable = False  # fsync is not what these tests are about
    return store


def tables_of(db_path: Path) -> dict[str, str]:
    con = duckdb.connect(str(db_path), read_only=True)
    try:
        return fingerprint(con)
    finally:
        con.close()


def replay(log_root: Path, chunks: int = 1, how: str = "chunks") -> duckdb.DuckDBPyConnection:
    """A fresh in-memory projection database folded from the whole log.

    ``how`` picks the path: "chunks" (the events handed over chunk by chunk,
    built at once), "files" (DuckDB reads the log's Parquet files itself) or
    "folded" (no rebuild: the incremental fold of every chunk as one batch on
    empty tables).
    """
    log = EventLog(log_root)
    table = log.read()
    size = max(1, -(-table.num_rows // chunks))
    con = duckdb.connect()
    parts = (table.slice(o, size) for o in range(0, table.num_rows, size))
    if how == "files":
        rebuild(con, parts, files=[f.path for f in log.files()])
    elif how == "folded":
        rebuild(con, [])
        apply_chunks(con, parts)
    else:
        rebuild(con, parts)
    return con


def rows(con: duckdb.DuckDBPyConnection, table: str) -> list[tuple[Any, ...]]:
    return con.execute(f"SELECT * FROM {table} ORDER BY ALL").fetchall()


def assert_same_tables(
    have: duckdb.DuckDBPyConnection, want: duckdb.DuckDBPyConnection, what: str = ""
) -> None:
    """Equal fingerprints, table by table; on a mismatch name the table and show its rows."""
    fa, fb = fingerprint(have), fingerprint(want)
    assert set(fa) == set(TABLES) == set(fb)
    bad = [t for t in TABLES if fa[t] != fb[t]]
    if bad:
        detail = "\n".join(
            f"table {t!r} differs {what}:\n  incremental: {rows(have, t)}\n"
            f"  replay:      {rows(want, t)}"
            for t in bad
        )
        pytest.fail(detail)


# ---------------------------------------------------------------------------
# The key invariant: incremental folding == full replay, for any event sequence
# ---------------------------------------------------------------------------

POOL = [f"m{i}@pool" for i in range(5)]
GHOSTS = ["ghost1@nowhere", "ghost2@nowhere"]
FOLDERS = ["INBOX", "Archive"]
SUBJECTS = [None, "hello", "Re: hello", "Fwd: RE: Hello", "other"]
DATES = [None, T0, T0 + timedelta(hours=20), T0 - timedelta(days=3)]

_pool = st.sampled_from(POOL)
_ref = st.sampled_from(POOL + GHOSTS)

_flags = st.one_of(
    st.none(),
    st.sampled_from([(), ("\\Seen",), ("\\Flagged", "\\Seen"), ("\\Answered",)]),
)
_seen_op = st.tuples(
    st.just("seen"),
    _pool,
    st.one_of(st.none(), _ref),  # In-Reply-To: pool, ghost, self, or none
    st.lists(_ref, max_size=3),  # References: may hold self, loops, wrong order
    st.sampled_from(SUBJECTS),
    st.sampled_from(DATES),
    # the location: (source, folder, uidvalidity, uid, uidl); few of them, so they repeat
    st.one_of(
        st.tuples(
            st.just("imap-a"),
            st.sampled_from(FOLDERS),
            st.sampled_from([1, 2]),
            st.integers(1, 3),
            st.none(),
        ),
        st.tuples(st.just("pop"), st.just(""), st.none(), st.none(), st.sampled_from(["u1", "u2"])),
    ),
    st.integers(0, 1),  # content variant: same id, different bytes now and then
    _flags,  # what the source showed of its flags: none (mbox, POP3), or a set
)
_deleted_op = st.tuples(st.just("deleted"), _pool)
_moved_op = st.tuples(
    st.just("moved"),
    st.sampled_from(FOLDERS),
    st.sampled_from([1, 2]),
    st.integers(0, 9),
    st.sampled_from(["full", "delta", "reconcile"]),
)
_uidv_op = st.tuples(st.just("uidv"), st.sampled_from(FOLDERS), st.sampled_from([1, 2, 3]))
_vanish_op = st.tuples(st.just("vanish"), st.integers(0, 50))
_flags_op = st.tuples(st.just("flags"), st.integers(0, 50), _flags.filter(bool))

_ops = st.lists(
    st.one_of(
        _seen_op, _seen_op, _seen_op, _deleted_op, _moved_op, _uidv_op, _vanish_op, _flags_op
    ),
    min_size=1,
    max_size=30,
)


def materialize(ops: Sequence[tuple[Any, ...]]) -> list[Event]:
    """Events for abstract ops; a vanish picks a location seen earlier in the sequence."""
    clock = StepClock()
    events: list[Event] = []
    seen_at: list[MessageSeen] = []
    cursor: dict[str, int | None] = {}
    uidv: dict[str, int | None] = {}
    for op in ops:
        at = clock.now()
        kind = op[0]
        if kind == "seen":
            _, mid, irt, refs, subject, date, place, variant, *shown = op
            src, folder, uv, uid, uidl = place
            ev = seen(
                mid, at=at, source=src, folder=folder, uidvalidity=uv, uid=uid, uidl=uidl,
                irt=irt, refs=refs, subject=subject, date=date, sha=_sha(f"{mid}/{variant}"),
                flags=shown[0] if shown else None,
            )  # fmt: skip
            seen_at.append(ev)
            events.append(ev)
        elif kind == "deleted":
            events.append(deleted(op[1], at=at))
        elif kind == "moved":
            _, folder, uv, to, mode = op
            if uidv.get(folder, uv) != uv:
                # a sync records a UIDVALIDITY change before it moves the cursor under
                # the new one: the commit's cursor compare-and-set (stores.fence)
                # refuses a move that starts from a cursor of another UIDVALIDITY
                events.append(uidv_changed(folder, uidv[folder], uv, at=at))
                cursor[folder] = None
            events.append(moved(folder, uv, cursor.get(folder), to, at=at, mode=mode))
            cursor[folder], uidv[folder] = to, uv
        elif kind == "uidv":
            _, folder, new = op
            events.append(uidv_changed(folder, uidv.get(folder), new, at=at))
            cursor[folder], uidv[folder] = None, new
        elif kind == "vanish" and seen_at:
            events.append(vanished(seen_at[op[1] % len(seen_at)], at=at))
        elif kind == "flags" and seen_at:
            events.append(flags_changed(seen_at[op[1] % len(seen_at)], op[2], at=at))
    return events


def split(events: Sequence[Event], cuts: Sequence[bool]) -> Iterator[list[Event]]:
    """Commit batches: a batch ends after event i when ``cuts[i]`` (cycled) is True."""
    batch: list[Event] = []
    for ev, cut in zip(events, itertools.cycle(cuts or [True]), strict=False):
        batch.append(ev)
        if cut:
            yield batch
            batch = []
    if batch:
        yield batch


def check_incremental_equals_replay(
    root: Path,
    ops: Sequence[tuple[Any, ...]],
    cuts: Sequence[bool],
    merges: Sequence[bool] = (False,),
) -> None:
    """Commit the events of ``ops`` in the batches ``cuts`` makes; after batch i,
    the split tables' deltas are merged into their bases when ``merges[i]``
    (cycled), so that later folds meet rows in both parts. The tables must be a
    replay's."""
    events = materialize(ops)
    store = open_store(root)
    try:
        # a read first creates the empty tables, so even the first batch is applied
        # incrementally rather than by the initial build
        assert store.message_ids() == []
        for batch, merge in zip(split(events, cuts), itertools.cycle(merges), strict=False):
            store.commit(batch)
            if merge:
                store.projector.merge_deltas()
    finally:
        store.close()
    have = duckdb.connect(str(root / "projections.duckdb"), read_only=True)
    want = replay(root / "log")
    try:
        assert applied_seq(have) == applied_seq(want) == len(events)
        assert_same_tables(have, want, "after incremental commits")
        # the rebuild's other two paths give the same tables as well
        for how in ("files", "folded"):
            other = replay(root / "log", how=how)
            try:
                assert applied_seq(other) == len(events)
                assert_same_tables(other, want, f"replayed from {how}")
            finally:
                other.close()
    finally:
        have.close()
        want.close()


# A location-vanished, then another message at that same location, all in one replay chunk.
_VANISH_THEN_NEW_CONTENT = (
    [
        ("seen", "m0@pool", None, [], "hello", T0, ("pop", "", None, None, "u1"), 0),
        ("vanish", 0),
        ("seen", "m1@pool", None, [], "hello", T0, ("pop", "", None, None, "u1"), 0),
    ],
    [True],
)


# Flags shown at a place, changed there, the content seen again without flags (an
# import that shows none: the last known stay) and with others, a change of
# flags for a place whose content has changed since: cut between every event.
_INBOX1 = ("imap-a", "INBOX", 1, 1, None)
_FLAGS_CHANGING = (
    [
        ("seen", "m0@pool", None, [], "a", T0, _INBOX1, 0, ("\\Seen",)),
        ("flags", 0, ("\\Flagged", "\\Seen")),
        ("seen", "m0@pool", None, [], "a", T0, _INBOX1, 0, None),
        ("flags", 1, ("\\Answered",)),
        ("seen", "m1@pool", None, [], "b", T0, _INBOX1, 0, ()),
        ("flags", 0, ("\\Seen",)),
        ("seen", "m0@pool", None, [], "a", T0, _INBOX1, 0, ("\\Draft",)),
    ],
    [True],
)


@settings(
    # ~0.3 s an example; MAILLEDGER_PROPERTY_EXAMPLES=2000 for a long hunt
    max_examples=int(os.environ.get("MAILLEDGER_PROPERTY_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    ops=_ops,
    cuts=st.lists(st.booleans(), min_size=1, max_size=30),
    merge_at=st.integers(min_value=-1, max_value=30),
)
@example(*_VANISH_THEN_NEW_CONTENT, -1)
@example(*_FLAGS_CHANGING, 3)
@example(_FLAGS_CHANGING[0], [False], -1)
def test_incremental_commits_give_the_same_tables_as_a_full_replay(
    tmp_path_factory: pytest.TempPathFactory,
    ops: list[tuple[Any, ...]],
    cuts: list[bool],
    merge_at: int,
) -> None:
    """Whatever the batches, and wherever the deltas are merged into the bases
    between them (after batch ``merge_at``; -1: never)."""
    assume(materialize(ops))  # a lone vanish of nothing seen yet makes no event
    merges = [i == merge_at for i in range(32)]
    root = tmp_path_factory.mktemp("prop") / "store"
    check_incremental_equals_replay(root, ops, cuts, merges)


def test_a_vanish_before_new_content_at_the_same_location_replays_like_it_was_applied(
    tmp_path: Path,
) -> None:
    check_incremental_equals_replay(tmp_path / "store", *_VANISH_THEN_NEW_CONTENT)


def test_replay_in_any_chunking_gives_the_same_tables(tmp_path: Path) -> None:
    ops = [
        ("seen", "m0@pool", None, ["ghost1@nowhere"], "hi", T0, ("imap-a", "INBOX", 1, 1, None), 0),
        ("seen", "m1@pool", "m0@pool", ["m1@pool"], None, None, ("imap-a", "INBOX", 1, 2, None), 0),
        ("deleted", "m0@pool"),
        ("vanish", 1),
        ("moved", "INBOX", 1, 2, "full"),
        ("seen", "m0@pool", "m1@pool", [], "Re: hi", T0, ("imap-a", "Archive", 1, 1, None), 1),
        ("uidv", "INBOX", 2),
        ("seen", "m1@pool", None, [], "x", T0, ("imap-a", "INBOX", 1, 2, None), 0),
    ]  # fmt: skip
    store = open_store(tmp_path / "store")
    store.commit(materialize(ops))
    store.close()
    one = replay(tmp_path / "store" / "log", chunks=1)
    for n in range(2, len(ops) + 1):
        assert_same_tables(replay(tmp_path / "store" / "log", chunks=n), one, f"in {n} chunks")


def _assert_tables_of_a_replay(root: Path, what: str) -> None:
    """The projections of the store at ``root`` are those a replay of its log makes."""
    have = duckdb.connect(str(root / "projections.duckdb"), read_only=True)
    want = replay(root / "log")
    try:
        assert_same_tables(have, want, what)
    finally:
        have.close()
        want.close()


# Deletions, threads merged, a vanish and sightings at known places.
_MIXED = [
    ("seen", "m0@pool", None, ["ghost1@nowhere"], "hi", T0, ("imap-a", "INBOX", 1, 1, None), 0),
    ("seen", "m1@pool", "m0@pool", ["m1@pool"], None, None, ("imap-a", "INBOX", 1, 2, None), 0),
    ("seen", "m2@pool", "m1@pool", ["m0@pool"], "Re", T0, ("imap-a", "INBOX", 1, 3, None), 2),
    ("deleted", "m0@pool"),
    ("vanish", 1),
    ("seen", "m0@pool", "m1@pool", [], "Re: hi", T0, ("imap-a", "Archive", 1, 1, None), 1),
    ("seen", "m3@pool", "m2@pool", ["m0@pool", "m1@pool"], "Re: hi", T0,
     ("imap-a", "INBOX", 1, 4, None), 3),
    ("deleted", "m2@pool"),
    ("seen", "m1@pool", None, [], "x", T0, ("imap-a", "INBOX", 1, 2, None), 0),
]  # fmt: skip


@pytest.mark.parametrize(
    ("chunk", "ratio"), [(1, 0), (2, 0), (2, 10**9)], ids=["probed-1", "probed-2", "scanned"]
)
def test_a_fold_probing_its_keys_in_chunks_gives_the_tables_of_a_replay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int, ratio: int
) -> None:
    """A fold with more keys than one statement's literals probes the indexes a
    chunk at a time (``probed``, ``delete_where_in``) or scans a table too small
    for that (``PROBE_RATIO``): stored rows found, threads merged, deletions and
    sightings at known places folded as by a replay, either way."""
    from projections.fold import probes

    monkeypatch.setattr(probes, "INDEX_KEYS_MAX", chunk)
    monkeypatch.setattr(probes, "PROBE_RATIO", ratio)
    check_incremental_equals_replay(tmp_path / "store", _MIXED, [False, False, True])


@pytest.mark.parametrize("merges", [[True], [False, True], [True, False, False]])
def test_folds_over_rows_in_the_bases_and_the_deltas_give_the_tables_of_a_replay(
    tmp_path: Path, merges: list[bool]
) -> None:
    """Deletions, threads merged and locations seen again, where the rows they
    touch lie in the bases (merged), in the deltas, or in both."""
    check_incremental_equals_replay(tmp_path / "store", _MIXED, [True], merges)


# m0 seen twice, deleted twice (the second finds nothing stored), seen again
# with m1, both deleted, m0 seen once more: seqs 1..9.
_REMOVED = [
    ("seen", "m0@pool", None, [], "a", T0, ("imap-a", "INBOX", 1, 1, None), 0),
    ("seen", "m0@pool", None, [], "a", T0, ("imap-a", "Archive", 1, 1, None), 0),
    ("deleted", "m0@pool"),
    ("deleted", "m0@pool"),
    ("seen", "m0@pool", None, [], "b", T0, ("imap-a", "INBOX", 1, 2, None), 1),
    ("seen", "m1@pool", None, [], "c", T0, ("imap-a", "INBOX", 1, 3, None), 0),
    ("deleted", "m0@pool"),
    ("seen", "m0@pool", None, [], "d", T0, ("imap-a", "INBOX", 1, 4, None), 2),
    ("deleted", "m1@pool"),
]  # fmt: skip


@pytest.mark.parametrize(
    "cuts",
    [[False], [True], *([False] * i + [True] + [False] * (8 - i) for i in range(8))],
    ids=["one-batch", "each-event", *(f"cut-after-{i + 1}" for i in range(8))],
)
def test_each_removal_of_a_stored_message_is_recorded_whatever_the_batches(
    tmp_path: Path, cuts: list[bool]
) -> None:
    """``removals``: a row per deletion that removed a stored message, with the
    winning seq it removed, also when the message was seen and deleted within
    one batch; a deletion of nothing stored makes none."""
    root = tmp_path / "store"
    check_incremental_equals_replay(root, _REMOVED, cuts)
    con = duckdb.connect(str(root / "projections.duckdb"), read_only=True)
    try:
        assert rows(con, "removals") == [(1, 3), (5, 7), (6, 9)]
        assert con.execute("SELECT message_id, seq FROM messages").fetchall() == [("m0@pool", 8)]
    finally:
        con.close()


def test_compact_merges_the_deltas_into_the_bases(tmp_path: Path) -> None:
    """What the folds appended moves into the bases (and their filters) at
    ``compact`` (a rebuild); later folds still find the rows, as a replay does."""
    from projections.fold import deltas

    root = tmp_path / "store"
    store = open_store(root)
    events = materialize(_MIXED)
    try:
        assert store.message_ids() == []
        store.commit(events[:5])
        con = store.projector.writer()
        assert deltas.delta_rows(con) > 0
        store.compact()
        con = store.projector.writer()
        assert deltas.delta_rows(con) == 0
        assert con.execute("SELECT count(*) FROM base_filters").fetchall() == [(2,)]
        assert not store.projector.merge_deltas()  # (nothing left to merge)
        store.commit(events[5:])
    finally:
        store.close()
    _assert_tables_of_a_replay(root, "after compact and later folds")


def test_folds_of_many_keys_over_filtered_bases_give_the_tables_of_a_replay(
    tmp_path: Path,
) -> None:
    """A fold of more keys than ``FILTER_FROM`` asks the bases only for the keys
    their Bloom filters let through: replies to, sightings again of, and deletions
    of messages in the bases are all found, as by a replay."""
    from projections import filters

    def seen(i: int, parent: int | None, uid: int) -> tuple[Any, ...]:
        refs = [] if parent is None else [f"m{parent}@pool"]
        return ("seen", f"m{i}@pool", refs[0] if refs else None, refs, f"s{i % 7}", T0,
                ("imap-a", "INBOX", 1, uid, None), 0)  # fmt: skip

    first = [seen(i, i - 1 if i % 3 else None, i + 1) for i in range(120)]
    later = [seen(120 + i, i, 200 + i) for i in range(100)]  # replies into the base
    later += [seen(i, None, i + 1) for i in range(0, 120, 2)]  # the same places again
    later += [("deleted", f"m{i}@pool") for i in range(1, 120, 3)]
    later += [seen(500 + i, 120 + i, 400 + i) for i in range(80)]  # into the delta
    assert len(later) > filters.FILTER_FROM
    root = tmp_path / "store"
    events = materialize(first + later)
    store = open_store(root)
    try:
        assert store.message_ids() == []
        store.commit(events[: len(first)])
        assert store.projector.merge_deltas()
        store.commit(events[len(first) :])
    finally:
        store.close()
    _assert_tables_of_a_replay(root, "folds over filtered bases")


def test_lookups_after_a_rebuild_read_its_filters_not_those_read_before(
    tmp_path: Path,
) -> None:
    """A process keeps the filters it read under their rebuild's stamp: after
    another rebuild moves new rows into the bases, a lookup of those rows (more
    than ``FILTER_FROM`` keys, so the filters are used) finds every one of them,
    and the delta and base parts give the same answer as a scan of the view."""
    from projections import filters

    def seen(i: int) -> tuple[Any, ...]:
        return ("seen", f"m{i}@pool", None, [], f"s{i}", T0, ("imap-a", "INBOX", 1, i + 1, None), 0)

    first = [f"m{i}@pool" for i in range(100)]
    later = [f"m{i}@pool" for i in range(100, 200)]
    assert len(later) > filters.FILTER_FROM
    events = materialize([seen(i) for i in range(200)])
    store = open_store(tmp_path / "store")
    try:
        store.commit(events[:100])  # (into an empty store: a rebuild, into the bases)
        store.projector.merge_deltas()
        assert sorted(store.stored_ids(first + later)) == sorted(first)  # (filters read)
        store.commit(events[100:])
        assert store.projector.merge_deltas()  # (the later ones now in the bases)
        assert sorted(store.stored_ids(later)) == sorted(later)
        places = [("INBOX", 1, i + 1, None) for i in range(200)]
        assert len(store.locations_at("imap-a", places)) == 200
    finally:
        store.close()


def test_filters_of_a_store_rebuilt_before_the_stamps_get_one_at_the_next_write(
    tmp_path: Path,
) -> None:
    """A store whose rebuild left no stamp (made before them) gets one when a
    writer next opens it, and lookups through its filters still find every row."""
    from projections.filters import STAMP

    root = tmp_path / "store"
    places = [("imap-a", "INBOX", 1, i + 1, None) for i in range(150)]
    events = materialize(
        [("seen", f"m{i}@pool", None, [], "s", T0, places[i], 0) for i in range(150)]
    )
    store = open_store(root)
    try:
        store.commit(events[:100])
    finally:
        store.close()
    con = duckdb.connect(str(root / "projections.duckdb"))
    assert con.execute("SELECT count(*) FROM meta WHERE key = ?", [STAMP]).fetchall() == [(1,)]
    con.execute("DELETE FROM meta WHERE key = ?", [STAMP])
    con.close()
    store = open_store(root)
    try:
        store.commit(events[100:])
        ids = [f"m{i}@pool" for i in range(150)]
        assert sorted(store.stored_ids(ids)) == sorted(ids)
    finally:
        store.close()
    con = duckdb.connect(str(root / "projections.duckdb"), read_only=True)
    assert con.execute("SELECT count(*) FROM meta WHERE key = ?", [STAMP]).fetchall() == [(1,)]
    con.close()


def test_a_base_filter_lets_every_key_of_its_base_through(tmp_path: Path) -> None:
    """No false negative: every id and location key of the bases passes its
    filter; most keys the bases do not hold do not."""
    from projections import filters

    con = duckdb.connect(str(tmp_path / "p.duckdb"))
    from projections.tables import create_tables

    create_tables(con)
    ids = [f"<{i}.{i * 7919 % 1000}@example.org>" for i in range(5000)]
    con.register("_ids", pa.table({"v": pa.array(ids)}))
    con.execute("INSERT INTO thread_nodes_base SELECT v, v FROM _ids")
    con.execute(
        "INSERT INTO locations_base (loc_key, sha256, message_id, first_seq, last_seq, vanished)"
        " SELECT v, 'x', v, 1, 1, false FROM _ids"
    )
    filters.build_filters(con)
    for table, column in (("messages", "message_id"), ("thread_nodes", "thread_id"),
                          ("locations", "loc_key")):  # fmt: skip
        assert filters.in_base(con, table, column, sorted(ids)) == sorted(ids)
    absent = [f"<new-{i}@example.org>" for i in range(5000)]
    assert len(filters.in_base(con, "messages", "message_id", absent)) < 100  # 0.24% expected
    con.close()


# ---------------------------------------------------------------------------
# Replay is deterministic, reindex restores, verify detects drift
# ---------------------------------------------------------------------------


def _populated_store(root: Path) -> MessageStore:
    store = open_store(root)
    store.commit(
        [
            seen("a@x", uid=1, subject="Live wire"),
            seen("b@x", uid=2, irt="a@x", refs=["a@x"], subject="Re: Live wire"),
            seen("c@x", uid=3, refs=["ghost@x", "b@x"], date=None),
        ]
    )
    store.commit([moved("INBOX", 7, None, 3, mode="full", reason="initial")])
    store.commit([deleted("b@x"), seen("a@x", folder="Archive", uid=9)])
    return store


def test_replaying_twice_gives_byte_identical_fingerprints(tmp_path: Path) -> None:
    _populated_store(tmp_path / "store").close()
    first = fingerprint(replay(tmp_path / "store" / "log"))
    second = fingerprint(replay(tmp_path / "store" / "log"))
    assert first == second
    store = open_store(tmp_path / "store")
    store.reindex()
    store.close()
    once = tables_of(tmp_path / "store" / "projections.duckdb")
    store.reindex()
    store.close()
    assert tables_of(tmp_path / "store" / "projections.duckdb") == once == first


def test_reindex_after_deleting_the_projection_file_restores_identical_tables(
    tmp_path: Path,
) -> None:
    root = tmp_path / "store"
    _populated_store(root).close()
    before = tables_of(root / "projections.duckdb")
    (root / "projections.duckdb").unlink()
    Path(str(root / "projections.duckdb") + ".wal").unlink(missing_ok=True)
    store = open_store(root)
    assert store.reindex() == 6
    store.close()
    assert tables_of(root / "projections.duckdb") == before


def test_verify_is_empty_on_a_healthy_store(tmp_path: Path) -> None:
    store = _populated_store(tmp_path / "store")
    assert store.verify(blobs=False) == []
    store.close()


def _drop_from_header_index(con: duckdb.DuckDBPyConnection) -> str:
    """Remove a@x's From entry from the header index, whatever table holds it."""
    base = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    if "header_keys" in base:  # one row per key with its ids in a string; header_index a view
        con.execute(
            "UPDATE header_keys SET message_ids = array_to_string("
            " list_filter(string_split(message_ids, ' '), lambda m: m <> 'a@x'), ' ')"
            " WHERE key LIKE 'from' || chr(31) || '%'"
            " AND list_contains(string_split(message_ids, ' '), 'a@x')"
        )
        return "header_keys"
    hit = sum(
        con.execute(f"DELETE FROM {part} WHERE message_id = 'a@x' AND header = 'from'").fetchall()[
            0
        ][0]
        for part in parts_of("header_index")
    )
    assert hit >= 1
    return "header_index"


def _sql(statement: str, table: str) -> Any:
    """Tamper with every part of ``table`` (``{t}`` in ``statement``)."""

    def tamper(con: duckdb.DuckDBPyConnection) -> str:
        hit = sum(
            con.execute(statement.format(t=part)).fetchall()[0][0] for part in parts_of(table)
        )
        assert hit >= 1  # the tamper hit a row
        return table

    return tamper


@pytest.mark.parametrize(
    "tamper",
    [
        _drop_from_header_index,
        _sql("UPDATE {t} SET subject_key = 'drifted' WHERE message_id = 'c@x'", "messages"),
        _sql("DELETE FROM {t} WHERE message_id = 'ghost@x'", "thread_nodes"),
        _sql("UPDATE {t} SET vanished = true", "locations"),
        _sql("UPDATE {t} SET last_uid = 99", "cursors"),
    ],
    ids=["header-index", "subject-key", "thread-node", "location", "cursor"],
)
def test_verify_names_the_projection_table_that_drifted(tmp_path: Path, tamper: Any) -> None:
    root = tmp_path / "store"
    _populated_store(root).close()
    con = duckdb.connect(str(root / "projections.duckdb"))
    before = fingerprint(con)
    table = tamper(con)
    assert fingerprint(con) != before
    con.close()
    store = open_store(root)
    problems = store.verify(blobs=False)
    store.close()
    assert problems == [f"projection table {table!r} differs from a fresh replay of the log"]


# ---------------------------------------------------------------------------
# Primary store semantics
# ---------------------------------------------------------------------------


def _index_rows(store: MessageStore, mid: str) -> list[tuple[str, str]]:
    t = store.query(
        "SELECT header, value FROM header_index WHERE message_id = ? ORDER BY ALL", [mid]
    )
    return list(zip(t.column("header").to_pylist(), t.column("value").to_pylist(), strict=True))


def test_the_first_message_seen_of_an_id_wins_and_later_ones_only_add_locations(
    tmp_path: Path,
) -> None:
    store = open_store(tmp_path / "store")
    t1, t2 = T0, T0 + timedelta(hours=1)
    store.commit([seen("a@x", at=t1, subject="first", uid=1)])
    store.commit([seen("a@x", at=t2, subject="second", folder="Archive", uid=5, sha=_sha("2"))])
    rec = store.get("a@x")
    assert rec is not None
    assert (rec["subject"], rec["folder"], rec["uid"], rec["seq"]) == ("first", "INBOX", 1, 1)
    assert rec["indexed_at"] == t1
    assert store.find("subject", "second") == []
    locs = store.query("SELECT folder, uid FROM locations ORDER BY folder").to_pylist()
    assert locs == [{"folder": "Archive", "uid": 5}, {"folder": "INBOX", "uid": 1}]
    store.close()


def test_the_first_message_seen_wins_within_one_batch_too(tmp_path: Path) -> None:
    store = open_store(tmp_path / "store")
    store.commit([seen("a@x", subject="first"), seen("a@x", subject="second", uid=2)])
    assert store.get("a@x")["subject"] == "first"  # type: ignore[index]
    store.close()


def test_delete_removes_the_record_and_every_index_entry(tmp_path: Path) -> None:
    store = open_store(tmp_path / "store")
    store.commit([seen("a@x", irt="p@x", refs=["r@x"], subject="Re: Hi")])
    assert ("subject", "hi") in _index_rows(store, "a@x")
    assert len(_index_rows(store, "a@x")) == 6  # subject from to date in-reply-to references
    store.commit([deleted("a@x")])
    assert store.get("a@x") is None
    assert _index_rows(store, "a@x") == []
    assert store.find("subject", "hi") == []
    assert store.message_ids() == []
    assert store.query("SELECT * FROM thread_edges").num_rows == 0
    store.close()


def test_a_message_seen_after_a_delete_brings_it_back_with_the_new_events_data(
    tmp_path: Path,
) -> None:
    store = open_store(tmp_path / "store")
    store.commit([seen("a@x", subject="old", uid=1)])
    store.commit([deleted("a@x")])
    later = T0 + timedelta(days=1)
    store.commit([seen("a@x", at=later, subject="new", folder="Archive", uid=4, irt="q@x")])
    rec = store.get("a@x")
    assert rec is not None
    assert (rec["subject"], rec["folder"], rec["seq"], rec["indexed_at"]) == (
        "new", "Archive", 3, later,
    )  # fmt: skip
    assert store.find("subject", "old") == []
    assert store.find("subject", "new") == ["a@x"]
    assert store.find("in-reply-to", "q@x") == ["a@x"]
    store.close()


def test_delete_and_reseen_in_one_batch_takes_the_later_event(tmp_path: Path) -> None:
    store = open_store(tmp_path / "store")
    store.commit([seen("a@x", subject="old")])
    store.commit([deleted("a@x"), seen("a@x", subject="new", uid=2), seen("a@x", subject="3rd")])
    assert store.get("a@x")["subject"] == "new"  # type: ignore[index]
    store.close()


def test_deleting_an_id_never_stored_changes_no_table(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = open_store(root)
    store.commit([seen("a@x")])
    store.close()
    before = tables_of(root / "projections.duckdb")
    store = open_store(root)
    store.commit([deleted("nobody@x")])
    store.close()
    after = tables_of(root / "projections.duckdb")
    assert {t: d for t, d in after.items() if t != "meta"} == {
        t: d for t, d in before.items() if t != "meta"
    }


def test_applying_the_same_batch_twice_changes_nothing(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "log", durable=False)
    con = duckdb.connect(str(tmp_path / "p.duckdb"))
    rebuild(con, [])
    b1 = log.append([seen("a@x"), seen("b@x", irt="a@x", uid=2), moved("INBOX", 7, None, 2)])
    assert apply(con, b1) == 3
    b2 = log.append([deleted("a@x"), vanished(seen("b@x", uid=2)), uidv_changed("INBOX", 7, 8)])
    assert apply(con, b2) == 6
    once = fingerprint(con)
    assert apply(con, b2) == 6
    assert apply(con, b1) == 6
    assert apply(con, pa.concat_tables([b1, b2])) == 6
    assert fingerprint(con) == once
    assert applied_seq(con) == 6
    con.close()


def test_a_batch_overlapping_what_was_applied_folds_only_the_new_events(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "log", durable=False)
    con = duckdb.connect()
    rebuild(con, [])
    b1 = log.append([seen("a@x")])
    apply(con, b1)
    b2 = log.append([deleted("a@x")])
    assert apply(con, pa.concat_tables([b1, b2])) == 2  # a@x is not seen a second time
    assert con.execute("SELECT count(*) FROM messages").fetchall() == [(0,)]
    assert_same_tables(con, replay(tmp_path / "log"))


def test_a_log_file_duckdb_cannot_read_is_read_from_the_chunks_instead(tmp_path: Path) -> None:
    """A file gone by the time DuckDB reads it (a compaction replaced it): the
    rebuild reads the events handed over instead, and gives the same tables."""
    store = _populated_store(tmp_path / "store")
    store.close()
    log = EventLog(tmp_path / "store" / "log")
    want = replay(log.root)
    con = duckdb.connect()
    files = [f.path for f in log.files()]
    last = rebuild(con, [log.read()], files=[*files, tmp_path / "gone.parquet"])
    assert last == log.last_seq() > 0
    assert_same_tables(con, want, "after a failed read of the files")


def test_a_log_file_gone_after_the_rebuild_began_is_read_from_the_chunks_instead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The builders read the log's files where they lie: a file gone midway (a
    compaction replaced it after the first read) fails a builder's read; the
    rebuild starts over from the events handed over, and gives the same tables."""
    from projections.fold import bulk

    store = _populated_store(tmp_path / "store")
    store.close()
    log = EventLog(tmp_path / "store" / "log")
    want = replay(log.root)
    chunks = [log.read()]
    files = [tmp_path / f.path.name for f in log.files()]
    for f, copy in zip(log.files(), files, strict=True):
        copy.write_bytes(f.path.read_bytes())
    real = bulk.stage_files

    def then_gone(con: duckdb.DuckDBPyConnection, paths: list[Path]) -> int | None:
        last = real(con, paths)
        assert last is not None  # (read once: the files were there)
        files[-1].unlink()
        return last

    monkeypatch.setattr(bulk, "stage_files", then_gone)
    con = duckdb.connect()
    assert rebuild(con, chunks, files=files) == log.last_seq() > 0
    assert "failed to read" in caplog.text  # (the builders did meet the gone file)
    assert_same_tables(con, want, "after a file went midway")


def test_a_damaged_log_file_fails_the_rebuild_with_its_name(tmp_path: Path) -> None:
    from stores.errors import LogIntegrityError

    store = _populated_store(tmp_path / "store")
    store.close()
    victim = EventLog(tmp_path / "store" / "log").files()[0].path
    data = bytearray(victim.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 64] = b"\xff" * 64
    victim.write_bytes(bytes(data))
    # at open, or at the rebuild's read
    with pytest.raises(LogIntegrityError) as err, MessageStore.open(tmp_path / "store") as store:
        store.reindex()
    assert victim.name in str(err.value)


def test_a_batch_past_a_gap_is_refused(tmp_path: Path) -> None:
    from stores.errors import LogIntegrityError

    log = EventLog(tmp_path / "log", durable=False)
    con = duckdb.connect()
    rebuild(con, [])
    log.append([seen("a@x")])
    b2 = log.append([seen("b@x")])
    with pytest.raises(LogIntegrityError):
        apply(con, b2)
    assert applied_seq(con) == 0


# ---------------------------------------------------------------------------
# Locations
# ---------------------------------------------------------------------------


def _location(store: MessageStore, uid: int) -> dict[str, Any]:
    found = store.query("SELECT * FROM locations WHERE uid = ?", [uid]).to_pylist()
    assert len(found) == 1
    return found[0]


def test_a_vanished_location_is_marked_but_its_message_stays(tmp_path: Path) -> None:
    store = open_store(tmp_path / "store")
    ev = seen("a@x", uid=4)
    store.commit([ev, seen("b@x", uid=5)])
    store.commit([vanished(ev)])
    loc = _location(store, 4)
    assert loc["vanished"] is True
    assert loc["vanished_seq"] == 3
    assert _location(store, 5)["vanished"] is False
    assert store.get("a@x") is not None
    assert store.find("from", "joe@example.com") == ["a@x", "b@x"]
    store.close()


def test_a_location_seen_again_after_vanishing_is_not_vanished(tmp_path: Path) -> None:
    store = open_store(tmp_path / "store")
    ev = seen("a@x", uid=4)
    store.commit([ev])
    store.commit([vanished(ev)])
    store.commit([seen("a@x", uid=4)])
    loc = _location(store, 4)
    assert (loc["vanished"], loc["first_seq"], loc["last_seq"]) == (False, 1, 3)
    store.close()


def test_vanished_then_seen_again_in_one_batch_is_not_vanished(tmp_path: Path) -> None:
    store = open_store(tmp_path / "store")
    ev = seen("a@x", uid=4)
    store.commit([ev])
    store.commit([vanished(ev), seen("a@x", uid=4)])
    assert _location(store, 4)["vanished"] is False
    store.close()


# ---------------------------------------------------------------------------
# Sync cursors
# ---------------------------------------------------------------------------


def _cursor(store: MessageStore, folder: str) -> dict[str, Any]:
    found = store.query(
        "SELECT uidvalidity, last_uid, uidnext, mode, seq FROM cursors"
        " WHERE account = 'imap-a' AND folder = ?",
        [folder],
    ).to_pylist()
    assert len(found) == 1
    return found[0]


def test_cursor_moved_sets_last_uid_and_uidvalidity(tmp_path: Path) -> None:
    store = open_store(tmp_path / "store")
    store.commit([moved("INBOX", 7, None, 10, mode="full", uidnext=11)])
    store.commit([moved("INBOX", 7, 10, 15, mode="delta", uidnext=16)])
    assert _cursor(store, "INBOX") == {
        "uidvalidity": 7, "last_uid": 15, "uidnext": 16, "mode": "delta", "seq": 2,
    }  # fmt: skip
    store.close()


def test_uidvalidity_changed_sets_the_new_uidvalidity_and_clears_last_uid(
    tmp_path: Path,
) -> None:
    store = open_store(tmp_path / "store")
    store.commit([moved("INBOX", 7, None, 10), moved("Archive", 3, None, 2)])
    store.commit([uidv_changed("INBOX", 7, 8)])
    cur = _cursor(store, "INBOX")
    assert (cur["uidvalidity"], cur["last_uid"], cur["seq"]) == (8, None, 3)
    assert _cursor(store, "Archive")["last_uid"] == 2  # other folders untouched
    store.commit([moved("INBOX", 8, None, 4, mode="full", reason="rescan")])
    assert (_cursor(store, "INBOX")["uidvalidity"], _cursor(store, "INBOX")["last_uid"]) == (8, 4)
    store.close()


def test_cursor_log_lists_every_move_of_one_folder_in_seq_order(tmp_path: Path) -> None:
    store = open_store(tmp_path / "store")
    store.commit([moved("INBOX", 7, None, 10, mode="full", reason="initial", run_id="run-1")])
    store.commit([moved("Archive", 7, None, 3, run_id="run-1"), seen("a@x")])
    store.commit([moved("INBOX", 7, 10, 12, mode="delta", reason="2 new", run_id="run-2")])
    store.commit([uidv_changed("INBOX", 7, 9)])
    store.commit([moved("INBOX", 9, None, 5, mode="full", reason="rescan", run_id="run-3")])
    log = store.cursor_log("imap-a", "INBOX")
    brief = [
        (e["seq"], e["type"], e["run_id"], e["mode"], e["cursor_from"], e["cursor_to"], e["reason"])
        for e in log
    ]
    assert brief == [
        (1, "cursor-moved", "run-1", "full", None, 10, "initial"),
        (4, "cursor-moved", "run-2", "delta", 10, 12, "2 new"),
        (5, "uidvalidity-changed", RUN, "full", None, None, None),
        (6, "cursor-moved", "run-3", "full", None, 5, "rescan"),
    ]
    assert (log[2]["old_uidvalidity"], log[2]["new_uidvalidity"]) == (7, 9)
    assert [e["seq"] for e in store.cursor_log("imap-a", "Archive")] == [2]
    assert store.cursor_log("imap-a", "Nowhere") == []
    store.close()


@given(
    st.lists(
        st.none()
        | st.datetimes(
            min_value=datetime(1, 1, 1),
            max_value=datetime(9999, 12, 31, 23, 59, 59),
            timezones=st.just(UTC),
        ),
        max_size=30,
    )
)
def test_vectorized_date_keys_match_the_query_side_rule(dates: list[datetime | None]) -> None:
    from projections.fold import date_columns
    from projections.normalize import date_key

    day, iso = date_columns(pa.array(dates, pa.timestamp("us", tz="UTC")))
    assert day.to_pylist() == [date_key(d) for d in dates]
    assert iso.to_pylist() == [
        f"{d.year:04d}-{d.month:02d}-{d.day:02d}T{d.hour:02d}:{d.minute:02d}:{d.second:02d}Z"
        if d
        else None
        for d in dates
    ]


@given(st.lists(st.none() | st.text(max_size=40), max_size=30))
def test_subject_keys_cached_per_distinct_value_match_normalize_subject(
    subjects: list[str | None],
) -> None:
    from projections.fold import subject_keys
    from projections.normalize import normalize_subject

    got = subject_keys(pa.array(subjects, pa.string()))
    assert got.to_pylist() == [normalize_subject(s) for s in subjects]


def test_a_fold_carries_over_the_snapshot_pools_of_folders_it_did_not_touch(
    tmp_path: Path,
) -> None:
    """The cursor snapshot is rewritten after every fold; the pools of held UIDs of
    folders no folded event named are carried over, not probed again (a store of
    hundreds of folders would otherwise probe each at every fold). A pool marked in
    the file shows which were carried; a deletion has every pool drawn again."""
    root = tmp_path / "s"
    with open_store(root) as s:
        s.commit([seen(f"a{u}", folder="A", uid=u) for u in range(1, 4)] + [moved("A", 7, None, 3)])
        s.commit([seen(f"b{u}", folder="B", uid=u) for u in range(1, 4)] + [moved("B", 7, None, 3)])
    path = root / snapshot.SNAPSHOT_NAME

    def pools() -> dict[str, list[list[Any]]]:
        return {f["folder"]: f["held"] for f in json.loads(path.read_text())["folders"]}

    assert [u for u, *_ in pools()["A"]] == [1, 2, 3] and len(pools()["B"]) == 3
    doc = json.loads(path.read_text())
    for f in doc["folders"]:
        f["held"] = [[u, "marked", sha, size] for u, _, sha, size in f["held"]]
    path.write_text(json.dumps(doc))

    with open_store(root) as s:
        s.commit([seen("a4", folder="A", uid=4), moved("A", 7, 3, 4)])
    after = pools()
    assert {mid for _, mid, *_ in after["B"]} == {"marked"}  # carried over
    assert {mid for _, mid, *_ in after["A"]} == {"a1", "a2", "a3", "a4"}  # drawn again

    with open_store(root) as s:
        s.commit([deleted("b2")])
    after = pools()
    assert {mid for _, mid, *_ in after["B"]} == {"b1", "b2", "b3"}  # (held: only the record went)
    assert "marked" not in {mid for f in after.values() for _, mid, *_ in f}

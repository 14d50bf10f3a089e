"""The store's fence (``stores.fence``): one committer at a time, enforced by the
store itself. A stale writer epoch is refused, a cursor advances only from where
it stands, a log file is never replaced; a refused batch leaves nothing behind."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipeline.store import MessageStore
from stores.errors import CursorMovedError, FencedError, LogIntegrityError, StaleEpochError
from stores.events import CursorMoved, Event, UidvalidityChanged
from stores.log.files import EPOCH_KEY, PRODUCER_KEY
from tests.conftest import StepClock


def _raw(i: int) -> bytes:
    return (
        f"From: a{i}@example.org\r\nTo: me@example.org\r\nSubject: mail {i}\r\n"
        f"Message-ID: <m{i}@example.org>\r\n\r\nbody {i}\r\n"
    ).encode()


def _moved(store: MessageStore, start: int | None, to: int, *, uv: int = 7) -> CursorMoved:
    return store.events.cursor_moved(
        source="acct", folder="INBOX", uidvalidity=uv, cursor_from=start, cursor_to=to,
        uidnext=to + 1, mode="delta" if start else "full", reason="test",
    )  # fmt: skip


def _uidv(store: MessageStore, old: int | None, new: int) -> UidvalidityChanged:
    return store.events.uidvalidity_changed(
        source="acct", folder="INBOX", old=old, new=new, action="alarm; full rescan", mode="full"
    )


def _open(root: Path) -> MessageStore:
    return MessageStore.open(root, clock=StepClock(), run_id="r")


def test_a_committer_whose_epoch_was_taken_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with _open(root) as first, _open(root) as second:
        assert first.take_epoch("first") == 1
        first.commit([_moved(first, None, 5)])
        assert second.take_epoch("second") == 2  # a new committer: the first is fenced
        before = first.log.last_seq()
        with pytest.raises(StaleEpochError, match=r"epoch 1 is stale.*2 \(taken by second\)"):
            first.commit([_moved(first, 5, 9)])
        assert first.log.last_seq() == before
        assert first.cursor("acct", "INBOX")["last_uid"] == 5  # type: ignore[index]
        second.commit([_moved(second, 5, 9)])
        newest = second.log.files()[-1]
        assert pq.read_schema(newest.path).metadata[EPOCH_KEY] == b"2"  # stamped
    with _open(root) as again:  # durable: the next committer gets a higher number
        assert again.take_epoch("third") == 3


def test_a_producers_epoch_fences_only_its_own_earlier_attempts(tmp_path: Path) -> None:
    """Kafka keys a producer's epoch by its transactional id; a cluster's sync task
    by its account: tasks of two accounts on one shard commit side by side, and a
    second attempt at one account fences the first."""
    root = tmp_path / "store"
    with _open(root) as a1, _open(root) as b1, _open(root) as a2:
        assert a1.take_epoch("task a, attempt 1", producer="acct-a") == 1
        assert b1.take_epoch("task b", producer="acct-b") == 1
        a1.add("u1", _raw(1))
        b1.add("u2", _raw(2))  # another account: not fenced by a1
        assert a2.take_epoch("task a, attempt 2", producer="acct-a") == 2
        with pytest.raises(StaleEpochError, match=r"acct-a's is 2 \(taken by task a, attempt 2"):
            a1.add("u3", _raw(3))
        b1.add("u4", _raw(4))
        a2.add("u3", _raw(3))
        assert a1.log.fence.current().epoch == 0  # the store's own epoch: untouched
        assert sorted(a2.message_ids()) == [f"m{i}@example.org" for i in (1, 2, 3, 4)]
        newest = a2.log.files()[-1]
        meta = pq.read_schema(newest.path).metadata
        assert (meta[EPOCH_KEY], meta[PRODUCER_KEY]) == (b"2", b"acct-a")


def test_a_writer_that_took_no_epoch_is_serialized_by_the_lock_alone(tmp_path: Path) -> None:
    """One person's cron sync or a `delete` beside a committer: as before the fence."""
    root = tmp_path / "store"
    with _open(root) as committer, _open(root) as plain:
        committer.take_epoch("committer")
        plain.add("u1", _raw(1), source="api", folder="INBOX")
        committer.add("u2", _raw(2), source="api", folder="INBOX")
        assert sorted(plain.message_ids()) == ["m1@example.org", "m2@example.org"]


def test_a_cursor_advances_only_from_where_it_stands(store: MessageStore) -> None:
    store.commit([_moved(store, None, 10)])
    with pytest.raises(CursorMovedError, match="started from uidvalidity=7 cursor=None"):
        store.commit([_moved(store, None, 10)])  # the same first sync, again
    store.commit([_moved(store, 10, 20)])
    with pytest.raises(CursorMovedError, match="stands at uidvalidity=7 cursor=20"):
        store.commit([_moved(store, 10, 25)])  # planned on a cursor moved since
    with pytest.raises(CursorMovedError):
        store.commit([_moved(store, 20, 30, uv=8)])  # another UIDVALIDITY
    assert [c["last_uid"] for c in store.folder_cursors("acct")] == [20]
    moves = store.query("SELECT count(*) AS n FROM events WHERE type = 'cursor-moved'")
    assert moves.to_pylist() == [{"n": 2}]


def test_a_uidvalidity_change_is_recorded_once(store: MessageStore) -> None:
    store.commit([_moved(store, None, 10)])
    store.commit([_uidv(store, 7, 8)])
    with pytest.raises(CursorMovedError, match="a UIDVALIDITY change from 7"):
        store.commit([_uidv(store, 7, 8)])
    # the rescan after it starts from the old cursor or none: either is where it stands
    store.commit([_moved(store, 10, 40, uv=8)])
    with pytest.raises(CursorMovedError):  # a second rescan of the same change
        store.commit([_moved(store, 10, 40, uv=8)])
    assert store.cursor("acct", "INBOX")["last_uid"] == 40  # type: ignore[index]


def test_a_refused_batch_loses_all_its_events_and_the_store_stays_whole(
    store: MessageStore,
) -> None:
    """A batch is one commit: its messages do not land when its cursor move is refused."""
    store.commit([_moved(store, None, 3)])
    before = store.log.last_seq()
    from pipeline.parse import parse_message

    seen = store.events.seen(parse_message(_raw(9)), source="acct", folder="INBOX", uidl=None)
    with pytest.raises(FencedError):
        store.commit([seen, _moved(store, None, 3)])
    assert store.log.last_seq() == before
    assert store.get("m9@example.org") is None
    assert store.verify(blobs=False) == []


def _commit_once(root: str, barrier: multiprocessing.synchronize.Barrier) -> str:
    """One run of a task: the same batch, planned from the same cursor."""
    with _open(Path(root)) as store:
        batch: list[Event] = [_moved(store, 10, 20)]
        barrier.wait()
        try:
            store.commit(batch)
        except CursorMovedError:
            return "refused"
        return "committed"


def test_a_task_run_twice_at_once_commits_once(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with _open(root) as store:
        store.commit([_moved(store, None, 10)])
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Manager().Barrier(4)
    with ctx.Pool(4) as pool:
        outcomes = pool.starmap(_commit_once, [(str(root), barrier)] * 4)
    assert sorted(outcomes) == ["committed", "refused", "refused", "refused"]
    with _open(root) as store:
        assert store.cursor("acct", "INBOX")["last_uid"] == 20  # type: ignore[index]
        n = store.query("SELECT count(*) AS n FROM events WHERE type = 'cursor-moved'")
        assert n.to_pylist() == [{"n": 2}]


def test_a_commit_never_replaces_a_log_file(
    store: MessageStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer that bypassed the lock (a lock lost on a network file system: no
    real part here loses one, so the other writer is planted inside the critical
    section, after the listing) wrote the same seqs first: the commit is refused,
    that file is left as it was."""
    store.add("u1", _raw(1))
    nxt = store.log.last_seq() + 1
    planted = store.log.root / f"{nxt:020d}-{nxt:020d}.parquet"
    check_epoch = store.log.fence.check_epoch

    def other_writer_meanwhile(*args: object) -> int:
        planted.write_bytes(b"another writer's file")
        return check_epoch(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(store.log.fence, "check_epoch", other_writer_meanwhile)
    with pytest.raises(LogIntegrityError, match="never replaces a log file"):
        store.log.append([_moved(store, None, 1)])
    assert planted.read_bytes() == b"another writer's file"
    assert not [p for p in store.log.root.iterdir() if p.name.startswith(".tmp-")]


def test_the_fence_cursors_are_rebuilt_from_the_log(tmp_path: Path) -> None:
    """They are derived: deleted (or behind the log), the log restores them."""
    root = tmp_path / "store"
    with _open(root) as store:
        store.commit([_moved(store, None, 10)])
        # events appended without the comparison (a tool, a test): the fence catches up
        store.log.append([_moved(store, 10, 15)])
    (root / "fence" / "cursors.json").unlink()
    with _open(root) as store:
        with pytest.raises(CursorMovedError, match="cursor=15"):
            store.commit([_moved(store, 10, 20)])
        store.commit([_moved(store, 15, 20)])
        assert store.log.fence.cursor("acct", "INBOX") == (7, 20)

"""Crash campaign: ``kill -9`` at random moments of import, sync, compact, purge, replay.

Each operation runs as the real ``mailledger`` command in its own process
group; after a random delay (uniform over the length of an uninterrupted run)
the whole group gets SIGKILL. After every kill, on a copy of the store (the
original stays exactly as the kill left it, for the re-run):

- the log opens (``MessageStore.open`` checks every file) and ``verify``
  passes: log digests, blobs of stored messages, projections = a fresh replay;
- no message is lost or doubled against the source: stored Message-IDs are
  distinct, all belong to the source, none committed before the trial is gone,
  and no location is recorded twice;
- no cursor is ahead of the data: every server UID at or below a cursor has its
  message durable in the store (sync);
- what the operation must not change did not change (compact, purge, replay:
  the stored messages, the events or their skeleton, the cursors and their audit);
- no process of the group survives.

Trials chain like a person re-running a killed command: the next trial re-runs
the same command on the same store, until a run finishes on its own; the
finished store is then checked in full (everything there exactly once, a
second run adds nothing) and the next trial starts on a fresh store. Every
chain is run to completion at the end, so every interrupted command is shown
to complete when re-run.

A kill *landed mid-operation* when the store after it is strictly between the
store before the trial and the finished store (some durable progress, not all).
"""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

from torture import (
    Result,
    cli_argv,
    cli_main,
    dovecot_server,
    group_pids,
    kill_group,
    maildir_raws,
    run_cli,
    search_store,
    source_ids,
    spawn_cli,
    stdlib_id_count,
)

__all__ = ["FULL_TRIALS", "OPERATIONS", "QUICK_TRIALS", "SEED", "main"]

FULL_TRIALS = 500
QUICK_TRIALS = 25
SEED = 20261130
OPERATIONS = ("import", "sync", "compact", "purge", "replay")

N_MESSAGES = 300
BATCH = 10


class TrialFailure(AssertionError):
    pass


def _require(cond: bool, what: str) -> None:
    if not cond:
        raise TrialFailure(what)


@dataclass
class Facts:
    """What a store holds, read through the product's own API (on a copy)."""

    ids: set[str]
    seen_events: int
    last_seq: int
    cursors: dict[tuple[str, str], tuple[int | None, int | None]]
    cursor_log: list[tuple[Any, ...]]
    skeleton: list[tuple[Any, ...]]
    files: int
    journal: bool
    rebuild_stamp: int | None
    fingerprint: dict[str, str] = field(default_factory=dict)


_SKELETON = (
    "seq, type, run_id, recorded_at, source, folder, uidvalidity, uid, uidl, sha256, size,"
    " cursor_from, cursor_to, uidnext, mode, old_uidvalidity, new_uidvalidity"
)


def inspect(store: Path, expected: set[str] | None) -> Facts:
    """Open ``store`` and run the checks every crashed or finished store must pass."""
    from pipeline.store import MessageStore
    from projections.tables import fingerprint

    leftover = store / "projections.duckdb.rebuild"
    rebuild_stamp = leftover.stat().st_mtime_ns if leftover.exists() else None
    st = MessageStore.open(store, create=False)  # refuses a damaged log, naming the file
    try:
        problems = st.verify()
        _require(problems == [], f"verify: {problems}")
        n, d = (
            st.query("SELECT count(*), count(DISTINCT message_id) FROM messages")
            .to_pylist()[0]
            .values()
        )
        _require(n == d, f"a message is held twice ({n} rows, {d} ids)")
        ids = set(st.message_ids())
        if expected is not None:
            stray = ids - expected
            _require(not stray, f"holds ids the source never had: {sorted(stray)[:3]}")
        dup = st.query(
            "SELECT count(*) AS n FROM (SELECT source, folder, uidvalidity, uid, uidl, sha256"
            " FROM events WHERE type = 'message-seen' GROUP BY ALL HAVING count(*) > 1)"
        ).to_pylist()[0]["n"]
        _require(dup == 0, f"{dup} locations recorded twice")
        seen = st.query("SELECT count(*) AS n FROM events WHERE type = 'message-seen'")
        cursors = {
            (r["account"], r["folder"]): (r["uidvalidity"], r["last_uid"])
            for r in st.query("SELECT * FROM cursors").to_pylist()
        }
        cursor_log = [
            tuple(r.values())
            for r in st.query(
                "SELECT seq, source, folder, uidvalidity, cursor_from, cursor_to, mode, reason,"
                " run_id FROM events WHERE type IN ('cursor-moved', 'uidvalidity-changed')"
                " ORDER BY seq"
            ).to_pylist()
        ]
        skeleton = [
            tuple(r.values())
            for r in st.query(f"SELECT {_SKELETON} FROM events ORDER BY seq").to_pylist()
        ]
        files = st.log.files()
        with st.session():
            fp = fingerprint(st.projector.reader())
        return Facts(
            ids=ids,
            seen_events=seen.to_pylist()[0]["n"],
            last_seq=st.log.last_seq(),
            cursors=cursors,
            cursor_log=cursor_log,
            skeleton=skeleton,
            files=len(files),
            journal=st.purge_journal.exists(),
            rebuild_stamp=rebuild_stamp,
            fingerprint=fp,
        )
    finally:
        st.close()


def _copy(store: Path, to: Path) -> Path:
    shutil.rmtree(to, ignore_errors=True)
    if store.exists():
        shutil.copytree(store, to, symlinks=True)
    return to


# -- the operations -------------------------------------------------------------------


class Operation:
    """One command under test: how to set up a store, run it, and judge it."""

    name = ""

    def __init__(self, work: Path, rng: random.Random, scale: float = 1.0) -> None:
        self.work = work
        self.rng = rng
        self.scale = scale  # sizes of sources and stores (0.5 for the quick slice)
        self.n = 0

    def size(self, n: int) -> int:
        return max(20, int(n * self.scale))

    def setup(self) -> None:
        """Once per campaign: sources, templates."""

    def teardown(self) -> None:
        pass

    def fresh(self) -> Path:
        """A new subject store."""
        self.n += 1
        return self.work / f"{self.name}-{self.n}"

    def argv(self, store: Path) -> list[str]:
        raise NotImplementedError

    env: dict[str, str] | None = None
    ok_codes: tuple[int, ...] = (0,)

    def expected(self) -> set[str] | None:
        return None

    def progress(self, f: Facts | None) -> int:
        """A number that grows with the operation's durable progress."""
        raise NotImplementedError

    def complete(self) -> int:
        raise NotImplementedError

    def check_crashed(self, before: Facts | None, after: Facts | None, store: Path) -> None:
        """Checks beyond ``inspect`` after a kill."""

    def check_finished(self, f: Facts, store: Path, out: Path) -> None:
        """Checks of a store whose command ran to its end."""


class ImportOp(Operation):
    name = "import"

    def setup(self) -> None:
        from testkit.corpus import write_maildir

        self.src = self.work / "source-maildir"
        write_maildir(self.src, self.size(N_MESSAGES), seed=self.rng.randrange(1 << 30))
        raws = maildir_raws(self.src)
        self.ids = source_ids(raws)
        self.locations = len(raws)
        _require(stdlib_id_count(raws) == len(self.ids), "source id count disagrees")

    def argv(self, store: Path) -> list[str]:
        return cli_argv(store, "import", "maildir", str(self.src), "--batch-size", str(BATCH))

    def expected(self) -> set[str]:
        return self.ids

    def progress(self, f: Facts | None) -> int:
        return 0 if f is None else f.seen_events

    def complete(self) -> int:
        return self.locations

    def check_crashed(self, before: Facts | None, after: Facts | None, store: Path) -> None:
        if before is not None:
            _require(after is not None, "a store that existed is gone")
            assert after is not None
            lost = before.ids - after.ids
            _require(not lost, f"lost {len(lost)} messages committed before the kill")

    def check_finished(self, f: Facts, store: Path, out: Path) -> None:
        missing = self.ids - f.ids
        _require(not missing, f"finished but {len(missing)} messages missing")
        _require(
            f.seen_events == self.locations, f"{f.seen_events} locations, not {self.locations}"
        )
        code, text = run_cli(self.argv(store), out)
        _require(code == 0 and " events=0" in text, f"a second run added events: {text[-300:]}")


class SyncOp(Operation):
    name = "sync"
    USER = "fastmail"
    SIZES: ClassVar[dict[str, int]] = {"INBOX": 360, "Archive": 120, "Sent": 60}

    def setup(self) -> None:
        from testkit.corpus import generate_messages

        self._dv_cm = dovecot_server()
        self.dv = self._dv_cm.__enter__()
        if self.dv is None:
            raise TrialFailure("dovecot is not installed: the sync trials cannot run")
        self.dv.reset_user(self.USER)
        self.folders = {f: self.size(n) for f, n in self.SIZES.items()}
        raws = [data for _, data in generate_messages(sum(self.folders.values()), seed=11)]
        t0 = datetime(2026, 1, 1, tzinfo=UTC)
        at = 0
        for folder, count in self.folders.items():
            chunk = raws[at : at + count]
            self.dv.bulk_maildir(
                self.USER,
                folder,
                [(t0 + timedelta(minutes=at + i), r) for i, r in enumerate(chunk)],
            )
            at += count
        self.uids = {f: self.dv.uids(self.USER, f) for f in self.folders}
        # the bytes as the server serves them (line endings may differ from the files)
        client = self.dv.imap(self.USER)
        served = []
        for folder in self.folders:
            client.select_folder(folder, readonly=True)
            fetched = client.fetch(self.uids[folder], ["BODY.PEEK[]"])
            served.extend(v[b"BODY[]"] for v in fetched.values())
        client.logout()
        _require(len(served) == len(raws), "the server does not hold every message")
        self.ids = source_ids(served)
        self.uidvalidity = {f: self.dv.status(self.USER, f)["uidvalidity"] for f in self.folders}
        self.config = self.work / "sync.toml"
        self.config.write_text(
            self.dv.account_toml(self.USER, folders=["INBOX", "\\Archive", "\\Sent"])
        )
        self.env = self.dv.password_env()

    def teardown(self) -> None:
        cm = getattr(self, "_dv_cm", None)
        if cm is not None:
            cm.__exit__(None, None, None)

    def argv(self, store: Path) -> list[str]:
        return cli_argv(store, "sync", "--apply", "--config", str(self.config))

    def expected(self) -> set[str]:
        return self.ids

    def progress(self, f: Facts | None) -> int:
        return 0 if f is None else f.seen_events + len(f.cursor_log)

    def complete(self) -> int:
        return sum(len(u) for u in self.uids.values()) + len(self.folders)

    def _cursor_not_ahead(self, store: Path, f: Facts) -> None:
        from pipeline.store import MessageStore

        with MessageStore.open(store, create=False) as st:
            for (account, folder), (uidvalidity, last_uid) in f.cursors.items():
                _require(account == self.USER, f"a cursor for {account}?")
                _require(uidvalidity == self.uidvalidity[folder], f"{folder}: uidvalidity")
                if last_uid is None:
                    continue
                rows = st.query(
                    "SELECT DISTINCT l.uid FROM locations l JOIN messages m USING (message_id)"
                    " WHERE l.source = ? AND l.folder = ? AND l.uidvalidity = ?",
                    [account, folder, uidvalidity],
                ).column("uid")
                durable = set(rows.to_pylist())
                behind = [u for u in self.uids[folder] if u <= last_uid and u not in durable]
                _require(
                    not behind,
                    f"cursor {folder}={last_uid} is ahead of the data: uids {behind[:5]} missing",
                )

    def check_crashed(self, before: Facts | None, after: Facts | None, store: Path) -> None:
        if before is not None and after is not None:
            lost = before.ids - after.ids
            _require(not lost, f"lost {len(lost)} messages committed before the kill")
            for key, (_, last) in before.cursors.items():
                now = after.cursors.get(key, (None, None))[1]
                _require(now is not None and (last is None or now >= last), f"{key} moved back")
        if after is not None:
            self._cursor_not_ahead(store, after)

    def check_finished(self, f: Facts, store: Path, out: Path) -> None:
        missing = self.ids - f.ids
        _require(not missing, f"finished but {len(missing)} messages missing")
        self._cursor_not_ahead(store, f)
        for folder, uids in self.uids.items():
            _require(f.cursors.get((self.USER, folder), (0, 0))[1] == max(uids), f"{folder}")
        code, text = run_cli(self.argv(store), out, env=self.env)
        _require(code == 0, f"a second sync failed: {text[-300:]}")
        from pipeline.store import MessageStore

        with MessageStore.open(store, create=False) as st:
            _require(st.log.last_seq() == f.last_seq, "an idle second sync added events")


# ``mailledger`` whose appends keep every commit's file, as before they merged small
# ones: the layout of a store made before, which ``compact`` must be killable in
_UNMERGED_CLI = (
    "import sys; from stores.log import event_log;"
    " event_log.EventLog.__init__.__kwdefaults__['merge_small'] = False;"
    " from pipeline.cli import main; sys.exit(main(sys.argv[1:]))"
)


def _maildir_template(
    work: Path, rng: random.Random, name: str, batch: int, n: int, *, unmerged: bool = False
) -> Path:
    """A store of ``n`` bench-corpus messages imported in batches of ``batch`` (a
    file each, merged ten at a time unless ``unmerged``)."""
    from testkit.corpus import write_maildir

    src = work / f"{name}-maildir"
    write_maildir(src, n, seed=rng.randrange(1 << 30))
    store = work / f"{name}-template"
    argv = cli_argv(store, "import", "maildir", str(src), "--batch-size", str(batch))
    if unmerged:
        argv[1:3] = ["-c", _UNMERGED_CLI]  # (in place of ``-m pipeline``)
    code, text = run_cli(argv, work / f"{name}-template.out")
    _require(code == 0, f"template import failed: {text[-500:]}")
    return store


def _add_cursors(store: Path) -> None:
    """Cursor moves (as a sync would commit them) so that audits can be compared."""
    from pipeline.store import MessageStore
    from stores.events import CursorMoved, UidvalidityChanged

    with MessageStore.open(store, create=False) as st:
        now = st.clock.now
        st.commit(
            [
                CursorMoved(run_id=st.run_id, recorded_at=now(), source="acct", folder="INBOX",
                            uidvalidity=7, cursor_from=None, cursor_to=40, mode="full",
                            reason="first contact", uidnext=41),
                UidvalidityChanged(run_id=st.run_id, recorded_at=now(), source="acct",
                                   folder="Archive", old_uidvalidity=None, new_uidvalidity=9,
                                   action="alarm; full rescan"),
                CursorMoved(run_id=st.run_id, recorded_at=now(), source="acct", folder="Archive",
                            uidvalidity=9, cursor_from=None, cursor_to=12, mode="full",
                            reason="rescan", uidnext=13),
                CursorMoved(run_id=st.run_id, recorded_at=now(), source="acct", folder="INBOX",
                            uidvalidity=7, cursor_from=40, cursor_to=55, mode="delta",
                            reason="15 new messages durable", uidnext=56),
            ]
        )  # fmt: skip


class _TemplateOp(Operation):
    """An operation on a copy of one prepared store."""

    template: Path
    reference: Facts

    def fresh(self) -> Path:
        store = super().fresh()
        _copy(self.template, store)
        return store

    def expected(self) -> set[str]:
        return self.reference.ids

    def check_crashed(self, before: Facts | None, after: Facts | None, store: Path) -> None:
        _require(after is not None, "the store is gone")
        assert after is not None
        _require(after.ids == self.reference.ids, "the stored messages changed")
        _require(after.cursors == self.reference.cursors, "the cursors changed")
        _require(after.cursor_log == self.reference.cursor_log, "the cursor audit changed")


class CompactOp(_TemplateOp):
    name = "compact"
    TARGET = 40

    def setup(self) -> None:
        from stores.log import EventLog

        self.template = _maildir_template(
            self.work, self.rng, "compact", batch=3, n=self.size(N_MESSAGES), unmerged=True
        )
        _add_cursors(self.template)
        self.reference = inspect(_copy(self.template, self.work / "scratch"), None)
        probe = EventLog(_copy(self.template, self.work / "probe") / "log")
        probe.compact(target_rows=self.TARGET)
        self.final_files = len(probe.files())

    def argv(self, store: Path) -> list[str]:
        return cli_argv(store, "compact", "--target-rows", str(self.TARGET))

    def progress(self, f: Facts | None) -> int:
        """Files merged away so far (a merged file hides the small ones at once)."""
        return self.reference.files - (self.reference.files if f is None else f.files)

    def complete(self) -> int:
        return self.reference.files - self.final_files

    def check_crashed(self, before: Facts | None, after: Facts | None, store: Path) -> None:
        super().check_crashed(before, after, store)
        assert after is not None
        _require(after.skeleton == self.reference.skeleton, "an event changed")
        _require(after.fingerprint == self.reference.fingerprint, "projections changed")

    def check_finished(self, f: Facts, store: Path, out: Path) -> None:
        self.check_crashed(None, f, store)
        _require(f.files == self.final_files, f"{f.files} files after compaction")
        names = [p.name for p in (store / "log").iterdir()]
        leftovers = [n for n in names if n.startswith(".tmp-")]
        _require(not leftovers, f"temporary files left: {leftovers}")
        _require(len([n for n in names if n.endswith(".parquet")]) == f.files, "covered files left")


class PurgeOp(_TemplateOp):
    name = "purge"

    def setup(self) -> None:
        from pipeline.store import MessageStore

        self.template = _maildir_template(
            self.work, self.rng, "purge", batch=10, n=self.size(N_MESSAGES)
        )
        _add_cursors(self.template)
        with MessageStore.open(self.template, create=False) as st:
            ids = sorted(st.message_ids())
        lone = sorted(self._isolated(set(ids)))  # victims whose traces can all be looked for
        victims = self.rng.sample(lone, min(20, len(lone)))
        victims += self.rng.sample(sorted(set(ids) - set(victims)), 30 - len(victims))
        self.rng.shuffle(victims)
        with MessageStore.open(self.template, create=False) as st:
            canaries = {}
            for mid in victims:
                rec = st.get(mid)
                assert rec is not None
                if rec["subject"] and len(rec["subject"]) >= 12:
                    canaries[mid] = rec["subject"].encode()
                st.delete(mid, reason="a data-protection request")
            # deleted, then seen again: stored, so never purged
            back = victims[0]
            raw_back = self._raw_from_log(st, back)
            st.add(None, raw_back, source="import:again", folder="again")
            # the same content under another id, kept: its blob must stay
            shared = victims[1]
            st.add(None, self._raw_from_log(st, shared), source="api", folder="copy",
                   message_id=f"copy-of-{shared}")  # fmt: skip
        self.victims = set(victims) - {back}
        self.shared_sha = self._sha_of(shared)
        isolated = self._isolated(self.victims - {shared})
        self.canaries = {f"subject:{m}": canaries[m] for m in isolated if m in canaries}
        self.canaries.update({f"id:{m}": m.encode() for m in isolated})
        self.reference = inspect(_copy(self.template, self.work / "scratch"), None)

    def _isolated(self, candidates: set[str]) -> set[str]:
        """Victims whose id and subject no other message carries (a reply quotes both)."""
        from stores.log import EventLog

        t = (
            EventLog(self.template / "log")
            .read(columns=["type", "message_id", "subject", "in_reply_to", "references"])
            .to_pylist()
        )
        out = set()
        for mid in candidates:
            subject = next((r["subject"] for r in t if r["message_id"] == mid), None)
            shared = any(
                r["message_id"] != mid
                and (
                    r["in_reply_to"] == mid
                    or mid in (r["references"] or ())
                    or mid in (r["message_id"] or "")
                    or (subject and r["subject"] and subject in r["subject"])
                )
                for r in t
            )
            if not shared:
                out.add(mid)
        return out

    def _raw_from_log(self, st: Any, mid: str) -> bytes:
        sha = (
            st.query(
                "SELECT sha256 FROM events WHERE message_id = ? AND type = 'message-seen' LIMIT 1",
                [mid],
            )
            .column("sha256")[0]
            .as_py()
        )
        data: bytes = st.blobs.get(sha)
        return data

    def _sha_of(self, mid: str) -> str:
        from stores.log import EventLog

        t = EventLog(self.template / "log").read(columns=["type", "message_id", "sha256"])
        for kind, m, sha in zip(*(t.column(c).to_pylist() for c in t.column_names), strict=True):
            if kind == "message-seen" and m == mid:
                return str(sha)
        raise TrialFailure(f"no sha for {mid}")

    def argv(self, store: Path) -> list[str]:
        # --target-rows 1 merges nothing: every file of the log is rewritten on its own
        return cli_argv(store, "compact", "--purge", "--target-rows", "1")

    def progress(self, f: Facts | None) -> int:
        if f is None:
            return 0
        purged = sum(1 for row in f.skeleton if row[1] == "message-deleted") - sum(
            1 for row in self.reference.skeleton if row[1] == "message-deleted"
        )
        return (1 if purged else 0) + (0 if f.journal else 1 if purged else 0)

    def complete(self) -> int:
        return 2

    def check_crashed(self, before: Facts | None, after: Facts | None, store: Path) -> None:
        super().check_crashed(before, after, store)
        assert after is not None
        ref = self.reference.skeleton
        _require(after.skeleton[: len(ref)] == ref, "the event skeleton changed")
        extra = after.skeleton[len(ref) :]
        _require(
            all(r[1] == "message-deleted" for r in extra) and len(extra) in (0, len(self.victims)),
            f"a purge appended {len(extra)} unexpected events",
        )

    def mid(self, before: Facts | None, after: Facts | None) -> bool:
        return after is not None and after.journal

    def check_finished(self, f: Facts, store: Path, out: Path) -> None:
        from stores.blobs import BlobStore

        self.check_crashed(None, f, store)
        _require(not f.journal, "the purge journal is still there")
        _require(BlobStore(store / "blobs").has(self.shared_sha), "a shared blob was erased")
        _require(len(self.canaries) >= 10, f"only {len(self.canaries)} canaries to look for")
        hits = {k: v for k, v in search_store(store, self.canaries).items() if v}
        _require(not hits, f"erased data still in the store: {dict(list(hits.items())[:3])}")
        code, text = run_cli(self.argv(store), out)
        _require(code == 0 and "messages=0" in text, f"a second purge did something: {text}")


class ReplayOp(_TemplateOp):
    name = "replay"

    def setup(self) -> None:
        # big enough that a replay outlasts the start of the process
        self.template = _maildir_template(
            self.work, self.rng, "replay", batch=200, n=self.size(1500)
        )
        _add_cursors(self.template)
        self.reference = inspect(_copy(self.template, self.work / "scratch"), None)

    def argv(self, store: Path) -> list[str]:
        return cli_argv(store, "replay")

    def progress(self, f: Facts | None) -> int:
        return 0

    def complete(self) -> int:
        return 1  # a replay leaves nothing to count; only its rebuild file tells "midway"

    def mid(self, before: Facts | None, after: Facts | None) -> bool:
        """A kill mid-replay leaves a rebuild file this very run started."""
        return (
            after is not None
            and after.rebuild_stamp is not None
            and (before is None or before.rebuild_stamp != after.rebuild_stamp)
        )

    def check_crashed(self, before: Facts | None, after: Facts | None, store: Path) -> None:
        super().check_crashed(before, after, store)
        assert after is not None
        _require(after.fingerprint == self.reference.fingerprint, "projections differ")
        _require(after.skeleton == self.reference.skeleton, "an event changed")

    def check_finished(self, f: Facts, store: Path, out: Path) -> None:
        self.check_crashed(None, f, store)
        _require(not (store / "projections.duckdb.rebuild").exists(), "rebuild file left")


OPS: dict[str, type[Operation]] = {
    "import": ImportOp,
    "sync": SyncOp,
    "compact": CompactOp,
    "purge": PurgeOp,
    "replay": ReplayOp,
}


# -- the campaign ---------------------------------------------------------------------


@dataclass
class OpFigures:
    trials: int = 0
    killed: int = 0
    mid: int = 0
    early: int = 0
    late: int = 0
    finished: int = 0
    completions: int = 0
    failures: int = 0
    seconds: float = 0.0
    run_seconds: float = 0.0
    window: tuple[float, float] = (0.0, 0.0)


def _run_op(op: Operation, trials: int, result: Result, figs: OpFigures) -> None:
    t_start = time.monotonic()
    try:
        op.setup()
        # an uninterrupted run: how long it takes (process start included), and
        # when it changes the store (the window where a kill lands mid-operation)
        probe = op.fresh()
        code, figs.run_seconds, window = _timed_run(op, probe)
        _require(code in op.ok_codes, f"{op.name}: an uninterrupted run failed (exit {code})")
        shutil.rmtree(probe, ignore_errors=True)
        figs.window = (round(window[0], 3), round(window[1], 3))

        store = op.fresh()
        before: Facts | None = None
        if store.exists():
            before = inspect(_copy(store, op.work / "scratch"), op.expected())
        for trial in range(trials):
            figs.trials += 1
            result.trials += 1
            # half the kills anywhere in a run, half inside the window where it writes
            if op.rng.random() < 0.5:
                delay = op.rng.uniform(0.0, figs.run_seconds)
            else:
                delay = op.rng.uniform(*window)
            out = op.work / f"{op.name}-trial-{trial}.out"
            try:
                store, before = _trial(op, store, before, delay, out, figs, result)
            except TrialFailure as exc:
                figs.failures += 1
                result.fail(f"{op.name} trial {trial} (kill at {delay:.2f}s): {exc}")
                store, before = op.fresh(), None  # go on with a fresh store
            except Exception as exc:  # a crash of the campaign itself is a failure too
                figs.failures += 1
                result.fail(f"{op.name} trial {trial}: {type(exc).__name__}: {exc}")
                store, before = op.fresh(), None
        # every chain ends with a run to completion: the interrupted command completes
        try:
            _complete(op, store, figs)
        except TrialFailure as exc:
            figs.failures += 1
            result.fail(f"{op.name} final re-run: {exc}")
    finally:
        op.teardown()
        figs.seconds = time.monotonic() - t_start


def _signature(store: Path) -> tuple[Any, ...]:
    """What a command visibly changes in a store, polled while it runs."""
    try:
        log = tuple(sorted(p.name for p in (store / "log").iterdir()))
    except OSError:
        log = ()
    return (
        log,
        (store / "purge-journal.json").exists(),
        (store / "projections.duckdb.rebuild").exists(),
    )


def _timed_run(op: Operation, store: Path) -> tuple[int, float, tuple[float, float]]:
    """Run ``op`` to its end, polling the store: (exit code, seconds, change window)."""
    proc = spawn_cli(op.argv(store), op.work / "probe.out", env=op.env)
    t0 = time.monotonic()
    last = _signature(store)
    changes: list[float] = []
    try:
        while proc.poll() is None:
            sig = _signature(store)
            if sig != last:
                changes.append(time.monotonic() - t0)
                last = sig
            time.sleep(0.002)
        took = time.monotonic() - t0
    finally:
        kill_group(proc)
    if not changes:
        return proc.returncode, took, (0.0, took)
    return proc.returncode, took, (max(0.0, changes[0] - 0.02), min(took, changes[-1] + 0.02))


def _trial(
    op: Operation,
    store: Path,
    before: Facts | None,
    delay: float,
    out: Path,
    figs: OpFigures,
    result: Result,
) -> tuple[Path, Facts | None]:
    proc = spawn_cli(op.argv(store), out, env=op.env)
    try:
        code = proc.wait(timeout=delay)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        left = group_pids(proc.pid)
        _require(not left, f"{len(left)} processes of the group survived the kill")
        figs.killed += 1
        after = None
        if (store / "store.json").exists():
            after = inspect(_copy(store, op.work / "scratch"), op.expected())
        op.check_crashed(before, after, op.work / "scratch")
        mid_fn = getattr(op, "mid", None)
        if mid_fn is not None:
            mid = bool(mid_fn(before, after))
            if not mid and after is not None and op.progress(after) >= op.complete():
                figs.late += 1
            elif not mid:
                figs.early += 1
        else:
            p0, p1 = op.progress(before), op.progress(after)
            mid = p0 < p1 < op.complete()
            if not mid:
                if p1 >= op.complete():
                    figs.late += 1
                else:
                    figs.early += 1
        if mid:
            figs.mid += 1
            result.faults += 1
        if after is not None and not mid and op.progress(after) >= op.complete():
            # the kill came after the last durable step: finish this chain now
            _complete(op, store, figs)
            shutil.rmtree(store, ignore_errors=True)
            new = op.fresh()
            if not new.exists():
                return new, None
            return new, inspect(_copy(new, op.work / "scratch"), op.expected())
        return store, after
    kill_group(proc)
    _require(code in op.ok_codes, f"exit {code}: {out.read_text(errors='replace')[-500:]}")
    figs.finished += 1
    f = inspect(_copy(store, op.work / "scratch"), op.expected())
    op.check_crashed(before, f, op.work / "scratch")
    op.check_finished(f, store, out.with_suffix(".again"))
    figs.completions += 1
    shutil.rmtree(store, ignore_errors=True)
    new = op.fresh()
    after_new = inspect(_copy(new, op.work / "scratch"), op.expected()) if new.exists() else None
    return new, after_new


def _complete(op: Operation, store: Path, figs: OpFigures) -> None:
    out = op.work / f"{op.name}-final.out"
    code, text = run_cli(op.argv(store), out, env=op.env)
    _require(code in op.ok_codes, f"exit {code}: {text[-500:]}")
    f = inspect(_copy(store, op.work / "scratch"), op.expected())
    op.check_crashed(None, f, op.work / "scratch")
    op.check_finished(f, store, out.with_suffix(".again"))
    figs.completions += 1


def main(
    trials: int = FULL_TRIALS,
    seed: int = SEED,
    operations: tuple[str, ...] = OPERATIONS,
    workdir: Path | None = None,
    scale: float | None = None,
) -> Result:
    """Run ``trials`` kill -9 trials spread evenly over ``operations``; print the figures.

    ``scale``: the size of sources and stores (default: 1, or 0.5 for a quick slice)."""
    result = Result("crash")
    if scale is None:
        scale = 0.5 if trials <= QUICK_TRIALS else 1.0
    t0 = time.monotonic()
    rng = random.Random(seed)
    per_op = Counter({name: trials // len(operations) for name in operations})
    for name in operations[: trials % len(operations)]:
        per_op[name] += 1
    figures: dict[str, OpFigures] = {}
    with tempfile.TemporaryDirectory(prefix="mailledger-crash-", dir=workdir) as tmp:
        for name in operations:
            work = Path(tmp) / name
            work.mkdir()
            op = OPS[name](work, random.Random(rng.randrange(1 << 30)), scale)
            figs = figures[name] = OpFigures()
            try:
                _run_op(op, per_op[name], result, figs)
            except TrialFailure as exc:
                figs.failures += 1
                result.fail(f"{name}: {exc}")
            print(
                f"crash {name:8} trials={figs.trials:4} killed={figs.killed:4}"
                f" mid-operation={figs.mid:4} early={figs.early:3} late={figs.late:3}"
                f" finished-alone={figs.finished:3} completions={figs.completions:3}"
                f" failures={figs.failures} run={figs.run_seconds:.2f}s"
                f" writes={figs.window[0]:.2f}-{figs.window[1]:.2f}s"
                f" took={figs.seconds:.0f}s",
                flush=True,
            )
    result.figures = {name: f.__dict__ for name, f in figures.items()}
    result.seconds = time.monotonic() - t0
    return result


if __name__ == "__main__":
    cli_main(main, FULL_TRIALS, SEED)
    sys.exit(0)

"""The sync run: plan each folder from its cursor, take what is new, account for it.

Rules, each enforced here:
- identity is the Message-ID; a body the store already holds (same id and
  size) costs an envelope and a location event, never a second download;
- the log is written before any cursor moves, and a cursor moves only across
  the contiguous prefix of UIDs that are durable: a failing message stalls
  its folder visibly, later messages are still stored;
- a changed UIDVALIDITY is recorded, raises an ALARM and rescans the folder;
  a UIDNEXT at or below the cursor is a broken server: ALARM, folder error,
  cursor untouched;
- every account, folder and message is accounted for, and a run whose sums
  do not balance has failed.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import logging
import random
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pipeline.bootstrap import Sources
from pipeline.config import Account, Config, InitialMode, resolve_secret
from pipeline.ingest import Incoming, Ingest, WorkerPool, worker_pool
from pipeline.parse import synthetic_message_id
from pipeline.pop3_sync import sync_pop3_account
from pipeline.progress import NO_PROGRESS, Progress
from pipeline.reconcile import not_on_server, vanished_events
from pipeline.reports import AccountReport, FolderReport, RunReport, SyncOptions
from pipeline.sources.imap import (
    Envelope,
    FolderInfo,
    FolderState,
    ImapSource,
    gone_folders,
    missing_attributes,
    missing_folders,
    select_folders,
)
from pipeline.sources.imap.fetch import Fetched, fetch_bodies, fetch_prepared
from pipeline.store import MessageStore
from stores.errors import MailledgerError, SourceError
from stores.events import LocationVanished

__all__ = ["Plan", "plan_folder", "sync_accounts", "wait_for_change"]

log = logging.getLogger("mailledger.sync")

_BODY_CHUNK = 100
_BODY_CHUNK_BYTES = 8 << 20
# A folder with this many bodies to fetch has them fetched by the workers (when
# there are workers), each on an IMAP connection of its own, this many chunks
# ahead of the commits. Measured on 10,000 messages (2 cores, loopback Dovecot):
# 4.0-4.5 s when this process fetched them, 3.7-3.8 s.
_WORKER_FETCH_MIN = 3 * _BODY_CHUNK
# Chunks in flight: enough for the workers to go on through a fold of this
# process (0.2-0.25 s, about 1,000 messages at their pace) instead of waiting on
# it. What waits here is facts, not bodies: about 3 MB for 12 chunks. 4 -> 12:
# median 3.64 -> 3.48 s over 12 alternating rounds (3.89 -> 3.69 s over 8).
_WORKER_AHEAD = 12
_WORKER_BATCH = 1000
# A sync (often run from cron beside other work) folds every 5,000 events rather
# than the store's 10,000: a fold's DuckDB memory grows with its events. Measured
# on 10,000 messages (main process, 4 alternating runs each): 10,000 -> 285 MB,
# 4.39 s median; 5,000 -> 252 MB, 4.54 s; 2,500 -> 237 MB, 4.9 s.
_FOLD_EVERY = 5_000
# ... and, into a large store, no more often than every hundredth of its events (at
# most 20,000): there each fold costs a part that follows the store, not the batch.
# Into 1,000,000 messages a fold's COMMIT loaded 358 MiB of the tables' ART indexes
# (random keys touch every part of them) and took 0.6-1.5 s, whatever its events;
# a 10,000-message sync folded twice, the first time beside its fetching workers.
_FOLD_SHARE = 100
_FOLD_EVERY_MAX = 20_000


@dataclass(frozen=True)
class Plan:
    """What to do with one folder, decided from its cursor and the server's state."""

    mode: str  # full | since | new-only | delta | reconcile
    after_uid: int  # take UIDs above this (0: all)
    cursor_from: int | None
    uidvalidity_changed: bool = False
    old_uidvalidity: int | None = None
    alarm: str | None = None
    error: str | None = None
    nothing_new: bool = False
    reassigned: bool = False  # UIDs name other messages under the same UIDVALIDITY


def plan_folder(
    cursor: Mapping[str, Any] | None,
    state: FolderState,
    initial: InitialMode,
    *,
    reconcile: bool = False,
) -> Plan:
    """Decide a folder's mode. Pure: the same inputs always give the same plan."""
    if cursor is None:
        return Plan(mode=initial.kind, after_uid=0, cursor_from=None)
    last = cursor.get("last_uid")
    if cursor.get("uidvalidity") != state.uidvalidity:
        return Plan(
            mode="full",
            after_uid=0,
            cursor_from=last,
            uidvalidity_changed=True,
            old_uidvalidity=cursor.get("uidvalidity"),
            alarm=(
                f"UIDVALIDITY changed {cursor.get('uidvalidity')} -> {state.uidvalidity}:"
                " rescanning the folder in full"
            ),
        )
    if last is None:  # a UIDVALIDITY change was recorded; its rescan never completed
        return Plan(mode="full", after_uid=0, cursor_from=None)
    if state.uidnext is not None and state.uidnext <= last:
        msg = (
            f"UIDNEXT {state.uidnext} is at or below the cursor {last} with the same"
            f" UIDVALIDITY {state.uidvalidity}: the server is broken; cursor left alone"
        )
        return Plan(mode="delta", after_uid=last, cursor_from=last, alarm=msg, error=msg)
    if reconcile:
        return Plan(mode="reconcile", after_uid=0, cursor_from=last)
    nothing = state.uidnext is not None and state.uidnext - 1 <= last
    return Plan(mode="delta", after_uid=last, cursor_from=last, nothing_new=nothing)


# -- one folder -----------------------------------------------------------------


class _FolderSync:
    """Takes one folder of one account through its plan."""

    def __init__(
        self,
        store: MessageStore,
        src: ImapSource,
        account: Account,
        opts: SyncOptions,
        report: AccountReport,
        pool: WorkerPool | None = None,
        secret: str | None = None,
        progress: Progress = NO_PROGRESS,
    ) -> None:
        self.store = store
        self.progress = progress  # bodies fetched, per folder
        self.pool = pool
        self.secret = secret  # for the workers' own connections
        self.src = src
        self._dates = False  # bodies fetched with their INTERNALDATE (no envelopes first)
        self.account = account
        self.opts = opts
        self.report = report

    def run(self, folder: str, emit: Callable[[str], None], alarms: list[str]) -> FolderReport:
        fr = FolderReport(folder=folder)
        self.report.folders[folder] = fr
        try:
            self.src.ensure_connected()  # a network error in the folder before dropped it
            state = self.src.examine(folder)
            if state.uidnext is None:
                with contextlib.suppress(SourceError):  # no UIDNEXT at all: plan without it
                    uidnext = self.src.status(folder).get("uidnext")
                    state = FolderState(state.uidvalidity, uidnext, state.exists)
            fr.uidvalidity = state.uidvalidity
            # the cursor and the sample of held UIDs are read in one hold of the
            # projections, not one each: a hold (attach, check, detach) costs more
            # than the queries (no network in between: other writers wait no longer)
            with self.store.session():
                cursor = self.store.cursor(self.account.name, folder)
                plan = plan_folder(
                    cursor, state, self.account.initial, reconcile=self.opts.reconcile
                )
                held = self._held_sample(folder, state.uidvalidity, plan)
            plan = self._check_reassigned(state, plan, fr, held)
            fr.mode = plan.mode if not self.opts.mode_label or plan.mode != "delta" else "watch"
            fr.cursor_from = plan.cursor_from
            fr.cursor_to = plan.cursor_from
            if plan.alarm:
                alarms.append(f"{self.account.name} {folder}: {plan.alarm}")
                fr.alarm = plan.alarm
                # printed here, once: not logged as well, nor repeated in the summary
                emit(f"ALARM {self.account.name} {folder}: {plan.alarm}")
            if plan.error:
                fr.error = plan.error
                self.report.folder_errors += 1
                return fr
            self._take(folder, state, plan, fr, cursor)
        except SourceError as exc:
            fr.error = str(exc)
            self.report.folder_errors += 1
        return fr

    _SAMPLE = 5

    def _check_reassigned(
        self,
        state: FolderState,
        plan: Plan,
        fr: FolderReport,
        held: dict[int, tuple[str, str, int | None]],
    ) -> Plan:
        """Before a delta (or reconcile): do the UIDs we hold still name the same messages?

        A server that lost its state and forced the old UIDVALIDITY back (or a
        buggy one) can give known UIDs to other messages; a delta would then
        skip mail for good. Up to five known UIDs (the lowest, the highest and
        three drawn by a generator seeded with the folder and the run id, so a
        run can be replayed and successive runs look at other UIDs) are
        compared: Message-ID and size from an envelope, and where those differ
        the body's sha256, so a header we read differently is never taken for
        a reassignment. A confirmed difference raises an ALARM and turns the
        plan into a full rescan: like a UIDVALIDITY change, the cursor's number
        means nothing any more, and a rescan costs envelopes for what the
        store holds and loses nothing. (Leaving the cursor alone instead would
        stall the folder for good: no later run could tell it apart.) The bodies
        downloaded here count in ``fr.bodies`` and as ``bodies_checked``.
        ``held``: what ``_held_sample`` read for this plan.
        """
        if not _checks_reassigned(plan):
            return plan
        suspects = []
        for env in self.src.envelopes(sorted(held)) if held else ():  # expunged: no evidence
            mid, sha, size = held[env.uid]
            # A synthetic id says our parse found no Message-ID in the header; the
            # server's may find one (after a line that is no header field, say):
            # such a message is compared by its size alone.
            synthetic = mid == synthetic_message_id(sha)
            if (env.message_id != mid and not synthetic) or (size is not None and size != env.size):
                suspects.append(env.uid)
        fetched = self.src.bodies(suspects) if suspects else {}
        fr.bodies += len(fetched)
        fr.bodies_checked += len(fetched)
        fr.bytes_fetched += sum(map(len, fetched.values()))
        self.report.counts.bodies_checked += len(fetched)
        wrong = [
            uid for uid, raw in fetched.items() if hashlib.sha256(raw).hexdigest() != held[uid][1]
        ]
        if not wrong:
            return plan
        return Plan(
            mode="full",
            after_uid=0,
            cursor_from=plan.cursor_from,
            reassigned=True,
            alarm=(
                f"UIDs reassigned without a UIDVALIDITY change (uidvalidity {state.uidvalidity};"
                f" known UIDs now naming other messages: {', '.join(map(str, wrong))}):"
                " rescanning the folder in full"
            ),
        )

    def _held_sample(
        self, folder: str, uidvalidity: int, plan: Plan
    ) -> dict[int, tuple[str, str, int | None]]:
        """``uid -> (message_id, sha256, size)`` the store holds for a sample of the
        folder's UIDs up to the plan's cursor: the latest content seen at each UID
        (after a rescan a UID has two), its size None when the record is gone.
        Empty when the plan needs no check (``_check_reassigned``)."""
        if not _checks_reassigned(plan):
            return {}
        last_uid = plan.cursor_from
        assert last_uid is not None
        # Probed, not listed: the lowest and highest UIDs and a random spread below
        # the cursor are looked up through the index on the location key, so an
        # idle sync of a folder of a million messages reads a few dozen rows.
        rng = random.Random(f"{self.account.name}/{folder}/{uidvalidity}/{self.store.run_id}")
        ends = [*range(1, min(last_uid, 8) + 1), *range(max(1, last_uid - 7), last_uid + 1)]
        spread = rng.sample(range(1, last_uid + 1), min(48, last_uid))
        probe = sorted({*ends, *spread})
        rows = self.store.locations_at(
            self.account.name,
            [(folder, uidvalidity, uid, None) for uid in probe],
            columns="uid, last_seq, vanished, message_id, sha256",
        )
        latest: dict[int, dict[str, Any]] = {}
        for r in rows:  # after a rescan a UID has two contents: the latest counts
            if r["uid"] is not None and (
                r["uid"] not in latest or r["last_seq"] > latest[r["uid"]]["last_seq"]
            ):
                latest[r["uid"]] = r
        uids = sorted(uid for uid, r in latest.items() if not r["vanished"])
        if not uids:
            return {}
        picked = rng.sample(uids, min(self._SAMPLE - 2, len(uids)))
        sample = sorted({uids[0], uids[-1], *picked})
        held = {uid: latest[uid] for uid in sample}
        sizes = {
            (r["message_id"], r["sha256"]): r["size"]
            for r in self.store.message_rows(
                sorted({h["message_id"] for h in held.values()}), "message_id, sha256, size"
            )
        }
        return {
            uid: (h["message_id"], h["sha256"], sizes.get((h["message_id"], h["sha256"])))
            for uid, h in held.items()
        }

    def _uids(self, state: FolderState, plan: Plan) -> list[int]:
        if plan.nothing_new:
            return []
        if plan.mode == "delta":
            return self.src.uids_above(plan.after_uid)
        if plan.mode == "since":
            return self.src.uids_since(self.account.initial.since)
        if plan.mode == "new-only":
            return []
        return self.src.all_uids()  # full, reconcile

    def _take(
        self,
        folder: str,
        state: FolderState,
        plan: Plan,
        fr: FolderReport,
        cursor: Mapping[str, Any] | None,
    ) -> None:
        uids = self._uids(state, plan)
        known_here: set[int] = set()
        if plan.mode == "reconcile":
            known_here = self._reconcile_vanished(folder, state, plan, uids, fr)
            uids = [u for u in uids if u not in known_here]
        old_gone = self._old_uidvalidity_gone(folder, state, plan, cursor, fr)
        if self.opts.limit is not None:
            uids = uids[: self.opts.limit]
        fr.new = len(uids)
        if not self.opts.apply:
            fr.would_fetch = len(uids)
            return
        if plan.uidvalidity_changed:
            self.store.commit(
                [
                    self.store.events.uidvalidity_changed(
                        source=self.account.name,
                        folder=folder,
                        old=plan.old_uidvalidity,
                        new=state.uidvalidity,
                        action="alarm; full rescan",
                        mode="full",
                    ),
                    *old_gone,  # in the same commit: never a new UIDVALIDITY without them
                ]
            )
        ingest = Ingest(self.store, self.account.name, batch_size=500, network=True, pool=self.pool)
        failed: list[int] = []
        present: set[int] = set()
        # Envelopes (Message-ID, size) tell which bodies the store holds already. A
        # store that holds no message at all holds none of them: its first sync
        # fetches the bodies at once (with their INTERNALDATE), one pass, not two.
        # (With no UID to take, as in every idle sync, the store is not asked; nor
        # for a folder synced before: its delta takes envelopes first, a hold of
        # the projections fewer, and finds a message moved from another folder.)
        first = plan.cursor_from is None or plan.uidvalidity_changed
        self._dates = bool(uids) and first and not self.store.holds_messages()
        if self._dates:
            envelopes = [Envelope(uid, 0, None, None) for uid in uids]
            self.src.internal_dates.clear()
        else:
            envelopes = list(self.src.envelopes(uids))
        by_uid = {e.uid: e for e in envelopes}
        _gone(ingest, fr, len([u for u in uids if u not in by_uid]))
        owners: dict[str, str] = {}
        asked = [(e.message_id, e.size) for e in envelopes if e.message_id is not None]
        known = self.store.known_records(asked, owners=owners)
        # (the projections that answered held the log up to this seq, if any)
        ingest.absent((i for i, _ in asked if i not in owners), self.store.caught_up_seq)
        to_fetch: list[Envelope] = []
        for env in envelopes:
            rec = known.get((env.message_id, env.size)) if env.message_id else None
            if rec is not None:
                ingest.offer_known(rec, self._where(folder, state, env))
                present.add(env.uid)
            else:
                to_fetch.append(env)
        if len(to_fetch) < _WORKER_FETCH_MIN:
            # a few bodies (a cron delta, a rescan's stragglers) are parsed here:
            # starting the worker processes would cost more (0.4-0.5 s)
            ingest.pool = None
        self.progress.start(len(to_fetch), f"{self.account.name} {folder}")
        try:
            if self._in_workers(to_fetch):
                self._fetch_in_workers(folder, state, to_fetch, failed, ingest, fr, present)
            else:
                self._fetch_here(folder, state, to_fetch, failed, ingest, fr, present)
        except BaseException:
            ingest.flush()  # keep what was fetched; the cursor stays where it was
            self.report.counts.add(ingest.counts)
            raise
        finally:
            self.progress.close()
        for uid in failed:
            ingest.error(f"{self.account.name} {folder} uid={uid}", "FETCH failed")
        fr.failed_uids = sorted(failed)
        cursor_to = self._cursor_to(plan, state, uids, failed)
        extra = []
        if (
            plan.cursor_from is None
            or plan.uidvalidity_changed
            or plan.reassigned
            or cursor_to != plan.cursor_from
        ):
            extra.append(
                self.store.events.cursor_moved(
                    source=self.account.name,
                    folder=folder,
                    uidvalidity=state.uidvalidity,
                    cursor_from=plan.cursor_from,
                    cursor_to=cursor_to,
                    uidnext=state.uidnext,
                    mode=fr.mode,
                    reason=self._reason(plan, uids, failed),
                )
            )
            fr.cursor_to = cursor_to
        ingest.flush(extra)
        c = ingest.counts
        fr.bodies, fr.known, fr.errors = fr.bodies + c.bodies_fetched, c.known_skipped, c.errors
        self.report.counts.add(c)

    def _fetch_here(
        self,
        folder: str,
        state: FolderState,
        to_fetch: list[Envelope],
        failed: list[int],
        ingest: Ingest,
        fr: FolderReport,
        present: set[int],
    ) -> None:
        """Bodies fetched on this process's connection, a chunk at a time, offered
        to ``ingest`` (whose workers, if any, parse and store them)."""
        for chunk in _chunks(to_fetch):
            got = self._bodies(folder, state, chunk, failed)
            for env in chunk:
                raw = got.get(env.uid)
                if raw is None:
                    if env.uid not in failed:  # gone between envelope and body
                        _gone(ingest, fr, 1)
                    continue
                fr.bytes_fetched += len(raw)
                ingest.offer(
                    Incoming(
                        raw=raw,
                        folder=folder,
                        uidvalidity=state.uidvalidity,
                        uid=env.uid,
                        internal_date=env.internal_date or self.src.internal_dates.get(env.uid),
                    )
                )
                present.add(env.uid)
            self.progress.advance(len(chunk))  # a FETCH of at most 100 bodies or 8 MB

    def _in_workers(self, to_fetch: list[Envelope]) -> bool:
        """Whether worker processes fetch these bodies on connections of their own:
        a run with workers, on a real IMAP source, with enough to fetch that more
        connections pay (a cron delta of a few messages keeps to this one)."""
        return (
            self.pool is not None
            and self.secret is not None
            and type(self.src) is ImapSource
            and len(to_fetch) >= _WORKER_FETCH_MIN
        )

    def _fetch_in_workers(
        self,
        folder: str,
        state: FolderState,
        to_fetch: list[Envelope],
        failed: list[int],
        ingest: Ingest,
        fr: FolderReport,
        present: set[int],
    ) -> None:
        """Bodies fetched, parsed and stored by the workers, a chunk each at a time,
        a few chunks ahead; their facts offered to ``ingest`` in UID order, as the
        fetch in this process would. A worker's error ends the folder here, after
        the chunks before it (later ones are dropped: their blobs, if written, are
        named by no event, as after a crash)."""
        pool, secret = self.pool, self.secret
        assert pool is not None and secret is not None
        # this process holds the messages' facts, not their bytes: fewer, larger
        # commits cost no memory (main process CPU 1.8 -> 1.5 s on 10,000 messages)
        ingest.batch_size = max(ingest.batch_size, _WORKER_BATCH)
        # This connection would idle through the whole fetch, and a server may
        # drop an idle session: it is given back now (one connection fewer at the
        # provider), and the next folder opens it again.
        self.src.close()
        chunks = _chunks(to_fetch)
        by_uid = {e.uid: e for e in to_fetch}
        pending: deque[Any] = deque()

        def submit(chunk: list[Envelope]) -> None:
            uids = [e.uid for e in chunk]
            held = ingest.held([self._where(folder, state, e) for e in chunk])
            pending.append(
                pool.submit(
                    fetch_prepared, self.account, secret, folder, state.uidvalidity,
                    uids, self._dates, ingest.blobs_root, held,
                )
            )  # fmt: skip

        rest = iter(chunks)
        try:
            for chunk in itertools.islice(rest, _WORKER_AHEAD):
                submit(chunk)
            while pending:
                done: Fetched = pending.popleft().result()
                for chunk in itertools.islice(rest, 1):
                    submit(chunk)
                for (uid, prepared, idate), n in zip(done.got, done.nbytes, strict=True):
                    env = by_uid[uid]
                    fr.bytes_fetched += n
                    ingest.offer_prepared(
                        Incoming(
                            raw=b"",
                            folder=folder,
                            uidvalidity=state.uidvalidity,
                            uid=uid,
                            internal_date=env.internal_date or idate,
                        ),
                        prepared,
                    )
                    present.add(uid)
                failed.extend(done.failed)
                _gone(ingest, fr, len(done.vanished))
                self.progress.advance(len(done.got) + len(done.failed) + len(done.vanished))
        finally:
            for fut in pending:
                fut.cancel()
            # the workers' part of this folder is done: idle, they would keep their
            # memory and connections through the fold and any smaller folder after
            pool.release(cancel=True)

    def _where(self, folder: str, state: FolderState, env: Envelope) -> Incoming:
        return Incoming(
            raw=b"",
            folder=folder,
            uidvalidity=state.uidvalidity,
            uid=env.uid,
            internal_date=env.internal_date,
        )

    def _bodies(
        self, folder: str, state: FolderState, chunk: list[Envelope], failed: list[int]
    ) -> dict[int, bytes]:
        """Bodies of a chunk on this process's connection (see ``fetch_bodies``)."""
        uids = [e.uid for e in chunk]
        return fetch_bodies(self.src, folder, state.uidvalidity, uids, dates=self._dates,
                            failed=failed)  # fmt: skip

    def _cursor_to(self, plan: Plan, state: FolderState, uids: list[int], failed: list[int]) -> int:
        """Where the cursor may go: across the contiguous prefix of durable UIDs only."""
        if plan.mode == "new-only":
            return (state.uidnext - 1) if state.uidnext else self.src.highest_uid()
        # After a UIDVALIDITY change the old cursor's number means nothing.
        base = (plan.cursor_from or 0) if plan.mode in ("delta", "reconcile") else 0
        if failed:
            first_bad = min(failed)
            return max([base, *(u for u in uids if u < first_bad)])
        return max([base, *uids])

    def _reason(self, plan: Plan, uids: list[int], failed: list[int]) -> str:
        if failed:
            return f"stalled before failing uid {min(failed)} ({len(failed)} failed)"
        if plan.uidvalidity_changed:
            return "full rescan after UIDVALIDITY change"
        if plan.reassigned:
            return "full rescan: UIDs reassigned without a UIDVALIDITY change"
        if plan.mode == "new-only":
            return "first contact, new-only: start at UIDNEXT-1"
        if plan.cursor_from is None:
            return f"first contact, {plan.mode}: {len(uids)} messages"
        if self.opts.limit is not None and len(uids) >= self.opts.limit:
            return f"{len(uids)} messages durable (limit {self.opts.limit})"
        return f"{len(uids)} new messages durable"

    def _reconcile_vanished(
        self,
        folder: str,
        state: FolderState,
        plan: Plan,
        server_uids: list[int],
        fr: FolderReport,
    ) -> set[int]:
        """Record locations gone from the server; return the UIDs already on record.

        Every UID the folder ever gave out under this UIDVALIDITY is below UIDNEXT,
        the cursor and the UIDs now on the server: the store's rows up to there are
        read through ``locations_in``, at a cost that follows the folder."""
        top = max([plan.cursor_from or 0, (state.uidnext or 1) - 1, *server_uids[-1:]])
        rows = self.store.locations_in(self.account.name, [(folder, state.uidvalidity, top)])
        present = _present(rows)
        on_server = set(server_uids)
        gone = not_on_server(
            self.store,
            self.account.name,
            present.values(),
            on_server,
            key="uid",
            reason="reconcile: not on the server",
            apply=self.opts.apply,
        )
        fr.vanished += len(gone)
        return set(present) & on_server

    def _old_uidvalidity_gone(
        self,
        folder: str,
        state: FolderState,
        plan: Plan,
        cursor: Mapping[str, Any] | None,
        fr: FolderReport,
    ) -> list[LocationVanished]:
        """After a UIDVALIDITY change, a ``location-vanished`` for each location still
        present under the old one: its UIDs name nothing on the server any more, so
        ``find`` and ``show`` must stop placing mail there (the rescan records where
        each message is now). Counted in ``fr.vanished``; committed by the caller
        with the ``uidvalidity-changed`` event."""
        if not plan.uidvalidity_changed or cursor is None or plan.old_uidvalidity is None:
            return []
        rows = self.store.locations_in(
            self.account.name, [(folder, plan.old_uidvalidity, _highest_uid(cursor))]
        )
        old = list(_present(rows).values())
        fr.vanished += len(old)
        why = f"UIDVALIDITY changed {plan.old_uidvalidity} -> {state.uidvalidity}: old UIDs void"
        return vanished_events(self.store, self.account.name, old, why)


def _checks_reassigned(plan: Plan) -> bool:
    """Whether ``plan`` is checked for UIDs reassigned under the same UIDVALIDITY:
    a delta or a reconcile from a cursor, that nothing has stopped."""
    return plan.mode in ("delta", "reconcile") and not plan.error and bool(plan.cursor_from)


def _highest_uid(cursor: Mapping[str, Any]) -> int | None:
    """The highest UID a folder can have given out under its cursor's UIDVALIDITY
    (below the UIDNEXT last seen, or the cursor itself); None when neither is known."""
    last, uidnext = cursor.get("last_uid"), cursor.get("uidnext")
    if last is None and uidnext is None:
        return None
    return max(last or 0, (uidnext or 1) - 1)


def _present(rows: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """``uid -> row`` of the locations in ``rows`` that are not vanished, one a UID
    (after a rescan a UID may hold two contents: the latest one names it)."""
    out: dict[int, dict[str, Any]] = {}
    for r in rows:
        if r["vanished"] or r["uid"] is None:
            continue
        if r["uid"] not in out or r["last_seq"] > out[r["uid"]]["last_seq"]:
            out[r["uid"]] = r
    return out


def _gone(ingest: Ingest, fr: FolderReport, n: int) -> None:
    """Count ``n`` UIDs that were taken but are no longer on the server."""
    ingest.counts.uids_seen += n
    ingest.counts.vanished += n
    fr.vanished += n


def _chunks(envs: list[Envelope]) -> list[list[Envelope]]:
    out: list[list[Envelope]] = []
    cur: list[Envelope] = []
    size = 0
    for e in envs:
        if cur and (len(cur) >= _BODY_CHUNK or size + e.size > _BODY_CHUNK_BYTES):
            out.append(cur)
            cur, size = [], 0
        cur.append(e)
        size += e.size
    if cur:
        out.append(cur)
    return out


# -- accounts -------------------------------------------------------------------


def sync_fold_every(saved: int, events: int) -> int:
    """How many events a sync commits between folds, into a store of ``events``
    whose own setting is ``saved`` (a smaller one is kept)."""
    if saved < _FOLD_EVERY:
        return saved
    return max(_FOLD_EVERY, min(_FOLD_EVERY_MAX, events // _FOLD_SHARE))


def sync_accounts(
    store: MessageStore | None,
    config: Config,
    env: Mapping[str, str],
    opts: SyncOptions,
    *,
    emit: Callable[[str], None],
    only: set[str] | None = None,
    sources: Sources,
    progress: Progress = NO_PROGRESS,
) -> RunReport:
    """Sync every configured IMAP and POP3 account (failures isolated per account).

    ``sources``: how each kind of server is reached (``App.sources``).
    ``progress``: told of each folder's bodies to fetch, as they arrive."""
    report = RunReport(run_id=store.run_id if store else "measure", applied=opts.apply)
    saved = store.fold_every if store else 0
    if store is not None:
        store.fold_every = sync_fold_every(saved, store.log.last_seq())
    try:
        with worker_pool(opts.workers if opts.apply else 0) as pool:
            for name, account in config.accounts.items():
                if only and name not in only:
                    continue
                _sync_account(
                    store, name, account, env, opts, report, emit, sources, pool, progress
                )
    finally:
        if store is not None:
            store.fold_every = saved
    return report


def _sync_account(
    store: MessageStore | None,
    name: str,
    account: Account,
    env: Mapping[str, str],
    opts: SyncOptions,
    report: RunReport,
    emit: Callable[[str], None],
    sources: Sources,
    pool: WorkerPool | None,
    progress: Progress = NO_PROGRESS,
) -> None:
    if account.type == "pop3":
        report.accounts[name] = sync_pop3_account(
            store, account, env, opts, emit=emit, source_factory=sources.pop3, progress=progress
        )
        return
    if account.type != "imap":
        return
    ar = AccountReport(name=name)
    report.accounts[name] = ar
    try:
        secret = resolve_secret(account, env)
        with sources.imap(account, secret) as src:
            listed = src.list_folders()
            folders = select_folders(listed, account.folders, account.exclude)
            _report_missing(name, account, listed, ar, emit)
            if opts.reconcile and store is not None and not opts.measure:
                # the LIST above was read in full (a failed one raised): a folder the
                # store has synced that it no longer shows is gone from the server
                _reconcile_gone(store, name, listed, opts, ar, emit)
            if not folders:
                wanted = ", ".join(account.folders)
                raise SourceError(f"{name}: no folder on the server matches {wanted}")
            for info in folders:
                if opts.measure:
                    st = src.status(info.name)
                    emit(
                        f"measure {name} {info.name}: messages={st.get('messages', '-')}"
                        f" uidnext={st.get('uidnext', '-')}"
                        f" uidvalidity={st.get('uidvalidity', '-')}"
                    )
                    ar.folders[info.name] = FolderReport(
                        folder=info.name,
                        mode="measure",
                        uidvalidity=st.get("uidvalidity"),
                        would_fetch=st.get("messages"),
                    )
                    continue
                assert store is not None
                fr = _FolderSync(store, src, account, opts, ar, pool, secret, progress).run(
                    info.name, emit, report.alarms
                )
                emit(fr.line(name))
    except MailledgerError as exc:
        ar.error = str(exc)
        emit(f"error {name}: {exc}")


def _report_missing(
    name: str,
    account: Account,
    listed: list[FolderInfo],
    ar: AccountReport,
    emit: Callable[[str], None],
) -> None:
    """Each ``folders`` entry that takes nothing is a folder error: a name the
    server does not list, or a SPECIAL-USE attribute no folder carries. Loud,
    never skipped quietly: the user expects mail from it."""
    missing = [
        (gone, f"folder {gone!r} is not on the server (deleted or renamed?); mail kept")
        for gone in missing_folders(listed, account.folders)
    ]
    missing += [
        (attr, "no folder has this SPECIAL-USE attribute")
        for attr in missing_attributes(listed, account.folders)
    ]
    for entry, why in missing:
        ar.folders[entry] = FolderReport(folder=entry, mode="missing", error=why)
        ar.folder_errors += 1
        emit(f"error {name} {entry}: {why}")


def _reconcile_gone(
    store: MessageStore,
    name: str,
    listed: list[FolderInfo],
    opts: SyncOptions,
    ar: AccountReport,
    emit: Callable[[str], None],
) -> None:
    """Mark vanished the locations still present in the folders the store has
    synced (it holds a cursor for each) that the server's LIST no longer shows:
    renamed or deleted there. The mail is kept, and a renamed folder's messages
    are found again under the new name, each for an envelope. Reads the cursors
    (one row a folder) and the gone folders' own locations."""
    cursors = {c["folder"]: c for c in store.folder_cursors(name)}
    gone = gone_folders(listed, list(cursors))
    if not gone:
        return
    spans = [(f, cursors[f]["uidvalidity"], _highest_uid(cursors[f])) for f in gone]
    present = store.locations_in(name, spans)
    for folder in gone:
        rows = list(_present([r for r in present if r["folder"] == folder]).values())
        if not rows:
            continue  # marked before: nothing to say twice
        if opts.apply:
            store.commit(vanished_events(store, name, rows, "reconcile: folder not on the server"))
        fr = ar.folders.get(folder) or FolderReport(folder=folder, mode="gone")
        ar.folders[folder] = fr
        fr.vanished += len(rows)
        emit(
            f"gone {name} {folder}: not on the server (renamed or deleted?);"
            f" vanished={len(rows)}, mail kept"
        )


def wait_for_change(
    config: Config,
    env: Mapping[str, str],
    seconds: float,
    stop: Any,
    *,
    only: set[str] | None = None,
    sources: Sources,
) -> str:
    """Between two watch cycles: IDLE on the first IMAP account's first folder
    until the server reports a change, ``seconds`` pass or ``stop`` is set;
    a plain wait where the server has no IDLE. Returns why it woke up."""
    import time

    deadline = time.monotonic() + seconds
    account = next(
        (a for n, a in config.accounts.items() if a.type == "imap" and (not only or n in only)),
        None,
    )
    if account is not None:
        try:
            with sources.imap(account, resolve_secret(account, env)) as src:
                folders = select_folders(src.list_folders(), account.folders, account.exclude)
                # where new mail lands first: INBOX, else Gmail's \All, else the first folder
                folders.sort(key=lambda f: (f.name.upper() != "INBOX", "\\All" not in f.attributes))
                if folders and src.can_idle():
                    first = True
                    while not stop.is_set():
                        left = deadline - time.monotonic()
                        if left <= 0:
                            return "interval"
                        # short IDLE slices: a stop request is seen within two seconds
                        if src.idle_wait(folders[0].name, min(left, 2.0), reopen=first):
                            return f"IDLE: {account.name} {folders[0].name} changed"
                        first = False
                    return "stop"
        except MailledgerError as exc:
            log.warning("watch: IDLE unavailable (%s); waiting %.0fs", exc, seconds)
    stop.wait(max(0.0, deadline - time.monotonic()))
    return "stop" if stop.is_set() else "interval"

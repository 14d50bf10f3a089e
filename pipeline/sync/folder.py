"""One folder of one account taken through its plan: the UIDs to take, what the
store holds already, the bodies fetched, and the cursor moved.

The log is written before any cursor moves, and a cursor moves only across the
contiguous prefix of UIDs that are durable: a failing message stalls its folder
visibly, later messages are still stored. A body the store already holds (same
Message-ID and size) costs an envelope and a location event, never a second
download.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any

from pipeline.config import Account
from pipeline.ingest import Ingest, WorkerPool
from pipeline.progress import NO_PROGRESS, Progress
from pipeline.reports import AccountReport, FolderReport, SyncOptions
from pipeline.store import MessageStore
from pipeline.sync.fetch import WORKER_FETCH_MIN, BodyFetch, gone, incoming_at
from pipeline.sync.plan import Plan, highest_uid, plan_folder, present_locations
from pipeline.sync.reassigned import check_reassigned, held_sample
from pipeline.sync.sources import Envelope, FolderState, ImapSource, not_on_server, vanished_events
from stores.errors import CursorMovedError, SourceError
from stores.events import Event, LocationVanished

__all__ = ["FolderSync"]


class FolderSync:
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
                held = held_sample(self.store, self.account.name, folder, state.uidvalidity, plan)
            plan = check_reassigned(self.src, state, plan, fr, held, self.report)
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
        except (SourceError, CursorMovedError) as exc:
            # (a cursor another commit moved meanwhile: this folder's batch is
            # discarded, the next run plans from where the cursor stands)
            fr.error = str(exc)
            self.report.folder_errors += 1
        return fr

    def _uids(self, state: FolderState, plan: Plan) -> list[int]:
        if plan.nothing_new:
            return []
        if plan.mode == "delta":
            return self.src.uids_above(plan.after_uid)
        if plan.mode == "since":
            since = self.account.initial.since
            assert since is not None  # (the "since" mode is read with its date)
            return self.src.uids_since(since)
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
        # (a first sync into a store that holds no message: no envelopes first)
        first = plan.cursor_from is None or plan.uidvalidity_changed
        dates = bool(uids) and first and not self.store.holds_messages()
        to_fetch = self._offer_known(folder, state, uids, ingest, fr, dates=dates)
        if len(to_fetch) < WORKER_FETCH_MIN:
            # a few bodies (a cron delta, a rescan's stragglers) are parsed here:
            # starting the worker processes would cost more (0.4-0.5 s)
            ingest.pool = None
        self.progress.start(len(to_fetch), f"{self.account.name} {folder}")
        fetch = BodyFetch(
            self.src,
            self.account,
            folder,
            state,
            ingest,
            fr,
            dates=dates,
            pool=self.pool,
            secret=self.secret,
            progress=self.progress,
        )
        failed = fetch.failed
        try:
            if fetch.wanted_in_workers(to_fetch):
                fetch.in_workers(to_fetch)
            else:
                fetch.here(to_fetch)
        except BaseException:
            ingest.flush()  # keep what was fetched; the cursor stays where it was
            self.report.counts.add(ingest.counts)
            raise
        finally:
            self.progress.close()
        for uid in failed:
            ingest.error(f"{self.account.name} {folder} uid={uid}", "FETCH failed")
        fr.failed_uids = sorted(failed)
        ingest.flush(self._cursor_moved(folder, state, plan, uids, failed, fr))
        c = ingest.counts
        fr.bodies, fr.known, fr.errors = fr.bodies + c.bodies_fetched, c.known_skipped, c.errors
        self.report.counts.add(c)

    def _offer_known(
        self,
        folder: str,
        state: FolderState,
        uids: list[int],
        ingest: Ingest,
        fr: FolderReport,
        *,
        dates: bool,
    ) -> list[Envelope]:
        """Offer ``ingest`` the messages of ``uids`` the store holds already (a
        location each, no body); return the envelopes of those to fetch. ``dates``:
        no envelopes are read (a first sync into an empty store): every UID is
        fetched, its INTERNALDATE with its body."""
        # Envelopes (Message-ID, size) tell which bodies the store holds already. A
        # store that holds no message at all holds none of them: its first sync
        # fetches the bodies at once (with their INTERNALDATE), one pass, not two.
        # (With no UID to take, as in every idle sync, the store is not asked; nor
        # for a folder synced before: its delta takes envelopes first, a hold of
        # the projections fewer, and finds a message moved from another folder.)
        if dates:
            # (their flags, which the envelopes would have carried: one FETCH FLAGS)
            flags = self.src.flags(uids) if uids else {}
            envelopes = [Envelope(uid, 0, None, None, flags.get(uid)) for uid in uids]
            self.src.internal_dates.clear()
        else:
            envelopes = list(self.src.envelopes(uids))
        by_uid = {e.uid: e for e in envelopes}
        gone(ingest, fr, len([u for u in uids if u not in by_uid]))
        if not dates and len(by_uid) > ingest.batch_size:
            # what the store holds at these places asked once, not by each batch
            # (and each chunk of the first) in turn: a first sync into a large store
            places = [(folder, state.uidvalidity, uid, None) for uid in by_uid]
            ingest.on_record(places, self.store.locations_at(self.account.name, places))
        owners: dict[str, str] = {}
        asked = [(e.message_id, e.size) for e in envelopes if e.message_id is not None]
        known = self.store.known_records(asked, owners=owners)
        # (the projections that answered held the log up to this seq, if any)
        ingest.absent(
            (i for i, _ in asked if i not in owners), self.store.projector.caught_up_seq, owners
        )
        to_fetch: list[Envelope] = []
        for env in envelopes:
            rec = known.get((env.message_id, env.size)) if env.message_id else None
            if rec is not None:
                ingest.offer_known(rec, incoming_at(folder, state, env))
            else:
                to_fetch.append(env)
        return to_fetch

    def _cursor_moved(
        self,
        folder: str,
        state: FolderState,
        plan: Plan,
        uids: list[int],
        failed: list[int],
        fr: FolderReport,
    ) -> list[Event]:
        """The ``cursor-moved`` event this folder's run ends with, if the cursor
        moves (or is set for the first time); committed with the last messages."""
        cursor_to = self._cursor_to(plan, state, uids, failed)
        extra: list[Event] = []
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
        return extra

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
        present = present_locations(rows)
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
        known = set(present) & on_server
        self._reconcile_flags(folder, [present[uid] for uid in sorted(known)], fr)
        return known

    def _reconcile_flags(self, folder: str, rows: list[dict[str, Any]], fr: FolderReport) -> None:
        """A ``flags-changed`` for each location on record (``rows``, still on the
        server) whose flags the server now shows otherwise: a delta only looks
        above the cursor, so a reconcile is where changes to older messages are
        seen. Counted in ``fr.flags_changed``; committed at once when applying."""
        if not rows:
            return
        shown = self.src.flags([r["uid"] for r in rows])
        changed = [
            self.store.events.flags_changed(
                source=self.account.name,
                folder=folder,
                uidvalidity=r["uidvalidity"],
                uid=r["uid"],
                message_id=r["message_id"],
                flags=shown[r["uid"]],
            )
            for r in rows
            if r["uid"] in shown and (r["flags"] is None or tuple(r["flags"]) != shown[r["uid"]])
        ]
        fr.flags_changed += len(changed)
        if changed and self.opts.apply:
            self.store.commit(changed)

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
            self.account.name, [(folder, plan.old_uidvalidity, highest_uid(cursor))]
        )
        old = list(present_locations(rows).values())
        fr.vanished += len(old)
        why = f"UIDVALIDITY changed {plan.old_uidvalidity} -> {state.uidvalidity}: old UIDs void"
        return vanished_events(self.store, self.account.name, old, why)

"""The sync of a POP3 account: UIDL list, skip what the store holds, RETR the
rest (README, "POP3 accounts").

POP3 has one mailbox (reported as folder ``INBOX``) and no cursor: the set of
UIDLs on record is the state, so a POP3 sync writes ``message-seen`` events
(the UIDL as location, the account name as source) and never a
``cursor-moved``. One run:

1. ``UIDL`` and ``LIST``: every message's UIDL and size.
2. One batched store query (:meth:`MessageStore.known_uidls`): which UIDLs are
   on record at this account or in a legacy GDBM import, and at what size.
3. A UIDL on record with the size the server lists is skipped: no RETR. A UIDL
   on record only at other sizes is a server that reused (or repeated) a UIDL
   for other content: it is downloaded, and when the content is indeed new it
   is recorded as a new location of a different message and counted
   (``uidl_reused``), never skipped silently. The check relies on the exact
   sizes RFC 1939 asks for (Dovecot gives them); a reused UIDL whose new
   content has exactly the old size is not detected.
4. ``RETR`` the rest (``--limit`` caps how many), committed in batches.
5. ``delete_after = "stored"``: only after the last commit of the run has
   returned, ``DELE`` every listed message whose UIDL and size are durable in
   the store, then ``QUIT`` (the server deletes only on QUIT). Any failure
   before that closes the connection without QUIT, so nothing is deleted; a
   message stored by a run that died before its DELE is deleted by the next.

UIDLs imported from the legacy GDBM store (``mailledger import gdbm``) count as
known: they are not downloaded again. They are deleted on the server
(``delete_after = "stored"``) only when the stored size equals the listed one.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from pipeline.config import Account, resolve_secret
from pipeline.ingest import Incoming, Ingest
from pipeline.progress import NO_PROGRESS, Progress, counted
from pipeline.reconcile import not_on_server
from pipeline.reports import AccountReport, FolderReport, SyncOptions
from pipeline.sources.pop3 import FOLDER, Pop3Entry, Pop3Source, plan_pop3, trim_terminator
from pipeline.store import MessageStore
from projections import queries
from stores.errors import MailledgerError, SourceError, TransientSourceError

__all__ = ["Pop3FolderReport", "sync_pop3_account"]

log = logging.getLogger("mailledger.pop3")


# -- the report -----------------------------------------------------------------


@dataclass
class Pop3FolderReport(FolderReport):
    """A POP3 mailbox's report: no cursor (``cursor=-``), UIDL counts instead.

    ``server_messages``: listed by the server; ``skipped``: their UIDLs already
    on record; ``new``: taken this run; ``uidl_reused``: taken because the size
    differed, and the content was indeed other than what that UIDL had;
    ``size_mismatch``: taken because the size differed, but the content was the
    one on record; ``deleted``: removed on the server (``delete_after``).
    """

    server_messages: int = 0
    skipped: int = 0
    uidl_reused: int = 0
    size_mismatch: int = 0
    deleted: int = 0
    would_delete: int | None = None
    failed_uidls: list[str] = field(default_factory=list)

    def line(self, account: str) -> str:
        text = (
            f"{self.mode} {account} {self.folder}: cursor=- uidls={self.server_messages}"
            f" skipped={self.skipped} new={self.new} bodies={self.bodies} errors={self.errors}"
        )
        extra = {
            "uidl_reused": self.uidl_reused,
            "size_mismatch": self.size_mismatch,
            "vanished": self.vanished,
            "deleted": self.deleted,
        }
        text += "".join(f" {key}={n}" for key, n in extra.items() if n)
        if self.failed_uidls:
            text += " failed_uidls=" + ",".join(self.failed_uidls[:20])
        if self.would_fetch is not None:
            text += f" dry-run would_fetch={self.would_fetch}"
            if self.would_delete:
                text += f" would_delete={self.would_delete}"
        if self.error:
            text += f" ERROR: {self.error}"
        return text


# -- one account ----------------------------------------------------------------


class _Pop3Sync:
    def __init__(
        self,
        store: MessageStore,
        src: Pop3Source,
        account: Account,
        opts: SyncOptions,
        report: AccountReport,
        emit: Callable[[str], None],
        progress: Progress = NO_PROGRESS,
    ) -> None:
        self.store = store
        self.progress = progress  # messages downloaded
        self.src = src
        self.account = account
        self.opts = opts
        self.report = report
        self.emit = emit

    def run(self) -> Pop3FolderReport:
        fr = Pop3FolderReport(folder=FOLDER, mode="delta")
        self.report.folders[FOLDER] = fr
        try:
            self._run(fr)
        except (MailledgerError, OSError) as exc:
            fr.error = str(exc)
            self.report.folder_errors += 1
        return fr

    def _has_history(self) -> bool:
        """Has this account ever recorded a message (else this run is its first contact)?"""
        return self.store.projector.read(queries.has_places, self.account.name)

    def _run(self, fr: Pop3FolderReport) -> None:
        name = self.account.name
        entries = self.src.listing()
        fr.server_messages = len(entries)
        if not self._has_history():
            fr.mode = "full"
        elif self.opts.reconcile:
            fr.mode = "reconcile"
        elif self.opts.mode_label:
            fr.mode = self.opts.mode_label
        known = self.store.known_uidls(name, [e.uidl for e in entries])
        plan = plan_pop3(entries, known)
        take = plan.take if self.opts.limit is None else plan.take[: self.opts.limit]
        fr.skipped = len(plan.skip)
        fr.new = len(take)
        delete = self.account.delete_after == "stored"
        if self.opts.reconcile:
            self._reconcile(entries, fr)
        if not self.opts.apply:
            fr.would_fetch = len(take)
            fr.would_delete = len(plan.deletable) + len(take) if delete else 0
            self.src.quit()
            return

        ingest = Ingest(self.store, name, batch_size=100, batch_bytes=8 << 20, network=True)
        fetched: list[tuple[Pop3Entry, str]] = []
        self.progress.start(len(take), f"{name} {FOLDER}")
        try:
            for e in counted(take, self.progress):  # (RETR: a message at a time)
                try:
                    raw = self.src.retr(e.number)
                except TransientSourceError:
                    raise
                except SourceError as exc:  # -ERR for this message: the session goes on
                    log.warning("%s: RETR uidl=%s failed: %s", name, e.uidl, exc)
                    ingest.error(f"{name} {FOLDER} uidl={e.uidl}", f"RETR failed: {exc}")
                    fr.failed_uidls.append(e.uidl)
                    continue
                raw = trim_terminator(raw, e.size)
                fr.bytes_fetched += len(raw)
                ingest.offer(Incoming(raw=raw, folder=FOLDER, uidl=e.uidl))
                fetched.append((e, hashlib.sha256(raw).hexdigest()))
            ingest.flush()
        except BaseException:
            # Keep what was downloaded; delete nothing (no DELE was sent, and the
            # connection is dropped without QUIT).
            try:
                ingest.flush()
            except Exception as exc:
                log.warning("%s: could not store the messages fetched so far: %s", name, exc)
            raise
        finally:
            self.progress.close()
            c = ingest.counts
            fr.bodies, fr.known, fr.errors = c.bodies_fetched, c.known_skipped, c.errors
            self.report.counts.add(c)

        for e, sha in fetched:
            shas = plan.suspect.get(e.uidl)
            if shas is None:
                continue
            if sha in shas:
                fr.size_mismatch += 1
            else:
                fr.uidl_reused += 1
        if fr.uidl_reused:
            self.emit(
                f"WARNING {name} {FOLDER}: {fr.uidl_reused} UIDL(s) reused by the server"
                " for other content: recorded as new locations"
            )

        if delete:
            # Every message here is durable: skipped ones were on record before this
            # run, fetched ones in a commit that has returned (ingest.flush above).
            durable = sorted(plan.deletable + [e for e, _ in fetched], key=lambda e: e.number)
            marked = 0
            try:
                for e in durable:
                    self.src.dele(e.number)
                    marked += 1
            except TransientSourceError:
                raise  # connection gone: nothing is deleted
            except SourceError as exc:
                fr.error = f"DELE failed ({exc}); {marked} of {len(durable)} deleted"
                self.report.folder_errors += 1
            self.src.quit()
            fr.deleted = marked
        else:
            self.src.quit()

    def _reconcile(self, entries: Sequence[Pop3Entry], fr: Pop3FolderReport) -> None:
        """Record the UIDLs on record here that the server no longer lists."""
        rows = self.store.projector.read(queries.uidl_places, self.account.name, FOLDER)
        gone = not_on_server(
            self.store,
            self.account.name,
            rows,
            {e.uidl for e in entries},
            key="uidl",
            reason="reconcile: not on the POP3 server",
            apply=self.opts.apply,
        )
        fr.vanished += len(gone)


def sync_pop3_account(
    store: MessageStore | None,
    account: Account,
    env: Mapping[str, str],
    opts: SyncOptions,
    *,
    emit: Callable[[str], None],
    source_factory: Callable[[Account, str], Pop3Source],
    progress: Progress = NO_PROGRESS,
) -> AccountReport:
    """Sync one POP3 account; every failure is confined to its report."""
    ar = AccountReport(name=account.name)
    try:
        secret = resolve_secret(account, env)
        with source_factory(account, secret) as src:
            if opts.measure:
                count, size = src.stat()
                emit(f"measure {account.name} {FOLDER}: messages={count} bytes={size}")
                ar.folders[FOLDER] = Pop3FolderReport(
                    folder=FOLDER, mode="measure", would_fetch=count, server_messages=count
                )
                src.quit()
                return ar
            assert store is not None
            fr = _Pop3Sync(store, src, account, opts, ar, emit, progress).run()
            emit(fr.line(account.name))
    except MailledgerError as exc:
        ar.error = str(exc)
        emit(f"error {account.name}: {exc}")
    return ar

"""A sync run over the configured accounts: each IMAP account's folders in turn
(failures isolated per account), each POP3 account through ``pipeline.sync.pop3``,
and what the server's folder list says about folders missing or gone.

Every account, folder and message is accounted for in the ``RunReport``; a run
whose sums do not balance has failed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from pipeline.bootstrap import Sources
from pipeline.config import Account, Config, resolve_secret
from pipeline.ingest import WorkerPool, worker_pool
from pipeline.progress import NO_PROGRESS, Progress
from pipeline.reports import AccountReport, FolderReport, RunReport, SyncOptions
from pipeline.store import MessageStore
from pipeline.sync.folder import FolderSync
from pipeline.sync.plan import highest_uid, present_locations
from pipeline.sync.sources import (
    FolderInfo,
    gone_folders,
    missing_attributes,
    missing_folders,
    select_folders,
    sync_pop3_account,
    vanished_events,
)
from stores.errors import MailledgerError, SourceError

__all__ = ["sync_accounts", "sync_fold_every"]

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
    secrets: Mapping[str, str] | None = None,
) -> RunReport:
    """Sync every configured IMAP and POP3 account (failures isolated per account).

    ``sources``: how each kind of server is reached (``App.sources``).
    ``progress``: told of each folder's bodies to fetch, as they arrive.
    ``secrets``: the secrets of accounts resolved already (by ``sync.idle``: a
    ``password_command`` is run once a run)."""
    report = RunReport(run_id=store.run_id if store else "measure", applied=opts.apply)
    saved = store.projector.fold_every if store else 0
    if store is not None:
        store.projector.fold_every = sync_fold_every(saved, store.log.last_seq())
    try:
        with worker_pool(opts.workers if opts.apply else 0) as pool:
            for name, account in config.accounts.items():
                if only and name not in only:
                    continue
                secret = (secrets or {}).get(name)
                _sync_account(
                    store, name, account, env, opts, report, emit, sources, pool, progress, secret
                )
    finally:
        if store is not None:
            store.projector.fold_every = saved
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
    secret: str | None = None,
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
        secret = secret if secret is not None else resolve_secret(account, env)
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
                fr = FolderSync(store, src, account, opts, ar, pool, secret, progress).run(
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
    spans = [(f, cursors[f]["uidvalidity"], highest_uid(cursors[f])) for f in gone]
    present = store.locations_in(name, spans)
    for folder in gone:
        rows = list(present_locations([r for r in present if r["folder"] == folder]).values())
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

"""A sync run that finds nothing new, answered without opening the store.

Most runs of a cron sync find every folder as it was. Such a run needs from the
store only each folder's cursor and a few UIDs it holds (to tell UIDs reassigned
under the same UIDVALIDITY): the cursor snapshot the projector keeps beside the
projections (``projections.snapshot``), read as JSON. Opening the store (DuckDB,
pyarrow: a third of a second before anything else) is left to the runs that
need it.

``try_idle`` talks to every account asked for as the full path would (LIST,
EXAMINE each folder, the envelopes of the sample), and answers the run only
when every folder plans as an idle delta from the snapshot's cursor (the same
``plan_folder``): same UIDVALIDITY, no UID above the cursor, and a sample of
held UIDs whose envelopes match. The report is then the one the full path
gives such a run: no event, no cursor moved, no body. Anything else (a POP3
account, a dry run, ``--reconcile``, a folder missing or unknown to the
snapshot, a snapshot made at another seq than the log's last, a log file not
yet checked, leftovers a crash left in the store, any error) gives up: the
full path runs, on the connections opened here (no second login).

The sample differs in one way: the full path probes 64 UIDs of the folder's
store afresh each run and checks five of them; here the five are drawn from the
pool of 64 the snapshot keeps (its lowest and highest UIDs included), probed
again at every fold.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.at_rest import settled_seq
from pipeline.bootstrap import Sources
from pipeline.config import Account, Config, resolve_secret
from pipeline.reports import AccountReport, FolderReport, RunReport, SyncOptions
from pipeline.sources.imap import (
    ImapSource,
    missing_attributes,
    missing_folders,
    select_folders,
)
from pipeline.sync.plan import checks_reassigned, plan_folder
from pipeline.sync.reassigned import pick_held, sample_rng, suspects
from projections import snapshot

__all__ = ["IdleAttempt", "try_idle"]

log = logging.getLogger("mailledger.sync")


class _NotIdle(Exception):
    """Something a full run must look at."""


@dataclass
class IdleAttempt:
    """What ``try_idle`` found: the run's ``report`` and the ``lines`` it prints
    when nothing changed (else None), the connections it opened and the secrets
    it resolved (a full run takes both)."""

    report: RunReport | None = None
    lines: list[str] = field(default_factory=list)
    opened: dict[str, ImapSource] = field(default_factory=dict)
    secrets: dict[str, str] = field(default_factory=dict)

    def sources(self, sources: Sources) -> Sources:
        """``sources``, handing each account the connection opened here first."""

        def imap(account: Account, secret: str) -> ImapSource:
            return self.opened.pop(account.name, None) or sources.imap(account, secret)

        return Sources(imap=imap, pop3=sources.pop3)

    def close(self) -> None:
        """Log out of the connections no full run took."""
        while self.opened:
            _, src = self.opened.popitem()
            src.close()


def try_idle(
    store_path: Path,
    config: Config,
    env: Mapping[str, str],
    opts: SyncOptions,
    *,
    only: set[str] | None,
    sources: Sources,
    run_id: str,
) -> IdleAttempt:
    """The run, answered from the cursor snapshot when nothing changed on the
    servers (see the module's doc); its ``report`` None otherwise."""
    attempt = IdleAttempt()
    accounts = [(n, a) for n, a in config.accounts.items() if not only or n in only]
    if not opts.apply or opts.reconcile or opts.measure or not accounts:
        return attempt
    if any(a.type != "imap" for _, a in accounts):
        return attempt  # a POP3 maildrop is planned from its UIDL list: the full path
    root = Path(store_path)
    cursors = _snapshot(root)
    if cursors is None:
        return attempt
    report = RunReport(run_id=run_id, applied=True)
    try:
        for name, account in accounts:
            report.accounts[name] = _account(
                name, account, env, opts, cursors, run_id, attempt, sources
            )
    except Exception as exc:  # (the full path meets it again, and reports it its way)
        log.debug("sync: the full path, since %s", exc)
        return attempt
    attempt.report = report
    attempt.close()
    return attempt


def _snapshot(root: Path) -> dict[tuple[str, str], dict[str, Any]] | None:
    """The snapshot's folders, when the store can be read at rest."""
    seq = settled_seq(root)
    return None if seq is None else snapshot.read(root, seq)


def _account(
    name: str,
    account: Account,
    env: Mapping[str, str],
    opts: SyncOptions,
    cursors: dict[tuple[str, str], dict[str, Any]],
    run_id: str,
    attempt: IdleAttempt,
    sources: Sources,
) -> AccountReport:
    """The account's report when each of its folders is idle; raises otherwise."""
    secret = attempt.secrets[name] = resolve_secret(account, env)
    src = sources.imap(account, secret)
    src.connect()
    attempt.opened[name] = src
    listed = src.list_folders()
    if missing_folders(listed, account.folders) or missing_attributes(listed, account.folders):
        raise _NotIdle("a folder asked for is missing")  # (reported by the full path)
    folders = select_folders(listed, account.folders, account.exclude)
    if not folders:
        raise _NotIdle("no folder")
    ar = AccountReport(name=name)
    for info in folders:
        cursor = cursors.get((name, info.name))
        if cursor is None:
            raise _NotIdle(f"{info.name}: not in the snapshot")
        state = src.examine(info.name)
        plan = plan_folder(cursor, state, account.initial)
        if state.uidnext is None or plan.mode != "delta" or plan.alarm or plan.error:
            raise _NotIdle(f"{info.name}: {plan.mode}")
        if not plan.nothing_new and src.uids_above(plan.after_uid):
            raise _NotIdle(f"{info.name}: new mail")
        pool = {h[0]: (h[1], h[2], h[3]) for h in cursor["held"]}
        rng = sample_rng(name, info.name, state.uidvalidity, run_id)
        held = pick_held(pool, rng) if checks_reassigned(plan) else {}
        if suspects(src, held):
            raise _NotIdle(f"{info.name}: held UIDs differ")  # (checked by the full path)
        fr = FolderReport(
            folder=info.name,
            mode="watch" if opts.mode_label else plan.mode,
            uidvalidity=state.uidvalidity,
            cursor_from=plan.cursor_from,
            cursor_to=plan.cursor_from,
        )
        ar.folders[info.name] = fr
        attempt.lines.append(fr.line(name))
    return ar

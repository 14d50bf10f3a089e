"""Between two ``sync --watch`` runs: wait for the server to report a change
(IMAP IDLE), the interval to pass, or a stop request.

IDLE reports changes from the moment it starts: mail delivered between the run's
scan of the folder and the IDLE would wait for the next change or the interval
(seen to wait 59 s of a 1 min interval). So the wait first asks the folder for
UIDs above where the run left its cursor (``Seen``, from the run's report): any
but those the run failed to take (they would wake it again at once, every time)
is mail the run did not see, and the wait ends at once."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from pipeline.bootstrap import Sources
from pipeline.config import Config, resolve_secret
from pipeline.sync.sources import select_folders
from stores.errors import MailledgerError

__all__ = ["Seen", "seen_in", "wait_for_change"]

Seen = dict[tuple[str, str], tuple[int, int, frozenset[int]]]
"""(account, folder) -> (UIDVALIDITY, the cursor the run left, UIDs it failed)."""


def seen_in(report: Any) -> Seen:
    """What a run's report says it saw of each folder it synced without error."""
    seen: Seen = {}
    for account, ar in report.accounts.items():
        for fr in ar.folders.values():
            if fr.error is None and fr.alarm is None and fr.uidvalidity is not None:
                failed = frozenset(fr.failed_uids)
                seen[(account, fr.folder)] = (fr.uidvalidity, fr.cursor_to or 0, failed)
    return seen


log = logging.getLogger("mailledger.sync")


def wait_for_change(
    config: Config,
    env: Mapping[str, str],
    seconds: float,
    stop: Any,
    *,
    only: set[str] | None = None,
    sources: Sources,
    seen: Seen | None = None,
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
                    folder = folders[0].name
                    mark = (seen or {}).get((account.name, folder))
                    if mark is not None:
                        state = src.examine(folder)
                        if state.uidvalidity != mark[0] or set(src.uids_above(mark[1])) - mark[2]:
                            return f"{account.name} {folder}: mail since the run looked"
                    first = mark is None
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

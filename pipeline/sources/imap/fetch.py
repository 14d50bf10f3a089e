"""Fetching bodies over IMAP: one chunk of UIDs at a time, a failure isolated to
its UID; in this process or in a worker process with a connection of its own.

A large first sync spends most of its time in the IMAP client parsing FETCH
answers (Python, holding the GIL) and in parsing and compressing the messages.
Worker processes each fetch whole chunks on their own connection, parse,
compress and store the blobs, and hand back only the parsed facts, while the
syncing process commits the events in UID order: the cursor rules stay where
they were (a cursor moves at the end of the folder, across durable UIDs only).
"""

from __future__ import annotations

import logging
import multiprocessing.util
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import NamedTuple

from pipeline.config import Account
from pipeline.prepare import Prepared, prepare
from pipeline.sources.imap.client import ImapSource
from stores.errors import SourceError

__all__ = ["Fetched", "fetch_bodies", "fetch_prepared"]

log = logging.getLogger("mailledger.sync")

# Timeouts in a row after which a folder stops (a stalled server would otherwise
# cost a timeout for every remaining message).
MAX_TIMEOUTS = 2


def timed_out(exc: BaseException) -> bool:
    """Whether a source error was a read or write that timed out (a stalled server)."""
    cause = exc.__cause__
    return isinstance(cause, TimeoutError) or "timed out" in str(cause or "")


def reopen(src: ImapSource, folder: str, uidvalidity: int) -> None:
    """A fresh connection with ``folder`` examined; a changed UIDVALIDITY ends the folder."""
    src.close()
    src.connect()
    again = src.examine(folder)
    if again.uidvalidity != uidvalidity:
        raise SourceError(
            f"{src.account.name} {folder}: UIDVALIDITY changed during the run"
            f" ({uidvalidity} -> {again.uidvalidity}); the next run rescans"
        )


def fetch_bodies(
    src: ImapSource,
    folder: str,
    uidvalidity: int,
    uids: Sequence[int],
    *,
    dates: bool,
    failed: list[int],
) -> dict[int, bytes]:
    """Bodies of ``uids`` (those still on the server); a failure is isolated to its
    UID, which goes to ``failed``, and the rest still come.

    A server may drop the connection after a failed FETCH (Dovecot does), so
    every failure is followed by a fresh connection and EXAMINE; a changed
    UIDVALIDITY on the way ends the folder (the next run rescans it). A server
    that stalls costs a timeout per FETCH: after two timeouts in a row the folder
    stops (an error; what was fetched is kept) rather than spend a timeout on
    every remaining message.
    """
    name = src.account.name
    timeouts = 0
    try:
        return src.bodies(uids, dates=dates)
    except SourceError as exc:
        timeouts = int(timed_out(exc))
        log.warning("%s %s: FETCH of %d bodies failed (%s); one at a time", name, folder,
                    len(uids), exc)  # fmt: skip
        reopen(src, folder, uidvalidity)
    out: dict[int, bytes] = {}
    for uid in uids:
        try:
            out.update(src.bodies([uid], dates=dates))
            timeouts = 0
        except SourceError as exc:
            log.warning("%s %s: FETCH uid=%d failed: %s", name, folder, uid, exc)
            timeouts = timeouts + 1 if timed_out(exc) else 0
            if timeouts >= MAX_TIMEOUTS:
                raise SourceError(
                    f"{name} {folder}: {timeouts} FETCHes in a row timed out"
                    f" (the last for uid {uid}); the folder stops here, the next run goes on"
                ) from exc
            failed.append(uid)
            reopen(src, folder, uidvalidity)
    return out


class Fetched(NamedTuple):
    """What a worker made of one chunk of UIDs."""

    got: list[tuple[int, Prepared, datetime | None]]  # (uid, prepared, INTERNALDATE)
    nbytes: list[int]  # the size of each body in ``got``
    failed: list[int]  # the server failed their FETCH
    vanished: list[int]  # no longer on the server


# This worker process's connection, by (account name, folder, UIDVALIDITY): kept
# for the next chunk, logged out when another folder comes or the process ends.
_open: dict[tuple[str, str, int], ImapSource] = {}
_finalizer: list[multiprocessing.util.Finalize] = []


def _source(
    make: Callable[[Account, str], ImapSource],
    account: Account,
    secret: str,
    folder: str,
    uidvalidity: int,
) -> ImapSource:
    key = (account.name, folder, uidvalidity)
    src = _open.get(key)
    if src is not None and src.connected:
        return src
    _close_all()
    if not _finalizer:  # (a worker process ends by os._exit: atexit never runs)
        _finalizer.append(multiprocessing.util.Finalize(None, _close_all, exitpriority=10))
    src = make(account, secret)
    reopen(src, folder, uidvalidity)
    _open[key] = src
    return src


def _close_all() -> None:
    for src in _open.values():
        src.close()
    _open.clear()


def fetch_prepared(
    make: Callable[[Account, str], ImapSource],
    account: Account,
    secret: str,
    folder: str,
    uidvalidity: int,
    uids: list[int],
    dates: bool,
    blobs_root: str,
    held: dict[int, frozenset[str]] | None,
) -> Fetched:
    """In a worker: fetch the bodies of ``uids`` on this process's own connection
    (made by ``make``: the class the composition root chose for the sync), then
    parse, compress and store them (``prepare``). ``held`` names, by position in
    ``uids``, contents on record for a since deleted message at that place
    (returned encoded, not written: see ``Ingest._commit``)."""
    src = _source(make, account, secret, folder, uidvalidity)
    failed: list[int] = []
    bodies = fetch_bodies(src, folder, uidvalidity, uids, dates=dates, failed=failed)
    present = [i for i, uid in enumerate(uids) if uid in bodies]
    raws = [bodies[uids[i]] for i in present]
    kept = {j: held[i] for j, i in enumerate(present) if held and i in held}
    prepared = prepare(raws, blobs_root, kept or None)
    got = [
        (uids[i], p, src.internal_dates.get(uids[i]) if dates else None)
        for i, p in zip(present, prepared, strict=True)
    ]
    src.internal_dates.clear()
    gone = [u for u in uids if u not in bodies and u not in failed]
    return Fetched(got, [len(r) for r in raws], failed, gone)

"""The bodies of a folder's new messages: fetched on the sync's own connection a
chunk at a time, or, for a large folder, by the worker processes on connections
of their own, a few chunks ahead of the commits; offered to ``ingest`` in UID
order either way."""

from __future__ import annotations

import itertools
from collections import deque
from typing import Any

from pipeline.config import Account
from pipeline.ingest import Incoming, Ingest, WorkerPool
from pipeline.progress import Progress
from pipeline.reports import FolderReport
from pipeline.sync.sources import (
    Envelope,
    Fetched,
    FolderState,
    ImapSource,
    fetch_bodies,
    fetch_prepared,
)

__all__ = ["WORKER_FETCH_MIN", "BodyFetch", "gone", "incoming_at"]

_BODY_CHUNK = 100
_BODY_CHUNK_BYTES = 8 << 20
# A folder with this many bodies to fetch has them fetched by the workers (when
# there are workers), each on an IMAP connection of its own, this many chunks
# ahead of the commits. Measured on 10,000 messages (2 cores, loopback Dovecot):
# 4.0-4.5 s when this process fetched them, 3.7-3.8 s.
WORKER_FETCH_MIN = 3 * _BODY_CHUNK
# Chunks in flight: enough for the workers to go on through a fold of this
# process (0.2-0.25 s, about 1,000 messages at their pace) instead of waiting on
# it. What waits here is facts, not bodies: about 3 MB for 12 chunks. 4 -> 12:
# median 3.64 -> 3.48 s over 12 alternating rounds (3.89 -> 3.69 s over 8).
_WORKER_AHEAD = 12
_WORKER_BATCH = 1000


class BodyFetch:
    """Fetches the bodies of one ``folder`` (in ``state``) from ``src`` and offers
    them to ``ingest``: on this connection (``here``), or in ``pool`` with the
    account's ``secret`` (``in_workers``). ``dates``: the bodies are fetched with
    their INTERNALDATE (no envelopes were read first). The UIDs whose FETCH
    failed are gathered in ``failed``; the bytes and the vanished UIDs are
    counted in ``fr``."""

    def __init__(
        self,
        src: ImapSource,
        account: Account,
        folder: str,
        state: FolderState,
        ingest: Ingest,
        fr: FolderReport,
        *,
        dates: bool,
        pool: WorkerPool | None,
        secret: str | None,
        progress: Progress,
    ) -> None:
        self.src = src
        self.account = account
        self.folder = folder
        self.state = state
        self.ingest = ingest
        self.fr = fr
        self.dates = dates
        self.pool = pool
        self.secret = secret  # for the workers' own connections
        self.progress = progress
        self.failed: list[int] = []

    def here(self, to_fetch: list[Envelope]) -> None:
        """Bodies fetched on this process's connection, a chunk at a time, offered
        to ``ingest`` (whose workers, if any, parse and store them)."""
        for chunk in _chunks(to_fetch):
            got = self._bodies(chunk)
            for env in chunk:
                raw = got.get(env.uid)
                if raw is None:
                    if env.uid not in self.failed:  # gone between envelope and body
                        gone(self.ingest, self.fr, 1)
                    continue
                self.fr.bytes_fetched += len(raw)
                self.ingest.offer(
                    Incoming(
                        raw=raw,
                        folder=self.folder,
                        uidvalidity=self.state.uidvalidity,
                        uid=env.uid,
                        internal_date=env.internal_date or self.src.internal_dates.get(env.uid),
                        flags=env.flags,
                    )
                )
            self.progress.advance(len(chunk))  # a FETCH of at most 100 bodies or 8 MB

    def wanted_in_workers(self, to_fetch: list[Envelope]) -> bool:
        """Whether worker processes fetch these bodies on connections of their own:
        a run with workers, on a real IMAP source, with enough to fetch that more
        connections pay (a cron delta of a few messages keeps to this one)."""
        return (
            self.pool is not None
            and self.secret is not None
            and type(self.src) is ImapSource
            and len(to_fetch) >= WORKER_FETCH_MIN
        )

    def in_workers(self, to_fetch: list[Envelope]) -> None:
        """Bodies fetched, parsed and stored by the workers, a chunk each at a time,
        a few chunks ahead; their facts offered to ``ingest`` in UID order, as the
        fetch in this process would. A worker's error ends the folder here, after
        the chunks before it (later ones are dropped: their blobs, if written, are
        named by no event, as after a crash)."""
        pool, secret = self.pool, self.secret
        assert pool is not None and secret is not None
        # this process holds the messages' facts, not their bytes: fewer, larger
        # commits cost no memory (main process CPU 1.8 -> 1.5 s on 10,000 messages)
        self.ingest.batch_size = max(self.ingest.batch_size, _WORKER_BATCH)
        # This connection would idle through the whole fetch, and a server may
        # drop an idle session: it is given back now (one connection fewer at the
        # provider), and the next folder opens it again.
        self.src.close()
        chunks = _chunks(to_fetch)
        by_uid = {e.uid: e for e in to_fetch}
        pending: deque[Any] = deque()

        def submit(chunk: list[Envelope]) -> None:
            uids = [e.uid for e in chunk]
            held = self.ingest.held([incoming_at(self.folder, self.state, e) for e in chunk])
            pending.append(
                pool.submit(
                    fetch_prepared, type(self.src), self.account, secret, self.folder,
                    self.state.uidvalidity, uids, self.dates, self.ingest.blobs_root, held,
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
                    self.fr.bytes_fetched += n
                    self.ingest.offer_prepared(
                        Incoming(
                            raw=b"",
                            folder=self.folder,
                            uidvalidity=self.state.uidvalidity,
                            uid=uid,
                            internal_date=env.internal_date or idate,
                            flags=env.flags,
                        ),
                        prepared,
                    )
                self.failed.extend(done.failed)
                gone(self.ingest, self.fr, len(done.vanished))
                self.progress.advance(len(done.got) + len(done.failed) + len(done.vanished))
        finally:
            for fut in pending:
                fut.cancel()
            # the workers' part of this folder is done: idle, they would keep their
            # memory and connections through the fold and any smaller folder after
            pool.release(cancel=True)

    def _bodies(self, chunk: list[Envelope]) -> dict[int, bytes]:
        """Bodies of a chunk on this process's connection (see ``fetch_bodies``)."""
        uids = [e.uid for e in chunk]
        return fetch_bodies(
            self.src,
            self.folder,
            self.state.uidvalidity,
            uids,
            dates=self.dates,
            failed=self.failed,
        )


def incoming_at(folder: str, state: FolderState, env: Envelope) -> Incoming:
    """Where a message of ``env`` is, for ``ingest``: its bytes come later, if at all."""
    return Incoming(
        raw=b"",
        folder=folder,
        uidvalidity=state.uidvalidity,
        uid=env.uid,
        internal_date=env.internal_date,
        flags=env.flags,
    )


def gone(ingest: Ingest, fr: FolderReport, n: int) -> None:
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

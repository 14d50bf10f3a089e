"""A consumer's checkpoint: where one named, non-destructive reader of the store
is, kept in a file of its own beside the log."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from email.message import EmailMessage
from typing import Any

from pipeline.store import MessageStore
from projections import queries
from stores.atomic import replace_file
from stores.errors import MailledgerError

__all__ = ["Consumer", "consume"]

_CONSUMER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*\Z")


class Consumer:
    """A named, non-destructive reader of the messages stored since its checkpoint.

    Its state is ``STORE/consumers/NAME.json``: ``seq``, the log position up to
    which every stored message was acknowledged, and ``acked``, the positions
    above it acknowledged out of order (they are not handed over again). The
    file is replaced atomically (temporary file, fsync, rename, directory
    fsync), so a checkpoint commit happens exactly once or not at all; a
    consumer killed at any point resumes from its last commit and hands over
    again only what was not yet acknowledged (at-least-once at the handler).

    Why a file and not an event in the log: a checkpoint is where one reader
    is, not a fact about mail. Writing it into the log would add an event type
    to the shared schema, grow the log with every acknowledgement and make
    the truth depend on reader bookkeeping; ``replay``, ``compact`` and
    ``purge`` never need it. Seqs never change (compaction keeps them), so the
    file stays valid across those. Losing the file only means handing
    everything over again, never losing a message.

    A "new stored message" is a primary record whose winning ``message-seen``
    has a seq above the checkpoint: a later sighting of the same Message-ID
    (a new location) is not new; a message deleted and seen again is.
    Only one process may use a consumer at a time (an flock on ``NAME.lock``).
    """

    def __init__(self, store: MessageStore, name: str) -> None:
        if not _CONSUMER_NAME.match(name):
            raise MailledgerError(f"consumer name {name!r}: use letters, digits, '.', '_' and '-'")
        self.store = store
        self.name = name
        self.dir = store.root / "consumers"
        self.path = self.dir / f"{name}.json"
        self._lock_fd: int | None = None
        self.seq = 0
        self.acked: set[int] = set()

    # -- lifecycle
    def __enter__(self) -> Consumer:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open(self) -> None:
        self.dir.mkdir(mode=0o700, exist_ok=True)
        fd = os.open(self.dir / f"{self.name}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise MailledgerError(
                    f"consumer {self.name!r} is in use by another process"
                ) from None
            raise
        self._lock_fd = fd
        self._load()

    def close(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None

    def _load(self) -> None:
        try:
            state = json.loads(self.path.read_text())
        except FileNotFoundError:
            self.seq, self.acked = 0, set()
            return
        except (OSError, ValueError) as exc:
            raise MailledgerError(f"{self.path}: unreadable checkpoint: {exc}") from None
        self.seq = int(state.get("seq", 0))
        self.acked = {int(s) for s in state.get("acked", ()) if int(s) > self.seq}

    def _save(self) -> None:
        state = {"name": self.name, "seq": self.seq, "acked": sorted(self.acked)}
        replace_file(self.path, (json.dumps(state) + "\n").encode())

    # -- reading
    def pending(self) -> tuple[int, list[dict[str, Any]]]:
        """``(bound, messages)``: the log's last seq when asked, and every stored
        message above the checkpoint not yet acknowledged, oldest first (each a
        dict of ``seq``, ``message_id``, ``to_addrs``)."""
        if self._lock_fd is None:
            raise MailledgerError(f"consumer {self.name!r} is not open")
        bound = self.store.log.last_seq()
        rows = self.store.projector.read(queries.recipients_after, self.seq)
        return bound, [r for r in rows if r["seq"] not in self.acked]

    def ack(self, seqs: Iterable[int], delivered: Sequence[int], bound: int) -> int:
        """Acknowledge ``seqs`` and commit the checkpoint; returns the new ``seq``.

        ``delivered`` are the seqs of every message ``pending`` returned with
        ``bound``: the checkpoint moves to just before the first of them still
        unacknowledged, or to ``bound`` when none is.
        """
        self.acked |= set(seqs)
        open_seqs = (s for s in delivered if s > self.seq and s not in self.acked)
        first_open = min(open_seqs, default=None)
        new = bound if first_open is None or first_open > bound else first_open - 1
        self.seq = max(self.seq, new)
        self.acked = {s for s in self.acked if s > self.seq}
        self._save()
        return self.seq

    def messages(self) -> Iterator[tuple[str, EmailMessage]]:
        """Yield each new stored message once; a message is acknowledged when the
        loop asks for the next one (a crash or ``break`` in the loop body leaves
        it pending for the next run)."""
        bound, rows = self.pending()
        delivered = [r["seq"] for r in rows]
        for r in rows:
            yield r["message_id"], self.store.message(r["message_id"])
            self.ack([r["seq"]], delivered, bound)
        if not rows and bound > self.seq:
            self.ack([], delivered, bound)


def consume(store: MessageStore, name: str) -> Iterator[tuple[str, EmailMessage]]:
    """``for msg_id, msg in consume(store, "indexer"): ...`` — each new stored
    message exactly once across runs (see :class:`Consumer`)."""
    with Consumer(store, name) as consumer:
        yield from consumer.messages()

"""The composition root: what one run of mailledger is made of, built once.

The command line builds one ``App`` per process: its clock, its run id (on every
event it writes, see ``pipeline.event_factory``), the stores it opens with them,
and the factories of the sources a sync talks to. Library callers and tests
may build their own ``App`` with a clock and sources of theirs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pipeline.clock import Clock, SystemClock, new_run_id

if TYPE_CHECKING:
    from pipeline.config import Account
    from pipeline.sources.imap import ImapSource
    from pipeline.sources.pop3 import Pop3Source
    from pipeline.store import MessageStore

__all__ = ["App", "KeptStores", "Sources"]


@dataclass(frozen=True)
class Sources:
    """How a sync reaches a server: ``(account, secret) -> source``, per kind."""

    imap: Callable[[Account, str], ImapSource]
    pop3: Callable[[Account, str], Pop3Source]


class KeptStores(Protocol):
    """Stores a process keeps open from one run to the next: the store at ``path``
    as this run's (its clock and run id), or None when it keeps no such store."""

    def __call__(
        self, path: Path, *, clock: Clock, run_id: str, check: bool
    ) -> MessageStore | None: ...


class App:
    """One run: ``clock``, ``run_id``, ``open_store``, ``sources``."""

    def __init__(
        self,
        env: Mapping[str, str],
        *,
        clock: Clock | None = None,
        sources: Sources | None = None,
        kept: KeptStores | None = None,
    ) -> None:
        self.env = env
        self.clock: Clock = clock or SystemClock()
        self.run_id = new_run_id(self.clock)
        self._sources = sources
        self._kept = kept

    def next_run(self) -> App:
        """The next run of the same process (each ``sync --watch`` cycle is a run
        of its own, with its own run id), with this one's clock and sources."""
        return App(self.env, clock=self.clock, sources=self._sources, kept=self._kept)

    @cached_property
    def sources(self) -> Sources:
        """The real servers' clients (imported when a sync first asks: ssl and
        imapclient cost a reading command 50 ms it does not need)."""
        if self._sources is not None:
            return self._sources
        from pipeline.sources.imap import ImapSource
        from pipeline.sources.pop3 import Pop3Source

        return Sources(imap=ImapSource, pop3=Pop3Source)

    def open_store(
        self,
        path: Path | str,
        *,
        create: bool = False,
        check: bool = True,
        memory: int | None = None,
    ) -> MessageStore:
        """The store at ``path``, writing this run's events; ``memory``: the budget of
        its rebuilds (None: its default). A process given ``kept`` stores (a served
        command's worker) gets the one it kept open from an earlier command."""
        from pipeline.store import MessageStore

        store = None
        if self._kept is not None and not create:
            store = self._kept(Path(path), clock=self.clock, run_id=self.run_id, check=check)
        if store is None:
            store = MessageStore.open(
                path, create=create, check=check, clock=self.clock, run_id=self.run_id
            )
        if memory is not None:
            store.projector.memory_budget = memory
        return store

    def now(self) -> Any:
        return self.clock.now()

"""A store's projection file kept open across many reads, and let go for a writer.

Opening the file per read costs what a read itself costs at 100,000 messages (the
ATTACH, the checks of its version and of the log, every block DuckDB reads again).
A process that answers reads one after another (``serve --listen``'s web children,
``serve``'s command workers) keeps it instead, and asks before each read whether
what it keeps is still the store as it stands:

- a writer wants the file (``stores.db.writer_waiting``: a ``sync`` or an
  ``import`` in another process announced itself): let go, and wait for that
  writer to finish before the file is opened again, so that readers taking turns
  cannot keep it held at every instant the writer tries;
- the log has events the file lacks, or the file was replaced (a rebuild renamed
  over it): let go, and the next read opens it as a new process would (catching
  up first), so a commit made elsewhere is seen as when each read opened the file.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path

from pipeline.store import MessageStore
from stores.db import wait_for_writer, writer_waiting

__all__ = ["Keeper"]


class Keeper:
    """``store``'s projection file, kept between ``keep()`` and ``let_go()``."""

    def __init__(self, store: MessageStore, on_let_go: Callable[[], object] | None = None) -> None:
        self.store = store
        self._on_let_go = on_let_go  # (told when the file is let go: caches of it dropped)
        self._held: contextlib.ExitStack | None = None  # the session kept
        self._file: tuple[int, int] | None = None  # the file's (device, inode) then

    @property
    def held(self) -> bool:
        return self._held is not None

    def writer_waiting(self) -> bool:
        return writer_waiting(self.store.projector.db_path)

    def stale(self) -> bool:
        """True when what is kept is no longer the store as it stands."""
        projector = self.store.projector
        return self._held is not None and (
            self.store.log.last_seq() != projector.caught_up_seq
            or _file_id(projector.db_path) != self._file
            or self.writer_waiting()
        )

    def keep(self) -> None:
        """The file kept from now on (let go first when ``stale``); a writer that
        wants it is waited for before it is opened again."""
        if self.stale():
            self.let_go()
        if self._held is None:
            path = self.store.projector.db_path
            if writer_waiting(path):
                wait_for_writer(path)
            self._file = _file_id(path)
            held = contextlib.ExitStack()
            held.enter_context(self.store.session())
            self._held = held

    def let_go(self) -> None:
        """The file released (other processes may write it)."""
        held, self._held = self._held, None
        if held is not None:
            held.close()
            if self._on_let_go is not None:
                self._on_let_go()


def _file_id(path: Path) -> tuple[int, int] | None:
    """(device, inode) of ``path``: another once a rebuild was renamed over it."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino

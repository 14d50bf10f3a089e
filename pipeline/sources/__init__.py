"""Where mail comes from: one module per kind of source, side by side.

- ``imap/``: an IMAP account (``imap.client`` the socket shell, ``imap.response``
  the pure reading of the server's answers, ``imap.fetch`` bodies fetched in
  chunks, in this process or a worker's);
- ``pop3``: a POP3 maildrop (the connection and the plan of a run);
- ``maildir``, ``files``, ``mbox``, ``gdbm``: mail people already have on disk
  (``maildir`` and ``files``, trees of one-message files, share the walk and the
  source of ``tree``).

The file sources are one interface, :class:`MessageSource`, which the one
import driver (``pipeline.importing.run_import``) drives. The two servers are
built by the composition root (``pipeline.bootstrap.Sources``) and driven by the
sync (``pipeline.sync``, ``pipeline.sync.pop3``), each by its own protocol: an
IMAP folder is planned from a cursor and read as envelopes, then bodies; a POP3
maildrop is planned from its UIDL list and read a message at a time, then
emptied. What they share is a connection's life (``with factory(account,
secret) as src``); a call shared beyond that would only forward.

This package's ``__init__`` imports nothing heavy: worker processes import
``pipeline.sources.imap.fetch`` and must load neither pyarrow nor DuckDB.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from pipeline.ingest import Incoming, RunCounts
    from pipeline.progress import Progress

__all__ = ["MessageSource"]


class MessageSource(Protocol):
    """A store of mail on disk, read once from start to end by an import.

    ``label`` is the ``source`` every event of the import carries
    (``import:mbox:/abs/path``); ``lookahead`` the batches the driver may leave
    to the workers before it commits the oldest (a source that hands paths, not
    bytes, holds no message in this process and can let more wait).
    """

    @property
    def label(self) -> str: ...

    @property
    def lookahead(self) -> int: ...

    def messages(self, progress: Progress) -> Iterator[tuple[Incoming, int]]:
        """Each message with the progress units it stands for, in the source's
        order. A source that cannot be read raises before its first message
        (``UsageError``), so the driver starts no worker for it; ``progress`` is
        started here, with the total the source can tell cheaply."""
        ...

    def finish(self, counts: RunCounts, progress: Progress) -> None:
        """After the last commit: add to ``counts`` and ``progress`` what the
        source itself counted (files skipped as not mail, bytes between messages)."""
        ...

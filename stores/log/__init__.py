"""The Parquet event log: the only truth of a store.

``event_log`` (``EventLog``: append under the writer lock, read, check, verify,
compact, rewrite), ``files`` (file names and the kept directory listing),
``reading`` (events after a seq or at given seqs), ``checks`` (whether a file is
whole, and the cache of files found whole). The digest of a file's rows is
``stores.digest``.
"""

from typing import TYPE_CHECKING

from stores.log.files import LogFile

if TYPE_CHECKING:
    from stores.digest import legacy_table_digest, table_digest
    from stores.log.event_log import EventLog
    from stores.log.reading import read_columns

__all__ = ["EventLog", "LogFile", "legacy_table_digest", "read_columns", "table_digest"]


def __getattr__(name: str) -> object:
    # (imported when first asked: ``files`` and ``checks`` are read without pyarrow
    # by a sync that finds nothing new)
    if name == "EventLog":
        from stores.log.event_log import EventLog

        return EventLog
    if name == "read_columns":
        from stores.log.reading import read_columns

        return read_columns
    if name in ("legacy_table_digest", "table_digest"):
        from stores import digest

        return getattr(digest, name)
    raise AttributeError(name)

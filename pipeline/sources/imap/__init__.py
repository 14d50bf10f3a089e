"""An IMAP account as a source: ``client`` the socket shell, ``response`` the
pure reading of the server's answers, ``folders`` the scope rules of a
sync, ``fetch`` bodies fetched in chunks (in a worker process too)."""

from __future__ import annotations

from pipeline.sources.imap.client import ImapSource
from pipeline.sources.imap.folders import (
    DEFAULT_EXCLUDED,
    gone_folders,
    missing_attributes,
    missing_folders,
    select_folders,
)
from pipeline.sources.imap.response import (
    Envelope,
    FolderInfo,
    FolderState,
    fetch_item_key,
    fetch_items,
)

__all__ = [
    "DEFAULT_EXCLUDED",
    "Envelope",
    "FolderInfo",
    "FolderState",
    "ImapSource",
    "fetch_item_key",
    "fetch_items",
    "gone_folders",
    "missing_attributes",
    "missing_folders",
    "select_folders",
]

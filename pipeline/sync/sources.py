"""What the sync takes from the sources, imported here once for the whole package:
the IMAP source and its folder facts, the workers' fetch, the POP3 account sync,
the one reconcile, and the parser's synthetic Message-ID rule. Where the sources
live is written in this file alone."""

from pipeline.parse import synthetic_message_id
from pipeline.reconcile import not_on_server, vanished_events
from pipeline.sources.imap import (
    Envelope,
    FolderInfo,
    FolderState,
    ImapSource,
    gone_folders,
    missing_attributes,
    missing_folders,
    select_folders,
)
from pipeline.sources.imap.fetch import Fetched, fetch_bodies, fetch_prepared
from pipeline.sync.pop3 import sync_pop3_account

__all__ = [
    "Envelope",
    "Fetched",
    "FolderInfo",
    "FolderState",
    "ImapSource",
    "fetch_bodies",
    "fetch_prepared",
    "gone_folders",
    "missing_attributes",
    "missing_folders",
    "not_on_server",
    "select_folders",
    "sync_pop3_account",
    "synthetic_message_id",
    "vanished_events",
]

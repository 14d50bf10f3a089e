"""Names vulture (``make lint``) takes for dead code that is used, each with the
reason it cannot see the use. vulture matches attributes by name, anywhere.
"""

# ruff: noqa: B018

import importlib.machinery
from html.parser import HTMLParser

from argparse_manpage.manpage import Manpage
from tqdm import tqdm

import pipeline
from pipeline.held_code import HeldCode
from pipeline.ingest import RunCounts
from pipeline.reports import FolderReport
from pipeline.serve import protocol
from stores.blobs import BlobStore
from stores.events import CursorMoved, Event, MessageSeen, UidvalidityChanged
from stores.purge import PurgeReport

# Event fields are read by name: ``events_to_table`` lists each class's fields
# (``dataclasses.fields``) and reads them with one ``attrgetter`` into the log's
# columns of the same names; what reads them back reads the columns.
Event.recorded_at
MessageSeen.date_offset_min
MessageSeen.from_addr
MessageSeen.to_addrs
MessageSeen.in_reply_to
MessageSeen.list_id
UidvalidityChanged.new_uidvalidity

# ``PurgeReport.as_dict`` copies the fields as they are; the CLI prints this one
# by its key.
PurgeReport.files_rewritten

# Used by the storage campaign (torture/storage.py) to damage one blob in place.
BlobStore.location

# The modes a cursor moves in: the event strategies of the test kit draw from it.
CursorMoved.MODES

# The module-level attribute hook (PEP 562): Python calls it for a missing name.
pipeline.__getattr__

# Callbacks the standard library's HTMLParser calls (pipeline/render.py).
HTMLParser.handle_starttag
HTMLParser.handle_endtag
HTMLParser.handle_data

# A class attribute tqdm reads on the bar's subclass (pipeline/progress.py):
# 0 turns its monitor thread off.
tqdm.monitor_interval

# Read by argparse-manpage when it prints the page (pipeline/cli/docs.py).
Manpage.manual

# Reaches the JSON report through ``as_dict()``; tests assert it.
FolderReport.bytes_fetched
RunCounts.bytes_read

# The import system calls a meta-path finder's loader by these names, and reads the
# spec's has_location (``__file__`` set from the origin).
HeldCode.exec_module
importlib.machinery.ModuleSpec.has_location

# CPython's C JSON scanner (``_json.make_scanner``) reads these attributes of the
# context object it is given (``pipeline.serve.protocol._Reading``).
protocol._Reading.strict
protocol._Reading.object_hook
protocol._Reading.object_pairs_hook
protocol._Reading.parse_float
protocol._Reading.parse_int
protocol._Reading.parse_constant

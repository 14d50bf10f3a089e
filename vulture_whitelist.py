"""Names vulture (``make lint``) takes for dead code that is used, each with the
reason it cannot see the use. vulture matches attributes by name, anywhere.
"""

# ruff: noqa: B018

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

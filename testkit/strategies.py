"""Hypothesis strategies for realistic events of every type (any text, any
date from 1900 to 2100, Unicode folders and sources), for the log's tests."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import strategies as st

from stores.events import (
    CursorMoved,
    LocationVanished,
    MessageDeleted,
    MessageSeen,
    UidvalidityChanged,
)

__all__ = [
    "any_event",
    "cursor_moved",
    "location_vanished",
    "message_deleted",
    "message_seen",
    "uidvalidity_changed",
]

text = st.text(st.characters(exclude_categories=["Cs"]), max_size=24)
opt_text = st.none() | text
u32 = st.integers(1, 2**32 - 1)
opt_u32 = st.none() | u32
when = st.datetimes(
    min_value=datetime(1900, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
)
texts = st.lists(text, max_size=4).map(tuple)
msgid = st.one_of(st.builds(lambda a, b: f"{a}@{b}", text, text), st.just("CAF=x+Y@mail.gmail.com"))
source = st.sampled_from(["gmail", "work", "import:maildir:/home/ann/Maildir", "pop:ünï"])
folder = st.sampled_from(["INBOX", "[Gmail]/Wszystkie", "Archiv/2026", ""]) | text
mode = st.sampled_from(sorted(CursorMoved.MODES))
common = {"run_id": text, "recorded_at": when}

message_seen = st.builds(
    MessageSeen,
    **common,
    source=source,
    folder=folder,
    message_id=msgid,
    sha256=st.binary(min_size=32, max_size=32).map(bytes.hex),
    size=st.integers(0, 2**40),
    uidvalidity=opt_u32,
    uid=opt_u32,
    uidl=opt_text,
    internal_date=st.none() | when,
    headers=st.lists(st.tuples(text, text), max_size=5).map(tuple),
    date_utc=st.none() | when,
    date_offset_min=st.none() | st.integers(-720, 840),
    from_addr=opt_text,
    to_addrs=texts,
    in_reply_to=st.none() | msgid,
    references=st.lists(msgid, max_size=4).map(tuple),
    list_id=opt_text,
    subject=opt_text,
    synthetic_id=st.booleans(),
    defects=texts,
)
message_deleted = st.builds(MessageDeleted, **common, message_id=msgid, actor=text, reason=text)
uidvalidity_changed = st.builds(
    UidvalidityChanged,
    **common,
    source=source,
    folder=folder,
    old_uidvalidity=opt_u32,
    new_uidvalidity=u32,
    action=st.sampled_from(["rescan", "alarm+rescan"]) | text,
    mode=mode,
)
cursor_moved = st.builds(
    CursorMoved,
    **common,
    source=source,
    folder=folder,
    uidvalidity=u32,
    cursor_from=opt_u32,
    cursor_to=u32,
    mode=mode,
    reason=text,
    uidnext=opt_u32,
)
location_vanished = st.builds(
    LocationVanished,
    **common,
    source=source,
    folder=folder,
    message_id=msgid,
    uidvalidity=opt_u32,
    uid=opt_u32,
    uidl=opt_text,
    reason=text,
)
any_event = st.one_of(
    message_seen, message_deleted, uidvalidity_changed, cursor_moved, location_vanished
)

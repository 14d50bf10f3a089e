"""Event types of the mailledger log and the one Arrow schema that holds them all.

The log is a single wide table: every event type fills the columns it needs and
leaves the rest NULL. One schema for the whole log keeps files plain Parquet that
any engine can read with ``SELECT * FROM read_parquet('log/*.parquet')``.

Schema version 1. Types and columns may be added in later versions; none may be
changed or removed (an old log must always replay).
"""

from __future__ import annotations

import dataclasses
import itertools
import operator
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar

import pyarrow as pa

__all__ = [
    "EVENT_TYPES",
    "SCHEMA",
    "SCHEMA_VERSION",
    "CursorMoved",
    "Event",
    "FlagsChanged",
    "LocationVanished",
    "MessageDeleted",
    "MessageSeen",
    "UidvalidityChanged",
    "events_from_table",
    "events_to_table",
]

SCHEMA_VERSION = 1

_TS = pa.timestamp("us", tz="UTC")
_HEADER = pa.struct([("name", pa.string()), ("value", pa.string())])

SCHEMA = pa.schema(
    [
        # common to every event
        ("seq", pa.int64(), False),
        ("type", pa.string(), False),
        ("schema_version", pa.int16(), False),
        ("run_id", pa.string(), False),
        ("recorded_at", _TS, False),
        # location: where a source showed us something
        ("source", pa.string()),
        ("folder", pa.string()),
        ("uidvalidity", pa.int64()),
        ("uid", pa.int64()),
        ("uidl", pa.string()),
        # the message
        ("message_id", pa.string()),
        ("sha256", pa.string()),
        ("size", pa.int64()),
        ("internal_date", _TS),
        ("headers", pa.list_(_HEADER)),
        ("date_utc", _TS),
        ("date_offset_min", pa.int32()),
        ("from_addr", pa.string()),
        ("to_addrs", pa.list_(pa.string())),
        ("in_reply_to", pa.string()),
        ("references", pa.list_(pa.string())),
        ("list_id", pa.string()),
        ("subject", pa.string()),
        ("synthetic_id", pa.bool_()),
        ("defects", pa.list_(pa.string())),
        # message-deleted
        ("actor", pa.string()),
        ("reason", pa.string()),
        # uidvalidity-changed
        ("old_uidvalidity", pa.int64()),
        ("new_uidvalidity", pa.int64()),
        ("action", pa.string()),
        # cursor-moved
        ("cursor_from", pa.int64()),
        ("cursor_to", pa.int64()),
        ("uidnext", pa.int64()),
        ("mode", pa.string()),
        # added in schema version 1 (a file written before lacks it: read as NULL):
        # the flags a source showed at the location (message-seen, flags-changed),
        # in IMAP's spelling (``projections.normalize.flags``); NULL where the
        # source has none to show
        ("flags", pa.list_(pa.string())),
    ],
    metadata={"mailledger.schema_version": str(SCHEMA_VERSION)},
)


@dataclass(frozen=True, kw_only=True)
class Event:
    """Fields every event carries. ``seq`` is None until the log commits it."""

    type: ClassVar[str] = ""
    run_id: str
    recorded_at: datetime
    seq: int | None = None


@dataclass(frozen=True, kw_only=True)
class MessageSeen(Event):
    """A source showed us a message at a location."""

    type: ClassVar[str] = "message-seen"
    source: str
    folder: str
    message_id: str
    sha256: str
    size: int
    uidvalidity: int | None = None
    uid: int | None = None
    uidl: str | None = None
    internal_date: datetime | None = None
    headers: tuple[tuple[str, str], ...] = ()
    date_utc: datetime | None = None
    date_offset_min: int | None = None
    from_addr: str | None = None
    to_addrs: tuple[str, ...] = ()
    in_reply_to: str | None = None
    references: tuple[str, ...] = ()
    list_id: str | None = None
    subject: str | None = None
    synthetic_id: bool = False
    defects: tuple[str, ...] = ()
    flags: tuple[str, ...] | None = None


@dataclass(frozen=True, kw_only=True)
class MessageDeleted(Event):
    """The store dropped a message (a handler finished with it, or a person deleted it)."""

    type: ClassVar[str] = "message-deleted"
    message_id: str
    actor: str
    reason: str = ""


@dataclass(frozen=True, kw_only=True)
class UidvalidityChanged(Event):
    """A folder's UIDVALIDITY differs from its cursor's."""

    type: ClassVar[str] = "uidvalidity-changed"
    source: str
    folder: str
    old_uidvalidity: int | None
    new_uidvalidity: int
    action: str
    mode: str = "full"


@dataclass(frozen=True, kw_only=True)
class CursorMoved(Event):
    """A folder's cursor moved from ``cursor_from`` to ``cursor_to``."""

    type: ClassVar[str] = "cursor-moved"
    source: str
    folder: str
    uidvalidity: int
    cursor_from: int | None
    cursor_to: int
    mode: str
    reason: str
    uidnext: int | None = None

    MODES: ClassVar[frozenset[str]] = frozenset(
        {"full", "since", "new-only", "delta", "watch", "reconcile"}
    )


@dataclass(frozen=True, kw_only=True)
class LocationVanished(Event):
    """A reconcile found a message gone from a server folder; the store keeps it."""

    type: ClassVar[str] = "location-vanished"
    source: str
    folder: str
    message_id: str
    uidvalidity: int | None = None
    uid: int | None = None
    uidl: str | None = None
    reason: str = ""


@dataclass(frozen=True, kw_only=True)
class FlagsChanged(Event):
    """A source showed other flags for a message at a location already on record
    (a Maildir file renamed ``:2,S`` -> ``:2,RS``, an IMAP message flagged): the
    location keeps its content, its flags are these from now on."""

    type: ClassVar[str] = "flags-changed"
    source: str
    folder: str
    message_id: str
    flags: tuple[str, ...]
    uidvalidity: int | None = None
    uid: int | None = None
    uidl: str | None = None


EVENT_TYPES: dict[str, type[Event]] = {
    cls.type: cls
    for cls in (
        MessageSeen,
        MessageDeleted,
        UidvalidityChanged,
        CursorMoved,
        LocationVanished,
        FlagsChanged,
    )
}

_TUPLE_FIELDS = {"to_addrs", "references", "defects"}
_LIST_FIELDS = frozenset({"headers", "flags", *_TUPLE_FIELDS})


def _field_names(cls: type[Event]) -> tuple[str, ...]:
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


_FIELD_NAMES: dict[type[Event], tuple[str, ...]] = {}


def _columns(events: Sequence[Event]) -> Mapping[str, Sequence[Any]]:
    """The field values of ``events`` by column, None where an event's type lacks the
    field; columns no event has are left out.

    Events are grouped by type and each group's fields are read with one attrgetter
    and transposed with ``zip``: no per-event, per-field Python loop.
    """
    groups: dict[type[Event], list[int]] = {}
    for i, ev in enumerate(events):
        idx = groups.get(type(ev))
        if idx is None:
            idx = groups[type(ev)] = []
        idx.append(i)
    if len(groups) == 1:  # the usual batch: an import's message-seen events
        names = _field_names(type(events[0]))  # every type has several fields: tuples
        rows = map(operator.attrgetter(*names), events)
        return dict(zip(names, zip(*rows, strict=True), strict=True))
    n = len(events)
    columns: dict[str, list[Any]] = {}
    for cls, idx in groups.items():
        names = _field_names(cls)
        rows = map(operator.attrgetter(*names), [events[i] for i in idx])
        for name, values in zip(names, zip(*rows, strict=True), strict=True):
            column = columns.get(name)
            if column is None:
                column = columns[name] = [None] * n
            for i, v in zip(idx, values, strict=True):
                column[i] = v
    return columns


def _list_array(values: Sequence[Any], item: pa.DataType) -> pa.Array:
    """A list column from Python sequences (None for a NULL list), built from one
    flat child and offsets: no Python list or dict per row or per header."""
    mask = None
    try:
        lengths = list(map(len, values))
    except TypeError:  # a NULL list (or a value that is no sequence: len raises again)
        lengths = [0 if v is None else len(v) for v in values]
        mask = pa.array([v is None for v in values], pa.bool_())
        values = [() if v is None else v for v in values]
    offsets = pa.array([0, *itertools.accumulate(lengths)], pa.int32())
    flat = list(itertools.chain.from_iterable(values))
    if pa.types.is_struct(item):  # headers: (name, value) pairs
        child: pa.Array = pa.StructArray.from_arrays(
            [
                pa.array(list(map(operator.itemgetter(0), flat)), item.field(0).type),
                pa.array(list(map(operator.itemgetter(1), flat)), item.field(1).type),
            ],
            fields=list(item),
        )
    else:
        child = pa.array(flat, item)
    return pa.ListArray.from_arrays(offsets, child, type=pa.list_(item), mask=mask)


def events_to_table(events: Sequence[Event], first_seq: int | None = None) -> pa.Table:
    """Rows of the log schema for ``events``; assigns seq from ``first_seq`` when given.

    Built column by column, list columns from flat children and offsets: per-event,
    per-field Python work is most of what an append costs.
    """
    n = len(events)
    columns = _columns(events)
    arrays: list[pa.Array] = []
    for field in SCHEMA:
        name = field.name
        values = columns.get(name)
        if name == "type":
            values = [ev.type for ev in events]
        elif name == "schema_version":
            values = [SCHEMA_VERSION] * n
        elif name == "seq" and first_seq is not None:
            values = range(first_seq, first_seq + n)
        if values is None:
            arrays.append(pa.nulls(n, field.type))
        elif name in _LIST_FIELDS:
            arrays.append(_list_array(values, field.type.value_type))
        else:
            arrays.append(pa.array(values, field.type))
    return pa.Table.from_arrays(arrays, schema=SCHEMA)


def _utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def events_from_table(table: pa.Table) -> list[Event]:
    """Typed events for the rows of a log table (the inverse of ``events_to_table``)."""
    out: list[Event] = []
    for row in table.to_pylist():
        cls = EVENT_TYPES[row["type"]]
        kwargs: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            value = row.get(f.name)
            if f.name == "headers":
                value = tuple((h["name"], h["value"]) for h in value or ())
            elif f.name in _TUPLE_FIELDS:
                value = tuple(value or ())
            elif f.name == "flags" and value is not None:
                value = tuple(value)
            elif isinstance(value, datetime):
                value = _utc(value)
            if value is None and f.default is not dataclasses.MISSING:
                value = f.default
            kwargs[f.name] = value
        out.append(cls(**kwargs))
    return out


def batch_of(events: Iterable[Event]) -> list[Event]:
    """Events as a list, checked to be uncommitted (no seq yet)."""
    batch = list(events)
    for ev in batch:
        if ev.seq is not None:
            raise ValueError(f"event already committed at seq {ev.seq}")
    return batch

"""The digest of a log file's rows, stored in its Parquet metadata so that a file
edited behind mailledger's back is named.

Two formats: ``v2:`` and hex over a canonical form of the Arrow buffers
(``table_digest``, what is written); bare hex over the rows as JSON
(``legacy_table_digest``), still checked in files written before ``v2``, until a
compaction or purge rewrites them.
"""

from __future__ import annotations

import array
import hashlib
import json
import struct
import sys
from typing import Protocol

import pyarrow as pa

from stores import arrow
from stores.events import SCHEMA

__all__ = ["digest_matches", "legacy_table_digest", "table_digest"]


class _Hasher(Protocol):
    def update(self, data: bytes | memoryview, /) -> None: ...


_V2 = "v2:"  # marks a digest of the canonical form; the first (JSON) format is bare hex
_LITTLE = sys.byteorder == "little"
# variable-length types: how their offsets are stored (native byte order, width)
_VARLEN: dict[pa.DataType, tuple[str, int]] = {
    pa.string(): ("=i", 4),
    pa.binary(): ("=i", 4),
    pa.large_string(): ("=q", 8),
    pa.large_binary(): ("=q", 8),
}


def legacy_table_digest(table: pa.Table) -> str:
    """The first digest format (JSON of every value), bare hex: still checks the files
    written before ``table_digest`` replaced it; never written any more."""
    h = hashlib.sha256()
    for name in SCHEMA.names:
        if name not in table.column_names:
            continue  # a column added after the file was written: not part of its digest
        values = table.column(name).to_pylist()
        h.update(name.encode())
        h.update(json.dumps(values, default=str, ensure_ascii=False).encode())
    return h.hexdigest()


def table_digest(table: pa.Table) -> str:
    """A sha256 over the rows of ``table`` in a canonical, engine-independent form,
    as stored in a file's metadata (``v2:`` and hex).

    Computed from Arrow buffers, never value by value: an append pays for it on
    every batch. Each column of the schema that the table has (in schema order) is
    cast to its schema type and fed as its name and its canonical bytes (see
    ``_feed_array``), every part prefixed with its length: the digest depends on the
    logical values only, not on chunking, slicing, validity bitmaps or the engine
    that wrote the file.
    """
    h = hashlib.sha256(b"mailledger.digest.v2\0")
    _feed(h, table.num_rows.to_bytes(8, "little"))
    present = set(table.column_names)
    for field in SCHEMA:
        if field.name not in present:
            continue  # a column added after the file was written: not part of its digest
        column = table.column(field.name)
        if column.type != field.type:
            column = column.cast(field.type)  # e.g. large_string from another writer
        _feed(h, field.name.encode())
        _feed_array(h, column.combine_chunks())
    return _V2 + h.hexdigest()


def digest_matches(table: pa.Table, stored: bytes) -> bool:
    """Whether ``table`` has the digest a file's metadata holds, in whichever format."""
    text = stored.decode(errors="replace")
    if text.startswith(_V2):
        return table_digest(table) == text
    return legacy_table_digest(table) == text


def _feed(h: _Hasher, data: bytes | pa.Buffer) -> None:
    """One part of the canonical form, prefixed with its length (so parts never run
    into each other)."""
    view = memoryview(data)
    h.update(view.nbytes.to_bytes(8, "little"))
    h.update(view)


def _int64_bytes(arr: pa.Array) -> bytes | pa.Buffer:
    """The values of an int64 array without nulls, little-endian, slice offset applied."""
    buf = arr.buffers()[1]
    if buf is None:
        return b""
    data = buf.slice(arr.offset * 8, len(arr) * 8)
    if _LITTLE:
        return data
    swapped = array.array("q", bytes(data))
    swapped.byteswap()
    return swapped.tobytes()


def _lengths(lengths: pa.Array) -> bytes | pa.Buffer:
    """Per-row lengths as int64, -1 for NULL."""
    if lengths.null_count:
        lengths = lengths.fill_null(-1)
    return _int64_bytes(lengths.cast(pa.int64()))


def _null_mask(arr: pa.Array) -> bytes | pa.Buffer:
    """One byte per row, 1 for NULL (whether or not the array has a validity bitmap)."""
    n, nulls = len(arr), arr.null_count
    if nulls == 0:
        return bytes(n)
    if nulls == n:
        return b"\x01" * n
    mask = arrow.compute().is_null(arr).cast(pa.uint8())
    return mask.buffers()[1].slice(mask.offset, n)


def _feed_array(h: _Hasher, arr: pa.Array) -> None:
    """The canonical bytes of ``arr``: for strings and binaries the lengths (-1 NULL)
    then the bytes of the non-NULL values; for lists the lengths then the values of
    the non-NULL lists; for structs the NULL mask then each field (NULL where the
    struct is); for integers, timestamps and booleans the NULL mask then the values
    as int64 with NULL as 0. Every integer is little-endian."""
    t, n = arr.type, len(arr)
    if t in _VARLEN:
        if arr.null_count == n:
            _feed(h, b"\xff" * (8 * n))
            _feed(h, b"")
            return
        _feed(h, _lengths(arrow.compute().binary_length(arr)))
        values = arr.drop_null() if arr.null_count else arr  # a NULL's slot may hold bytes
        _feed(h, _value_bytes(values))
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        _feed(h, _lengths(arrow.compute().list_value_length(arr)))
        _feed_array(h, arr.flatten())  # the values of non-NULL lists, slice applied
    elif pa.types.is_struct(t):
        _feed(h, _null_mask(arr))
        for child in arr.flatten():  # struct NULLs become the children's NULLs
            _feed_array(h, child)
    elif pa.types.is_integer(t) or pa.types.is_timestamp(t) or pa.types.is_boolean(t):
        _feed(h, _null_mask(arr))
        values = arr.cast(pa.int64())
        if values.null_count:
            values = values.fill_null(0)
        _feed(h, _int64_bytes(values))
    else:
        raise TypeError(f"no canonical digest form for {t}")


def _value_bytes(arr: pa.Array) -> bytes | pa.Buffer:
    """The concatenated bytes of a string or binary array's values, slice applied."""
    offsets, data = arr.buffers()[1], arr.buffers()[2]
    if data is None or len(arr) == 0:
        return b""
    fmt, width = _VARLEN[arr.type]
    (start,) = struct.unpack_from(fmt, offsets, arr.offset * width)
    (end,) = struct.unpack_from(fmt, offsets, (arr.offset + len(arr)) * width)
    return data.slice(start, end - start)

"""The pack file format: many encoded blobs in one file.

A pack is a run of self-describing records (``MLR1``, sha256, length, encoded
blob) followed by an index of them (sha256, offset, length) and a trailer with
the index's crc32; a pack whose index is damaged is read by scanning its
records, so damage costs the blobs it touches, not the pack.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path

__all__ = ["Entry", "encode_pack", "pack_records", "read_entries"]

_RECORD = struct.Struct(">4s32sQ")  # b"MLR1", sha256 (raw), length of the encoded blob
_RECORD_MAGIC = b"MLR1"
_ENTRY = struct.Struct(">32sQQ")  # sha256 (raw), offset of the encoded blob, its length
_TRAILER = struct.Struct(">4sIIQ")  # b"MLPX", entries, crc32 of the index, index offset
_TRAILER_MAGIC = b"MLPX"

Entry = tuple[str, int, int]  # sha256 (hex), offset of the encoded blob, its length


def encode_pack(records: Sequence[tuple[str, bytes]]) -> tuple[list[bytes], list[Entry]]:
    """The bytes of a pack of ``records`` (sha256, encoded blob), as parts to write
    in order, and its entries."""
    parts: list[bytes] = []
    index: list[bytes] = []
    entries: list[Entry] = []
    at = 0
    for sha, encoded in records:
        raw_sha = bytes.fromhex(sha)
        head = _RECORD.pack(_RECORD_MAGIC, raw_sha, len(encoded))
        parts += (head, encoded)
        index.append(_ENTRY.pack(raw_sha, at + len(head), len(encoded)))
        entries.append((raw_sha.hex(), at + len(head), len(encoded)))
        at += len(head) + len(encoded)
    raw_index = b"".join(index)
    parts += (raw_index, _TRAILER.pack(_TRAILER_MAGIC, len(index), zlib.crc32(raw_index), at))
    return parts, entries


def read_entries(path: Path) -> tuple[list[Entry], str | None]:
    """The entries of the pack at ``path`` from its index, and None; or, when the
    index is damaged, those found by scanning its records, and what is wrong."""
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size >= _TRAILER.size:
            fh.seek(size - _TRAILER.size)
            magic, count, crc, at = _TRAILER.unpack(fh.read(_TRAILER.size))
            if magic == _TRAILER_MAGIC and at + count * _ENTRY.size == size - _TRAILER.size:
                fh.seek(at)
                raw = fh.read(count * _ENTRY.size)
                if zlib.crc32(raw) == crc:
                    entries = [
                        (sha.hex(), off, length) for sha, off, length in _ENTRY.iter_unpack(raw)
                    ]
                    return entries, None
        fh.seek(0)
        data = fh.read()
    out = list(pack_records(data))
    end = out[-1][1] + out[-1][2] if out else 0
    return out, (
        f"{path}: index damaged or pack cut short; {len(out)} blobs"
        f" read by scanning its records up to byte {end} of {len(data)}"
    )


def pack_records(data: bytes) -> Iterator[tuple[str, int, int]]:
    """(sha256, offset, length) of each blob record of pack bytes ``data``, in
    order, up to the first damaged one (read without the pack's index)."""
    at = 0
    while at + _RECORD.size <= len(data):
        magic, sha, length = _RECORD.unpack_from(data, at)
        if magic != _RECORD_MAGIC or at + _RECORD.size + length > len(data):
            return
        yield sha.hex(), at + _RECORD.size, length
        at += _RECORD.size + length

"""The on-disk form of one blob: a small header (magic, codec, original size),
then zstd frames or the raw bytes; and the sha256 that addresses it."""

from __future__ import annotations

import hashlib
import struct
import threading
from pathlib import Path

import zstandard

from stores.errors import BlobIntegrityError

__all__ = ["decode_blob", "encode_blob", "sha256_hex"]

_MAGIC = b"MLB1"
_HEADER = struct.Struct(">4sBQ")  # magic, codec (0 raw, 1 zstd), original size
_RAW, _ZSTD = 0, 1


def sha256_hex(data: bytes) -> str:
    """The content address of ``data``."""
    return hashlib.sha256(data).hexdigest()


# zstd level 1: what blobs were always written with (Arrow's default level, when
# pyarrow compressed them), so old and new blobs are the same frames. zstandard
# rather than pyarrow: a worker process that fetches, parses and stores mail then
# loads neither pyarrow nor DuckDB (25 MB and 0.1 s to start instead of 85 MB and
# 0.35 s). Its (de)compressor objects are not thread-safe: one per thread.
_ZSTD_LEVEL = 1
_zstd = threading.local()


def _compressor() -> zstandard.ZstdCompressor:
    c = getattr(_zstd, "c", None)
    if c is None:
        c = _zstd.c = zstandard.ZstdCompressor(level=_ZSTD_LEVEL)
    return c


def _decompressor() -> zstandard.ZstdDecompressor:
    d = getattr(_zstd, "d", None)
    if d is None:
        d = _zstd.d = zstandard.ZstdDecompressor()
    return d


def encode_blob(data: bytes) -> bytes:
    """The on-disk form of ``data``: a small header, then zstd (or the raw bytes when
    compression does not pay). Pure, so a worker process can do it."""
    compressed = _compressor().compress(data) if data else b""
    if len(compressed) < len(data):
        return _HEADER.pack(_MAGIC, _ZSTD, len(data)) + compressed
    return _HEADER.pack(_MAGIC, _RAW, len(data)) + data


def decode_blob(sha: str, blob: bytes, where: Path | str) -> bytes:
    """The raw bytes of ``blob`` (as ``encode_blob`` wrote it), or BlobIntegrityError
    naming blob ``sha`` and ``where`` it was read when the bytes are not whole."""
    if len(blob) < _HEADER.size:
        raise BlobIntegrityError(f"blob {sha} in {where} is truncated")
    magic, codec, size = _HEADER.unpack_from(blob)
    payload = blob[_HEADER.size :]
    if magic != _MAGIC or codec not in (_RAW, _ZSTD):
        raise BlobIntegrityError(f"blob {sha} in {where} has no mailledger header")
    if codec == _RAW:
        if len(payload) != size:
            raise BlobIntegrityError(f"blob {sha} in {where} is truncated")
        return payload
    try:
        # streamed: a damaged frame header claiming an absurd size allocates nothing
        data = _decompressor().decompressobj().decompress(payload)
    except (zstandard.ZstdError, MemoryError) as exc:
        raise BlobIntegrityError(f"blob {sha} in {where} does not decompress: {exc}") from exc
    if len(data) != size:
        raise BlobIntegrityError(
            f"blob {sha} in {where} does not decompress: {len(data)} bytes, not {size}"
        )
    return data

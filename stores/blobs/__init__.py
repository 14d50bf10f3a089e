"""Raw messages, content-addressed by sha256 and compressed, under ``blobs/``.

Two layouts, both always read:

- ``blobs/ab/abcd...``: one file per blob (single writes: ``put``);
- ``blobs/packs/*.pack``: many blobs in one file (bulk writes: ``put_many``, what
  imports and syncs use). Creating a file costs far more than writing its bytes
  on many file systems (about 0.4 ms an inode on the ext4 this was measured on:
  40 s for 100,000 messages), so a batch of blobs is one file (``pack``).

Where packs hold each blob is kept in ``blobs/.packs.sqlite`` (``index``). The
file is derived: a pack it does not list (written by a process killed before it
recorded it) is indexed when a reader lists the directory, and a damaged or
missing file is built again from the packs.

Every file is written to a temporary name and renamed into place, so a crash
never leaves a partial blob or pack under its final name. Durability is bought
once per batch with ``flush()`` (one ``syncfs`` of the store's file system
instead of one fsync per message), and the event log calls it before it commits
the events that name the blobs: a blob is durable before the event that names it.

The modules: ``codec`` (one blob's bytes), ``pack`` (the pack file format),
``index`` (the SQLite pack index), ``fs`` (syncfs, reads by offset), ``store``
(``BlobStore``, over all of them).
"""

from stores.blobs.codec import decode_blob, encode_blob, sha256_hex
from stores.blobs.index import Location
from stores.blobs.pack import pack_records
from stores.blobs.store import BlobStore

__all__ = ["BlobStore", "Location", "decode_blob", "encode_blob", "pack_records", "sha256_hex"]

"""The cursor snapshot: ``STORE/cursors.json``, a projection small enough to read
without DuckDB.

It holds the counts ``stats`` prints and, for each folder the store has
synced, its cursor (uidvalidity, last_uid, uidnext) and a pool of the UIDs held
there (each with its Message-ID, sha256 and size: what a sync compares with the
server's envelopes to tell a UID reassigned), with the log's seq it was made at
and the version of the rules it was made by. The projector rewrites it after
every fold and every rebuild; a sync that finds nothing new on the servers
answers from it alone (``pipeline.sync.idle``), and so does ``stats``
(``pipeline.at_rest``). Like every projection it is disposable: missing,
unreadable or made at another seq than the log's last, it is not used, and the
store is opened as before.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stores.atomic import replace_file, unique_name

if TYPE_CHECKING:  # (an idle sync reads the snapshot without pyarrow or DuckDB)
    import pyarrow as pa

__all__ = [
    "PROJECTION_VERSION",
    "SNAPSHOT_NAME",
    "Touched",
    "drop",
    "read",
    "read_counts",
    "write",
]

# Bump when a table's shape or a fold's rule changes; a store whose projections
# carry another version is rebuilt by replay (projections are disposable).
# (Kept here, beside the one projection read without DuckDB.)
PROJECTION_VERSION = 11  # 11: locations.flags, flags_seq

SNAPSHOT_NAME = "cursors.json"
_FORMAT = "mailledger-cursor-snapshot"
_VERSION = 1


def write(root: Path, seq: int, folders: list[dict[str, Any]], counts: dict[str, int]) -> None:
    """Replace the snapshot of the store at ``root``: ``folders`` (see
    ``projections.queries.snapshot_folders``) and the ``counts`` ``stats`` prints
    (``projections.queries.counts``) as the projections hold them at ``seq``.

    Not fsynced: a snapshot lost in a crash (or left from before it: made at
    another seq) is only not used. It names the store's place: a store moved since
    is opened (its open points the ``events`` view kept in the projections at the
    new place, for stock DuckDB) before its snapshot is used again."""
    doc = {
        "format": _FORMAT,
        "version": _VERSION,
        "projection_version": PROJECTION_VERSION,
        "seq": seq,
        "root": os.path.realpath(root),
        "folders": folders,
        "counts": counts,
    }
    path = root / SNAPSHOT_NAME
    tmp = unique_name(path, prefix=f".{SNAPSHOT_NAME}.")
    replace_file(path, json.dumps(doc, separators=(",", ":")).encode(), durable=False, tmp=tmp)


def read(root: Path, seq: int) -> dict[tuple[str, str], dict[str, Any]] | None:
    """``(account, folder) -> folder`` of the snapshot of the store at ``root``,
    when it was made at ``seq`` (the log's last) by these rules; None otherwise
    (missing, unreadable, stale, another format)."""
    doc = _load(root, seq)
    try:
        folders = {(f["account"], f["folder"]): f for f in doc["folders"]} if doc else None
        for f in (folders or {}).values():
            _check_folder(f)
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    return folders


def read_counts(root: Path, seq: int) -> dict[str, int] | None:
    """The counts ``stats`` prints, from the snapshot of the store at ``root``
    made at ``seq``; None as ``read``."""
    doc = _load(root, seq)
    counts = doc.get("counts") if doc else None
    if not isinstance(counts, dict) or not all(type(v) is int for v in counts.values()):
        return None
    return counts


def _load(root: Path, seq: int) -> dict[str, Any] | None:
    """The snapshot's document when made at ``seq`` by these rules, else None."""
    try:
        doc = json.loads((root / SNAPSHOT_NAME).read_bytes())
    except (OSError, ValueError):
        return None
    if (
        not isinstance(doc, dict)
        or doc.get("format") != _FORMAT
        or doc.get("version") != _VERSION
        or doc.get("projection_version") != PROJECTION_VERSION
        or doc.get("seq") != seq
        or doc.get("root") != os.path.realpath(root)
    ):
        return None
    return doc


def _check_folder(f: dict[str, Any]) -> None:
    """Raise ValueError unless ``f`` has the shape ``write`` gives a folder."""
    ints = ("uidvalidity", "last_uid", "uidnext")
    if not all(f[k] is None or type(f[k]) is int for k in ints):
        raise ValueError(f"not a folder: {f!r}")
    for uid, message_id, sha, size in f["held"]:
        if type(uid) is not int or not isinstance(message_id, str) or not isinstance(sha, str):
            raise ValueError(f"not a held UID: {uid!r}")
        if size is not None and type(size) is not int:
            raise ValueError(f"not a size: {size!r}")


def drop(root: Path) -> None:
    """Remove the snapshot (the projections are being dropped)."""
    with contextlib.suppress(FileNotFoundError):
        (root / SNAPSHOT_NAME).unlink()


class Touched:
    """The places (account, folder) that events of a fold name, and whether any
    deletes a message (a held UID's record may be gone): what a fold may have
    changed of the cursor snapshot's folders."""

    def __init__(self) -> None:
        self.places: set[tuple[str, str]] = set()
        self.deletes = False

    def watch(self, chunks: Iterable[pa.Table]) -> Iterator[pa.Table]:
        """``chunks``, passed through, noting what each names."""
        from projections.fold.batch import DELETED  # (the folds import this module)

        for chunk in chunks:
            self.places.update(_places(chunk))
            self.deletes = self.deletes or DELETED in chunk.column("type").unique().to_pylist()
            yield chunk

    def untouched(
        self, before: dict[tuple[str, str], dict[str, Any]] | None
    ) -> dict[tuple[str, str], dict[str, Any]] | None:
        """The folders of the snapshot ``before`` that none of these events touched."""
        if before is None or self.deletes:
            return None
        return {key: f for key, f in before.items() if key not in self.places}


def _places(chunk: pa.Table) -> set[tuple[str, str]]:
    """The distinct (source, folder) pairs of the events of ``chunk``.

    Each column dictionary-encoded (a null its own entry), a pair is one integer
    of the two codes, and the distinct integers are decoded again: as fast as a
    group-by, without importing Arrow's query engine (acero: 9 ms of every sync)
    for it."""
    import pyarrow as pa

    from projections.fold.batch import pc

    source, folder = (
        pc().dictionary_encode(chunk.column(name).combine_chunks(), null_encoding="encode")
        for name in ("source", "folder")
    )
    width = max(len(folder.dictionary), 1)
    codes = pc().add(
        pc().multiply(source.indices.cast(pa.int64()), width), folder.indices.cast(pa.int64())
    )
    sources, folders = source.dictionary.to_pylist(), folder.dictionary.to_pylist()
    return {(sources[c // width], folders[c % width]) for c in pc().unique(codes).to_pylist()}

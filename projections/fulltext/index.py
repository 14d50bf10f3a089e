"""The full-text projection's file, ``STORE/fulltext.sqlite``: one SQLite FTS5
table over the text of every stored message, kept in step with ``messages``.

- Contentless (``content=''``): the index holds terms and positions, not the
  text, so it stays small (about 0.4x the text). Removing a message means giving
  FTS5 the exact text that was indexed: it is extracted again from the blob
  (``docs`` keeps which blob), with the same extractor.
- ``secure-delete``: a removed message's terms are overwritten in place, and
  ``PRAGMA secure_delete`` zeroes freed pages; after a WAL checkpoint its bytes
  are in no file of the index (the erasure campaign's byte search checks it).
- The rowid of a message (its key, ``queries.fulltext.doc_key``) orders it by
  week: "the newest 50 matches" read the newest weeks' matches backwards,
  however many messages match. ``docs`` maps each key to the message's winning
  seq (``messages.seq``) and keeps its date (the order within a week).
- It follows ``messages``: ``sync`` reads which messages won or went since the
  seq it holds and adds or removes those; ``rebuild`` writes a new file beside
  it from every stored message and renames it in place (a killed rebuild leaves
  the old index in use).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import apsw
import duckdb

from projections.fulltext.workers import Item, extracted, text_row
from projections.queries.fulltext import (
    doc_key,
    held_docs,
    next_key,
    removed_between,
    taken_keys,
    text_fingerprint,
    winners,
    winners_after,
)
from stores.blobs import BlobStore

__all__ = ["COLUMNS", "TEXT_VERSION", "FullText"]

log = logging.getLogger("mailledger.store")

# Raised when the extractor or the table's layout changes: a file of another
# version is rebuilt (its removals would not find the text it was given).
# ``docs.has_text`` is 0 for a message whose blob could not be read when it was
# indexed (it was given no text, so its removal gives none either).
# 4: the display names of From, and of To and Cc, in columns of their own
# (``from:Carl``); an inline text part with a file name is body text; a detached
# signature is no attachment (``attachments.is_attachment``).
TEXT_VERSION = 4
COLUMNS = ("subject", "body", "names", "filenames", "flags", "from_names", "to_names")

_SCHEMA = f"""
CREATE VIRTUAL TABLE text USING fts5({", ".join(COLUMNS)}, content='',
    tokenize='unicode61 remove_diacritics 2');
CREATE TABLE docs (
    key INTEGER PRIMARY KEY, seq INTEGER NOT NULL UNIQUE, message_id TEXT NOT NULL,
    sha256 TEXT NOT NULL, has_text INTEGER NOT NULL, date INTEGER
);
CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
"""
# set once a new file is built: a later removal overwrites the terms in place
_SECURE_DELETE = "INSERT INTO text(text, rank) VALUES('secure-delete', 1)"
_BUILD_CACHE_KIB = 128 << 10
# FTS5 writes its pending terms out as a new segment when they pass ``hashsize``
# (1 MiB by default), and merges segments as they pile up: a build of 100,000
# messages wrote 300+ segments and merged them again and again. 128 MiB of
# pending terms makes a few (the writer's CPU 0.28 -> 0.19 ms a message at 100k;
# about 150 MB more memory while building), merged into one at the end
# ('optimize', 0.03 ms a message): a few large segments left as they were made
# were merged all at once by the tenth or so one-message sync after (5.7 s).
# Later syncs get 16 MiB: 10,000 messages added to a 1,000,000-message index
# took 3.7 s with FTS5's default 1 MiB, 2.4 s with 8, 1.8 s with 16, 2.0 s with
# 64 (11 MB more memory than 8); a sync of a few messages never fills it.
_BUILD_HASH_BYTES = 128 << 20
_HASH_BYTES = 16 << 20
_HASHSIZE = "INSERT INTO text(text, rank) VALUES('hashsize', ?)"
# While building, the segments are not merged as they come ('automerge' 0; a
# 'crisismerge' only past 64 on a level): the final 'optimize' merges them all
# once. FTS5's default merges each byte again at every level it climbs: the
# writer's CPU a message at 1,000,000 messages 0.43 -> 0.33 ms. The defaults
# are put back before that 'optimize', for the syncs that follow.
_BUILD_MERGES = ((0, 64), (4, 16))  # (automerge, crisismerge): building, then after
_MERGES = (
    "INSERT INTO text(text, rank) VALUES('automerge', ?)",
    "INSERT INTO text(text, rank) VALUES('crisismerge', ?)",
)
_OPTIMIZE = "INSERT INTO text(text) VALUES('optimize')"
_MARKS = ", ".join("?" * (len(COLUMNS) + 1))
_INSERT = f"INSERT INTO text(rowid, {', '.join(COLUMNS)}) VALUES ({_MARKS})"
_DELETE = f"INSERT INTO text(text, rowid, {', '.join(COLUMNS)}) VALUES ('delete', {_MARKS})"


def _pragma(con: apsw.Connection, statement: str) -> None:
    """One pragma per call: apsw runs a statement after a row-returning one only
    as its rows are read, so a second pragma in the same call could be skipped."""
    for _ in con.execute(statement):
        pass


def _open(path: Path, *, building: bool = False) -> apsw.Connection:
    con = apsw.Connection(str(path))
    con.set_busy_timeout(60_000)
    _pragma(con, "PRAGMA secure_delete=ON")
    if building:
        # a new file nobody reads yet, holding only live messages' text: no journal
        # until it is renamed in place, freed pages not zeroed, a larger page cache
        # (8,000 messages: 3,800 -> 7,500 msg per CPU-second with the two last)
        _pragma(con, "PRAGMA journal_mode=OFF")
        _pragma(con, "PRAGMA synchronous=OFF")
        _pragma(con, "PRAGMA secure_delete=OFF")
        _pragma(con, f"PRAGMA cache_size=-{_BUILD_CACHE_KIB}")
        # (so that the pages FTS5's merges free can be given back at the end)
        _pragma(con, "PRAGMA auto_vacuum=INCREMENTAL")
    else:
        _pragma(con, "PRAGMA journal_mode=WAL")
        _pragma(con, "PRAGMA synchronous=NORMAL")
    return con


def _hash_bytes(con: apsw.Connection) -> None:
    """``_HASH_BYTES`` set as FTS5's ``hashsize``, unless it is (an index built
    before it has FTS5's 1 MiB)."""
    rows = list(con.execute("SELECT v FROM text_config WHERE k = 'hashsize'"))
    if not rows or rows[0][0] != _HASH_BYTES:
        con.execute(_HASHSIZE, (_HASH_BYTES,))


def _set_merges(con: apsw.Connection, automerge: int, crisismerge: int) -> None:
    con.execute(_MERGES[0], (automerge,))
    con.execute(_MERGES[1], (crisismerge,))


def _meta(con: apsw.Connection) -> dict[str, int]:
    try:
        return {str(k): int(v) for k, v in con.execute("SELECT key, value FROM meta")}
    except apsw.SQLError:  # (no table: an empty or foreign file)
        return {}


def _set_meta(con: apsw.Connection, key: str, value: int) -> None:
    con.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))


def _applied(duck: duckdb.DuckDBPyConnection) -> int:
    from projections.fold import applied_seq

    return applied_seq(duck)


def _stored(duck: duckdb.DuckDBPyConnection) -> Iterator[Item]:
    for batch in winners(duck):
        yield from zip(
            batch.column(0).to_pylist(),
            batch.column(1).to_pylist(),
            batch.column(2).to_pylist(),
            batch.column(3).to_pylist(),
            strict=True,
        )


def _keys(con: apsw.Connection, items: list[Item]) -> list[int]:
    """The key of each message of ``items``: its first key, or the next free one
    of its week when a document (or an earlier item) has it already."""
    first = [doc_key(item[0], item[3]) for item in items]
    taken = taken_keys(con, first)
    keys: list[int] = []
    for key in first:
        while key in taken:
            key = next_key(key)
            if key not in taken:
                taken |= taken_keys(con, [key])
        taken.add(key)
        keys.append(key)
    return keys


class FullText:
    """The full-text index of the store at ``root`` (its blobs in ``blobs``)."""

    def __init__(self, root: Path, blobs: BlobStore, name: str = "fulltext") -> None:
        self.path = root / f"{name}.sqlite"
        self.blobs = blobs
        self.workers = max(1, min(os.cpu_count() or 1, 4))  # extraction processes
        self._new = root / f"{name}.sqlite.rebuild-{os.getpid()}"
        self._kept: apsw.Connection | None = None  # (``reader``'s)

    # -- reading ------------------------------------------------------------------
    @contextlib.contextmanager
    def connection(self) -> Iterator[apsw.Connection]:
        """A connection to the index (made first when the file is missing)."""
        con = _open(self.path)
        try:
            yield con
        finally:
            con.close()

    def reader(self, duck: duckdb.DuckDBPyConnection) -> apsw.Connection:
        """A connection to the index brought up to the projections ``duck`` (``sync``),
        kept for the next search until ``let_go``: the projector calls it while it
        holds the projection file, which nobody writes meanwhile, so the index is
        still in step then. (Per search, the check and the two connections cost 2-3
        ms of a 10 ms web request: three statements to the projection file and
        SQLite's, four pragmas each time a connection is made.)"""
        if self._kept is None:
            self.sync(duck)
            self._kept = _open(self.path)
        return self._kept

    def let_go(self) -> None:
        """The connection ``reader`` kept closed (the projection file was let go)."""
        kept, self._kept = self._kept, None
        if kept is not None:
            kept.close()

    # -- following messages ---------------------------------------------------------
    def sync(self, duck: duckdb.DuckDBPyConnection) -> int:
        """Bring the index to the seq the projections ``duck`` hold: add the
        messages that won since, remove those that went; rebuilt instead when it
        is missing, of another version, or ahead of ``duck``. Returns that seq."""
        target = _applied(duck)
        if not self.path.exists():
            return self.rebuild(duck)
        with self.connection() as con:
            meta = _meta(con)
            # (an index of another version is rebuilt even when in step: its columns
            # are not those the queries read)
            if meta.get("applied_seq") == target and meta.get("text_version") == TEXT_VERSION:
                return target  # (no write lock taken: the usual case of a search)
            # the write lock first, then what it holds: another process may have
            # brought it up meanwhile
            con.execute("BEGIN IMMEDIATE")
            try:
                meta = _meta(con)
                held = meta.get("applied_seq")
                if meta.get("text_version") != TEXT_VERSION or held is None or held > target:
                    con.execute("ROLLBACK")
                    con.close()
                    return self.rebuild(duck)
                # (an index of the Message-IDs of ``docs``, made by files before
                # ``removals``: no read needs it, and every write paid for it)
                con.execute("DROP INDEX IF EXISTS docs_message_id")
                removed = self._follow(con, duck, held, target) if held != target else False
                con.execute("COMMIT")
            except BaseException:
                if not con.getautocommit():
                    con.execute("ROLLBACK")
                raise
            # removed text leaves the WAL's old pages only at a checkpoint
            if removed:
                _pragma(con, "PRAGMA wal_checkpoint(TRUNCATE)")
        return target

    def _follow(
        self, con: apsw.Connection, duck: duckdb.DuckDBPyConnection, held: int, target: int
    ) -> bool:
        """Add the messages won after seq ``held``, remove those gone; True when
        any was removed."""
        new = winners_after(duck, held)
        # The documents to take out: those of the stored messages that deletions
        # after ``held`` removed (``removals``), by seq. A message that won after
        # ``held`` has no document yet, whatever happened to it since.
        removed = False
        for key, sha, has_text in held_docs(con, removed_between(duck, held, target)).values():
            self._remove(con, key, sha, has_text)
            removed = True
        # in the order of their keys: FTS5 writes its pending terms out as a new
        # segment whenever a rowid comes below the last one, and a sync's messages,
        # in seq order, need not be in order of date (an old archive's are not):
        # 10,000 messages of random dates into a 1,000,000-message index took
        # 173 s in seq order, 3.7 s in key order
        if new:
            _hash_bytes(con)
        self._add(con, sorted(new, key=lambda item: doc_key(item[0], item[3])))
        _set_meta(con, "applied_seq", target)
        return removed

    def _remove(self, con: apsw.Connection, key: int, sha: str, has_text: bool) -> None:
        row = text_row(self.blobs, sha) if has_text else None
        if row is not None:
            con.execute(_DELETE, (key, *row))
        elif has_text:
            # without its exact text FTS5 cannot take the document out: the key no
            # longer names a document, so searches skip it; a rebuild drops it
            log.warning("full-text index: the document of key %d was not removed", key)
        con.execute("DELETE FROM docs WHERE key = ?", (key,))

    def _add(self, con: apsw.Connection, rows: Iterable[Item]) -> None:
        """Index the messages ``rows`` (by the workers when there are many)."""
        for chunk in extracted(self.blobs, rows, self.workers):
            keys = _keys(con, [item for item, _ in chunk])
            con.executemany(
                _INSERT,
                sorted(
                    (key, *row)
                    for key, (_, row) in zip(keys, chunk, strict=True)
                    if row is not None
                ),
            )
            con.executemany(
                "INSERT INTO docs VALUES (?, ?, ?, ?, ?, ?)",
                [
                    (key, item[0], item[1], item[2], row is not None, item[3])
                    for key, (item, row) in zip(keys, chunk, strict=True)
                ],
            )

    # -- rebuilding -----------------------------------------------------------------
    def rebuild(self, duck: duckdb.DuckDBPyConnection) -> int:
        """Write a new index of every message ``duck`` holds beside the file and
        rename it in place; returns the seq it holds."""
        target = _applied(duck)
        self._remove_files(self._new)
        try:
            con = _open(self._new, building=True)
            try:
                con.execute(_SCHEMA)
                with con:
                    _set_merges(con, *_BUILD_MERGES[0])
                    con.execute(_HASHSIZE, (_BUILD_HASH_BYTES,))
                    self._add(con, _stored(duck))
                    con.execute(_HASHSIZE, (_HASH_BYTES,))
                    _set_merges(con, *_BUILD_MERGES[1])
                    con.execute(_OPTIMIZE)
                    _set_meta(con, "applied_seq", target)
                    _set_meta(con, "text_version", TEXT_VERSION)
                    con.execute(_SECURE_DELETE)
                _pragma(con, "PRAGMA incremental_vacuum")
            finally:
                con.close()
            self._swap_in()
        finally:
            self._remove_files(self._new)
        return target

    def _swap_in(self) -> None:
        """Put the new file in place of the index: the old one checkpointed and its
        WAL removed first (a WAL left beside would be replayed into the new file)."""
        if self.path.exists():
            with contextlib.suppress(apsw.Error):
                con = _open(self.path)
                try:
                    _pragma(con, "PRAGMA wal_checkpoint(TRUNCATE)")
                finally:
                    con.close()
        for suffix in ("-wal", "-shm"):
            Path(f"{self.path}{suffix}").unlink(missing_ok=True)
        os.chmod(self._new, 0o600)
        os.replace(self._new, self.path)

    @staticmethod
    def _remove_files(path: Path) -> None:
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)

    def drop(self) -> None:
        """Remove the index and what killed rebuilds left (their text too: a purge
        drops it; a replay makes it again)."""
        self._remove_files(self.path)
        for left in self.path.parent.glob(f"{self.path.name}.rebuild-*"):
            left.unlink(missing_ok=True)

    # -- checking -------------------------------------------------------------------
    def problems(self, duck: duckdb.DuckDBPyConnection, *, compare: bool) -> list[str]:
        """What is wrong with the index: FTS5's own integrity check, the seq it
        holds against ``duck``'s, and (``compare``) its content against an index
        built afresh from ``duck``'s messages in a scratch file."""
        if not self.path.exists():
            return ["the full-text index is missing (replay rebuilds it)"]
        found: list[str] = []
        with self.connection() as con:
            held, want = _meta(con).get("applied_seq"), _applied(duck)
            if held != want:
                found.append(f"the full-text index is at seq {held}, the projections at {want}")
            try:
                con.execute("INSERT INTO text(text, rank) VALUES ('integrity-check', 0)")
            except apsw.Error as exc:
                found.append(f"the full-text index fails its integrity check: {exc}")
            if not compare or found:
                return found
            before = self.fingerprint(con)
        scratch = FullText(self.path.parent, self.blobs, name="fulltext.verify")
        try:
            scratch.rebuild(duck)
            with scratch.connection() as con:
                after = scratch.fingerprint(con)
        finally:
            scratch.drop()
        if before != after:
            found.append("the full-text index differs from one built afresh from the messages")
        return found

    @staticmethod
    def fingerprint(con: apsw.Connection) -> dict[str, Any]:
        """Digests of the documents and terms the index ``con`` holds: equal for
        two indexes given the same text, however they were built."""
        con.execute(
            "CREATE VIRTUAL TABLE IF NOT EXISTS temp.text_terms USING fts5vocab(main, text, col)"
        )
        return text_fingerprint(con)

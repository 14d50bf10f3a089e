"""``BlobStore``: put, get, delete and count blobs over both layouts (loose files
and packs), keeping the pack index in step with the ``packs/`` directory."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from stores.blobs import fs
from stores.blobs.codec import decode_blob, encode_blob, sha256_hex
from stores.blobs.index import Location, PackIndex
from stores.blobs.pack import Entry, encode_pack, read_entries
from stores.errors import BlobIntegrityError, NotFoundError

__all__ = ["BlobStore"]

_PACKS = "packs"
_PACK_INDEX = ".packs.sqlite"


class BlobStore:
    """Content-addressed, compressed raw messages."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._tmp = self.root / ".tmp"
        self._root_s = str(self.root)
        self._tmp_s = str(self._tmp)
        self._shards: set[str] = set()
        self._dirty = False
        self._packs = self.root / _PACKS
        self._packs_s = str(self._packs)
        self.index = PackIndex(self.root / _PACK_INDEX)  # sha256 -> where packs hold it
        self._pack_names: set[str] = set()  # the packs ``index`` lists, as last seen
        self._packs_seen: tuple[int, int] | None = None  # the directory's (mtime, size)
        self.damaged: dict[str, str] = {}  # pack name -> what is wrong with it

    def create(self) -> None:
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._tmp.mkdir(mode=0o700, exist_ok=True)

    def path(self, sha: str) -> Path:
        return self.root / sha[:2] / sha

    def _loose(self, sha: str) -> str:
        """``path`` as a string join: building a Path cost a worker 20 us a message."""
        return os.path.join(self._root_s, sha[:2], sha)

    def has(self, sha: str) -> bool:
        if os.path.exists(self._loose(sha)):
            return True
        return bool(self._locate(sha))

    def holding(self, shas: Iterable[str]) -> set[str]:
        """Those of ``shas`` stored (as ``has`` says, without looking for packs written
        since the last ``refresh``): one query of the pack index for them all, and a
        look for a loose file only where its shard directory
        exists (an import's workers ask for every message: a query and a stat each
        cost them a sixth of their time)."""
        wanted = set(shas)
        if not wanted:
            return set()
        found = self.index.present(wanted)
        rest = wanted - found
        if rest:
            try:
                shards = {n for n in os.listdir(self._root_s) if len(n) == 2}
            except FileNotFoundError:
                shards = set()
            found.update(
                sha for sha in rest if sha[:2] in shards and os.path.exists(self._loose(sha))
            )
        return found

    # -- packs ------------------------------------------------------------------
    def _locate(self, sha: str) -> list[Location]:
        """Where packs hold ``sha`` (the directory is re-read when it changed)."""
        where = self.index.lookup(sha)
        if not where and self.refresh():
            where = self.index.lookup(sha)
        return where

    def refresh(self) -> bool:
        """Learn the packs written (or removed) since the last look; True if any."""
        try:
            st = os.stat(self._packs)
        except FileNotFoundError:
            return False
        # a directory changed within the last second may change again under the
        # same coarse mtime: look at it again until it has been still for a while
        seen = (st.st_mtime_ns, st.st_size)
        if seen == self._packs_seen and time.time_ns() - st.st_mtime_ns > 2_000_000_000:
            return False
        names = {n for n in os.listdir(self._packs) if n.endswith(".pack")}
        self._packs_seen = seen
        if names == self._pack_names:
            return False
        if self._pack_names:
            # only the packs new since the last look are asked about (the index is
            # shared: most were listed by the process that wrote them)
            unseen = names - self._pack_names
            indexed = (names & self._pack_names) | {n for n in unseen if self.index.has(n)}
        else:
            indexed = self.index.names()
            for gone in indexed - names:
                self._forget(gone)
        for name in sorted(names - indexed):
            try:
                entries = self._read_index(name)
            except FileNotFoundError:  # removed since the listing (a purge rewrote it)
                names.discard(name)
                continue
            self.index.add(name, entries, fs.size_of(self._packs / name), self.damaged.get(name))
        self._pack_names = names
        return True

    def _forget(self, name: str) -> None:
        self.index.remove(name)
        self.damaged.pop(name, None)

    def check_packs(self) -> None:
        """Read every pack's index (scanning those whose index is damaged, which
        ``damaged`` then names): what ``verify`` reports, whichever process first
        indexed the pack."""
        self.refresh()
        for name in sorted(self._pack_names):
            with contextlib.suppress(FileNotFoundError):
                self._read_index(name)

    def _read_index(self, name: str) -> list[Entry]:
        """(sha256, offset, length) of each blob of pack ``name``: from its index,
        or, when the index is damaged, by scanning its records (the damage is kept
        in ``damaged``)."""
        entries, damage = read_entries(self._packs / name)
        if damage is not None:
            self.damaged[name] = damage
        return entries

    def put_many(self, blobs: Iterable[tuple[str, bytes]]) -> set[str]:
        """Store encoded blobs (sha256, ``encode_blob`` output) in one new pack;
        returns the shas written (those not already stored, each once). Blobs in
        packs the index does not list yet (a writer killed before it listed its
        pack) are written again: a duplicate, never a loss."""
        given = list(blobs)
        held = self.holding(sha for sha, _ in given)
        records: list[tuple[str, bytes]] = []
        fresh: set[str] = set()
        for sha, encoded in given:
            if sha in fresh or sha in held:
                continue
            fresh.add(sha)
            records.append((sha, encoded))
        self._dirty = True  # found ones may be a crashed writer's: flush them too
        if records:
            self._write_pack(records)
        return fresh

    def _write_pack(self, records: list[tuple[str, bytes]]) -> str:
        parts, entries = encode_pack(records)
        pid = os.getpid()
        name = f"{time.time_ns():020d}-{pid}-{os.urandom(4).hex()}.pack"
        final = os.path.join(self._packs, name)
        tmp = os.path.join(self._tmp_s, f"pack.{pid}.{os.urandom(6).hex()}")
        try:
            os.makedirs(self._packs, mode=0o700, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with open(fd, "wb") as fh:
                fh.writelines(parts)
            os.replace(tmp, final)
        except OSError as exc:  # a full disk, say: name the pack, give the space back
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise OSError(exc.errno, f"cannot write blobs: {exc.strerror}", final) from exc
        self.index.add(name, entries, sum(map(len, parts)))
        self._pack_names.add(name)
        self._dirty = True
        return name

    def location(self, sha: str) -> tuple[Path, int, int] | None:
        """(file, offset, length) of blob ``sha``'s encoded bytes, or None."""
        legacy = self.path(sha)
        if legacy.exists():
            return legacy, 0, legacy.stat().st_size
        where = self._locate(sha)
        if not where:
            return None
        name, off, length = where[0]
        return self._packs / name, off, length

    def put(self, data: bytes, sha: str | None = None) -> tuple[str, bool]:
        """Store ``data``; returns (sha256, True if new bytes were written).

        The blob is looked for first: data already stored is not compressed again.
        """
        sha = sha or sha256_hex(data)
        # Maybe written by a writer that crashed before its flush: the event we are
        # about to commit names it, so it must be made durable too.
        self._dirty = True
        if self.has(sha):
            return sha, False
        return sha, self._write(sha, encode_blob(data))

    def put_encoded(self, sha: str, encoded: bytes) -> bool:
        """Store a blob already encoded by ``encode_blob``; True if it was new."""
        self._dirty = True  # a blob already there may be a crashed writer's: flush it too
        if self.has(sha):
            return False
        return self._write(sha, encoded)

    def mark_dirty(self) -> None:
        """Blobs were written (or found) by other processes for the next commit:
        the next ``flush()`` must sync. ``syncfs`` covers every page of the file
        system, whichever process wrote it, once that process's writes returned."""
        self._dirty = True

    def _write(self, sha: str, encoded: bytes) -> bool:
        shard = os.path.join(self._root_s, sha[:2])
        final = os.path.join(shard, sha)
        # Unique per writer (threads of one process too, worker processes by their
        # pid): a shared name let one writer truncate the file another was renaming.
        tmp = os.path.join(self._tmp_s, f"{sha}.{os.getpid()}.{os.urandom(6).hex()}")
        try:
            if shard not in self._shards:
                os.makedirs(shard, mode=0o700, exist_ok=True)
                self._shards.add(shard)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with open(fd, "wb") as fh:  # writes every byte (os.write may write fewer)
                fh.write(encoded)
            try:
                os.replace(tmp, final)
            except FileNotFoundError:  # the shard went away under a long-lived writer
                os.makedirs(shard, mode=0o700, exist_ok=True)
                os.replace(tmp, final)
        except OSError as exc:  # a full disk, say: name the blob, give the space back
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise OSError(exc.errno, f"cannot write blob: {exc.strerror}", final) from exc
        return True

    def flush(self) -> None:
        """Make every blob written since the last flush durable."""
        if self._dirty:
            fs.syncfs(self.root)
            self._dirty = False

    def locate(self, shas: Sequence[str]) -> dict[str, Location]:
        """Where the packs listed at the last ``refresh`` hold each of ``shas``
        (one query for them all): a ``get(sha, at=...)`` of each is one read."""
        return self.index.locate(shas)

    def get(self, sha: str, *, check: bool = True, at: Location | None = None) -> bytes:
        """The raw bytes of blob ``sha``; checks the hash unless told not to. ``at``
        (from ``locate``) is read first; where it no longer holds the blob (a purge
        rewrote the pack since), the blob is looked for as without it."""
        # (strings and os calls, not Path and file objects: 20 us of a 90 us get)
        blob: bytes | None = None
        if at is not None:
            where = os.path.join(self._packs_s, at[0])
            with contextlib.suppress(FileNotFoundError):
                blob = fs.pread(where, at[1], at[2])
                if len(blob) < at[2]:
                    blob = None
        if blob is None:
            where = self._loose(sha)
            try:
                blob = fs.pread(where, 0, None)
            except FileNotFoundError:
                blob = None
        if blob is None:
            for attempt in range(2):
                located = self._locate(sha)
                if not located:
                    break
                name, off, length = located[0]
                where = os.path.join(self._packs_s, name)
                try:
                    blob = fs.pread(where, off, length)
                    if len(blob) < length:  # cut short since it was indexed: scan it
                        blob = None
                        self._forget(name)
                        entries = self._read_index(name)
                        self.index.add(name, entries, fs.size_of(where), self.damaged.get(name))
                        continue
                    break
                except FileNotFoundError:  # rewritten by a purge since: look again
                    self._forget(name)
                    self._pack_names.discard(name)
                    if attempt:
                        raise NotFoundError(f"blob {sha}: {where} is gone") from None
        if blob is None:
            # (a pack another process found damaged is named too: the index keeps it)
            damaged = "; ".join(sorted({**self.index.damaged(), **self.damaged}.values()))
            more = f" (damaged packs: {damaged})" if damaged else ""
            raise NotFoundError(f"blob {sha} is not in {self.root}{more}")
        data = decode_blob(sha, blob, where)
        if check and sha256_hex(data) != sha:
            raise BlobIntegrityError(f"blob {sha} in {where} does not match its sha256")
        return data

    def delete(self, sha: str) -> bool:
        """Erase blob ``sha`` (its file, and every pack holding it); True if it existed."""
        return sha in self.delete_many([sha])

    def delete_many(self, shas: Iterable[str]) -> set[str]:
        """Erase blobs; returns those that existed. A pack holding any of them is
        rewritten without them (the new pack is in place before the old goes, so a
        crash leaves copies of the other blobs, never a loss; a re-run erases what
        a crash left)."""
        gone: set[str] = set()
        wanted = set(shas)
        for sha in wanted:
            try:
                self.path(sha).unlink()
                gone.add(sha)
            except FileNotFoundError:
                pass
        self.refresh()
        packs = {w[0] for sha in wanted for w in self.index.lookup(sha)}
        for name in sorted(packs):
            entries = self._read_index(name)
            keep = [(sha, off, n) for sha, off, n in entries if sha not in wanted]
            gone |= {sha for sha, _, _ in entries if sha in wanted}
            if keep:
                with open(self._packs / name, "rb") as fh:
                    data = fh.read()
                self._write_pack([(sha, data[off : off + n]) for sha, off, n in keep])
            os.unlink(self._packs / name)
            self._forget(name)
            self._pack_names.discard(name)
        if gone:
            self._dirty = True
        return gone

    def shas(self) -> Iterator[str]:
        """Every stored blob's sha256 (each once, sorted)."""
        if not self.root.exists():
            return
        self.refresh()
        found = set(self.index.shas())
        for sub in self.root.iterdir():
            if sub.is_dir() and len(sub.name) == 2:
                found.update(f.name for f in sub.iterdir() if len(f.name) == 64)
        yield from sorted(found)

    def count(self) -> int:
        """How many blobs are stored (from the pack index and the loose files: no
        pack is read)."""
        if not self.root.exists():
            return 0
        self.refresh()
        loose = sum(
            1
            for sub in self.root.iterdir()
            if sub.is_dir() and len(sub.name) == 2
            for f in sub.iterdir()
            if len(f.name) == 64
        )
        return self.index.totals()[0] + loose

    def stored_bytes(self) -> int:
        """Bytes the blobs take on disk (compressed, headers and pack indexes included)."""
        if not self.root.exists():
            return 0
        self.refresh()
        total = self.index.totals()[1]  # the packs (their sizes listed: no stat of each)
        for sub in self.root.iterdir():
            if sub.is_dir() and len(sub.name) == 2:
                total += sum(f.stat().st_size for f in sub.iterdir() if f.is_file())
        return total

    def close(self) -> None:
        """Close the blob index's file (it opens again when next needed)."""
        self.index.close()

    def clean_tmp(self) -> None:
        """Remove temporary files a crashed writer left behind.

        Safe while others write: a file whose writer (the pid in its name) is
        still running, this process included, is in flight and left alone.
        """
        if self._tmp.exists():
            for f in self._tmp.iterdir():
                if not fs.writer_alive(f.name):
                    f.unlink(missing_ok=True)

"""The blob store: raw messages, content-addressed by sha256, compressed, checked on read."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import multiprocessing
import os
import random
import signal
import sqlite3
import stat
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from stores.blobs import BlobStore, encode_blob, sha256_hex
from stores.errors import BlobIntegrityError, NotFoundError

TEXT = (
    b"From: Ann <ann@example.org>\nTo: bob@example.org\nSubject: Re: budget\n\n"
    + b"Hi Bob,\n\nthe numbers for next quarter look fine to me; see you Monday.\n" * 200
)


@pytest.fixture
def blobs(tmp_path: Path) -> BlobStore:
    store = BlobStore(tmp_path / "blobs")
    store.create()
    return store


def _stored_files(store: BlobStore) -> list[Path]:
    """Every blob file under a final name (temporary files excluded)."""
    return sorted(p for p in store.root.glob("??/*") if p.is_file())


def test_put_then_get_returns_the_same_bytes(blobs: BlobStore) -> None:
    sha, written = blobs.put(TEXT)
    assert written
    assert sha == hashlib.sha256(TEXT).hexdigest() == sha256_hex(TEXT)
    assert blobs.has(sha)
    assert blobs.get(sha) == TEXT
    assert blobs.path(sha) == blobs.root / sha[:2] / sha
    assert list(blobs.shas()) == [sha]


def test_same_bytes_have_one_address_and_the_second_put_writes_nothing(
    blobs: BlobStore,
) -> None:
    sha1, first = blobs.put(TEXT)
    before = blobs.path(sha1).stat()
    sha2, second = blobs.put(bytes(TEXT))
    after = blobs.path(sha1).stat()
    assert (sha1, first, second) == (sha2, True, False)
    assert (before.st_ino, before.st_mtime_ns) == (after.st_ino, after.st_mtime_ns)
    assert _stored_files(blobs) == [blobs.path(sha1)]
    other, _ = blobs.put(TEXT + b"!")
    assert other != sha1
    assert len(_stored_files(blobs)) == 2


def test_text_is_stored_compressed(blobs: BlobStore) -> None:
    sha, _ = blobs.put(TEXT)
    assert blobs.path(sha).stat().st_size < len(TEXT) // 4
    assert blobs.stored_bytes() == blobs.path(sha).stat().st_size


def test_empty_message_round_trips(blobs: BlobStore) -> None:
    sha, written = blobs.put(b"")
    assert written
    assert sha == hashlib.sha256(b"").hexdigest()
    assert blobs.get(sha) == b""


def test_incompressible_bytes_round_trip_stored_raw(blobs: BlobStore) -> None:
    data = os.urandom(64 * 1024)
    sha, _ = blobs.put(data)
    assert blobs.get(sha) == data
    # stored as is (plus a small header), never bigger because of compression
    assert blobs.path(sha).stat().st_size <= len(data) + 32


@pytest.mark.parametrize("kind", ["text", "random"])
def test_get_names_a_blob_whose_bytes_were_altered_on_disk(blobs: BlobStore, kind: str) -> None:
    data = TEXT if kind == "text" else os.urandom(4096)
    sha, _ = blobs.put(data)
    path = blobs.path(sha)
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0x01  # one flipped bit in the payload
    path.write_bytes(bytes(raw))
    with pytest.raises(BlobIntegrityError, match=str(path)):
        blobs.get(sha)


def test_get_names_a_truncated_blob(blobs: BlobStore) -> None:
    for data in (TEXT, os.urandom(4096)):
        sha, _ = blobs.put(data)
        path = blobs.path(sha)
        raw = path.read_bytes()
        for cut in (5, len(raw) // 2, len(raw) - 1):
            path.write_bytes(raw[:cut])
            with pytest.raises(BlobIntegrityError, match=str(path)):
                blobs.get(sha)
            with pytest.raises(BlobIntegrityError, match=str(path)):
                blobs.get(sha, check=False)  # damage is found even without the hash check


def test_get_names_a_blob_whose_header_claims_an_absurd_size(blobs: BlobStore) -> None:
    sha, _ = blobs.put(TEXT)
    path = blobs.path(sha)
    raw = bytearray(path.read_bytes())
    raw[5:13] = (2**62).to_bytes(8, "big")  # the header's original-size field
    path.write_bytes(bytes(raw))
    with pytest.raises(BlobIntegrityError, match=str(path)):
        blobs.get(sha)


def test_get_names_a_file_that_is_not_a_blob(blobs: BlobStore) -> None:
    sha = sha256_hex(b"hello")
    path = blobs.path(sha)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"hello, not a mailledger blob at all")
    with pytest.raises(BlobIntegrityError, match=str(path)):
        blobs.get(sha)


def test_missing_blob_is_not_found(blobs: BlobStore) -> None:
    sha = sha256_hex(b"never stored")
    assert not blobs.has(sha)
    with pytest.raises(NotFoundError, match=sha):
        blobs.get(sha)


def test_deleted_blob_is_not_found(blobs: BlobStore) -> None:
    sha, _ = blobs.put(TEXT)
    assert blobs.delete(sha)
    assert not blobs.delete(sha)
    with pytest.raises(NotFoundError):
        blobs.get(sha)
    assert list(blobs.shas()) == []


def test_blob_files_are_private(tmp_path: Path) -> None:
    old = os.umask(0)  # the modes must come from the code, not from a umask
    try:
        store = BlobStore(tmp_path / "blobs")
        store.create()
        store.put(TEXT)
        store.put(os.urandom(100))
    finally:
        os.umask(old)
    for d in [store.root, store.root / ".tmp", *(p for p in store.root.iterdir() if p.is_dir())]:
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d
    for f in _stored_files(store):
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f


def test_threads_storing_the_same_message_at_once_all_succeed(blobs: BlobStore) -> None:
    # Two fetchers of one process may meet the same message. Each must get a
    # complete blob and no error (a shared temporary name broke this).
    datas = [os.urandom(200_000) + bytes([i]) for i in range(60)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def worker() -> None:
        barrier.wait()
        for d in datas:
            try:
                blobs.put(d)
            except BaseException as exc:
                errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for d in datas:
        assert blobs.get(sha256_hex(d)) == d
    assert len(_stored_files(blobs)) == len(datas)


_WRITER = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    from stores.blobs import BlobStore
    store = BlobStore(Path(sys.argv[1]))
    store.create()
    print("ready", flush=True)
    i = 0
    while True:
        # big, partly compressible blobs: the write takes long enough to be caught midway
        store.put(os.urandom(1 << 20) + b"x" * (1 << 21) + i.to_bytes(8, "big"))
        i += 1
    """
)


def test_a_killed_writer_never_leaves_a_partial_blob_under_a_final_name(tmp_path: Path) -> None:
    root = tmp_path / "blobs"
    for delay in (0.05, 0.13, 0.21, 0.34):
        proc = subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(root)], stdout=subprocess.PIPE, text=True
        )
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    store = BlobStore(root)
    shas = list(store.shas())
    assert shas, "the writer never stored a blob before it was killed"
    for sha in shas:
        assert len(store.get(sha)) == (1 << 20) + (1 << 21) + 8  # whole and matching its sha
    # whatever a killed writer left is under .tmp/ only, and clean_tmp removes it
    for p in root.rglob("*"):
        if p.is_file() and p.parent != store.root / ".tmp":
            assert p.name in shas, p
    store.clean_tmp()
    assert list((root / ".tmp").iterdir()) == []
    assert sorted(store.shas()) == sorted(shas)


def test_cleaning_removes_dead_writers_temporary_files_only(blobs: BlobStore) -> None:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    dead = blobs.root / ".tmp" / f"{'a' * 64}.{done.stdout.strip()}.0badc0ffee00"
    mine = blobs.root / ".tmp" / f"{'b' * 64}.{os.getpid()}.0badc0ffee01"
    junk = blobs.root / ".tmp" / "not-a-writers-file"
    for p in (dead, mine, junk):
        p.write_bytes(b"MLB1 half a blob")
    blobs.clean_tmp()
    assert sorted(p.name for p in (blobs.root / ".tmp").iterdir()) == [mine.name]
    assert list(blobs.shas()) == []


# -- packs: many blobs in one file (what imports and syncs write) ------------------


def _encoded(*texts: bytes) -> list[tuple[str, bytes]]:
    from stores.blobs import encode_blob

    return [(sha256_hex(t), encode_blob(t)) for t in texts]


def test_a_pack_holds_many_blobs_in_one_file_each_read_back_exactly(blobs: BlobStore) -> None:
    texts = [TEXT + str(i).encode() for i in range(50)]
    written = blobs.put_many(_encoded(*texts))
    assert written == {sha256_hex(t) for t in texts}
    packs = list((blobs.root / "packs").iterdir())
    assert len(packs) == 1 and packs[0].suffix == ".pack"
    assert _stored_files(blobs) == []  # no file per blob
    fresh = BlobStore(blobs.root)  # another process: learns the pack from its index
    for t in texts:
        assert fresh.has(sha256_hex(t)) and fresh.get(sha256_hex(t)) == t
    assert list(fresh.shas()) == sorted(written)
    assert fresh.stored_bytes() == packs[0].stat().st_size


def test_blobs_located_at_once_read_back_and_a_stale_place_is_looked_up_again(
    blobs: BlobStore,
) -> None:
    texts = [TEXT + str(i).encode() for i in range(20)]
    loose = TEXT + b"loose"
    blobs.put_many(_encoded(*texts))
    blobs.put(loose)
    shas = [sha256_hex(t) for t in [*texts, loose]]
    reader = BlobStore(blobs.root)
    where = reader.locate([*shas, "0" * 64])
    assert set(where) == set(shas[:-1])  # a loose blob and an unknown one: not in a pack
    assert [reader.get(sha, at=where.get(sha)) for sha in shas] == [*texts, loose]
    # a purge rewrites the pack after the places were read: each is found anew
    blobs.delete(shas[0])
    assert [reader.get(sha, at=where[sha]) for sha in shas[1:-1]] == texts[1:]
    with pytest.raises(NotFoundError):
        reader.get(shas[0], at=where[shas[0]])


def test_put_many_writes_nothing_already_stored_and_a_repeat_once(blobs: BlobStore) -> None:
    sha_a, _ = blobs.put(TEXT)
    texts = [TEXT, TEXT + b"b", TEXT + b"b"]
    assert blobs.put_many(_encoded(*texts)) == {sha256_hex(TEXT + b"b")}
    assert blobs.put_many(_encoded(*texts)) == set()
    assert len(list((blobs.root / "packs").iterdir())) == 1
    assert BlobStore(blobs.root).get(sha_a) == TEXT


def test_a_pack_written_by_another_writer_is_found_without_reopening(blobs: BlobStore) -> None:
    reader = BlobStore(blobs.root)
    assert not reader.has(sha256_hex(TEXT))
    BlobStore(blobs.root).put_many(_encoded(TEXT))
    assert reader.has(sha256_hex(TEXT)) and reader.get(sha256_hex(TEXT)) == TEXT


def test_a_flipped_byte_inside_a_packed_blob_names_the_pack(blobs: BlobStore) -> None:
    texts = [TEXT + b"1", TEXT + b"2"]
    blobs.put_many(_encoded(*texts))
    path, off, length = blobs.location(sha256_hex(texts[0]))  # type: ignore[misc]
    data = bytearray(path.read_bytes())
    data[off + length // 2] ^= 0x55
    path.write_bytes(bytes(data))
    fresh = BlobStore(blobs.root)
    with pytest.raises(BlobIntegrityError, match=path.name):
        fresh.get(sha256_hex(texts[0]))
    assert fresh.get(sha256_hex(texts[1])) == texts[1]  # its neighbour still reads


def test_a_pack_cut_short_keeps_the_blobs_before_the_cut_and_says_so(blobs: BlobStore) -> None:
    texts = [TEXT + str(i).encode() for i in range(5)]
    blobs.put_many(_encoded(*texts))
    path, off, _ = blobs.location(sha256_hex(texts[3]))  # type: ignore[misc]
    os.truncate(path, off + 10)  # inside the 4th blob: the index at the end is gone
    fresh = BlobStore(blobs.root)
    for t in texts[:3]:
        assert fresh.get(sha256_hex(t)) == t
    with pytest.raises(NotFoundError, match=path.name):
        fresh.get(sha256_hex(texts[4]))
    assert list(fresh.damaged) == [path.name] and "3 blobs" in fresh.damaged[path.name]


def test_deleting_a_packed_blob_rewrites_its_pack_without_its_bytes(blobs: BlobStore) -> None:
    secret = b"Subject: the secret\n\nnobody may read this any more\n" * 30
    keep = [TEXT + b"x", TEXT + b"y"]
    blobs.put_many(_encoded(secret, *keep))
    old = next((blobs.root / "packs").iterdir())
    assert blobs.delete_many([sha256_hex(secret), "0" * 64]) == {sha256_hex(secret)}
    assert not old.exists()
    fresh = BlobStore(blobs.root)
    assert not fresh.has(sha256_hex(secret))
    assert [fresh.get(sha256_hex(t)) for t in keep] == keep
    packs = list((blobs.root / "packs").iterdir())
    assert len(packs) == 1 and sha256_hex(secret) not in {s for s in fresh.shas()}
    assert not blobs.delete(sha256_hex(secret))
    # the last blob of a pack going removes the pack
    assert blobs.delete_many(sha256_hex(t) for t in keep) == {sha256_hex(t) for t in keep}
    assert list((blobs.root / "packs").iterdir()) == []


def test_blobs_compressed_by_pyarrow_before_zstandard_still_read(blobs: BlobStore) -> None:
    """Stores written before the switch to zstandard hold pyarrow's zstd frames (the same
    format and level): they read back, and the same bytes compress the same way now."""
    import struct

    import pyarrow as pa

    text = b"Subject: old\r\n\r\n" + b"a body written by an older mailledger\r\n" * 200
    frame = pa.compress(text, codec="zstd", asbytes=True)
    old = struct.pack(">4sBQ", b"MLB1", 1, len(text)) + frame
    sha = sha256_hex(text)
    assert blobs.put_encoded(sha, old)
    assert blobs.get(sha) == text
    assert encode_blob(text) == old


def test_a_pack_another_reader_found_cut_short_is_named_by_every_reader(
    blobs: BlobStore,
) -> None:
    """The index is shared: once one reader has rescanned a damaged pack, a reader
    that never read the pack itself still names it when a blob is missing."""
    texts = [TEXT + str(i).encode() for i in range(5)]
    blobs.put_many(_encoded(*texts))
    path, off, _ = blobs.location(sha256_hex(texts[3]))  # type: ignore[misc]
    os.truncate(path, off + 10)
    first = BlobStore(blobs.root)
    with pytest.raises(NotFoundError, match=path.name):
        first.get(sha256_hex(texts[4]))
    second = BlobStore(blobs.root)
    with pytest.raises(NotFoundError, match=path.name):
        second.get(sha256_hex(texts[4]))
    assert second.get(sha256_hex(texts[0])) == texts[0]


def test_a_store_left_with_with_keeps_no_file_open(tmp_path: Path) -> None:
    """A process done with a store holds none of its files (a file system it lives
    on can be unmounted): the blob index's SQLite file is closed too."""
    from pipeline.store import MessageStore

    with MessageStore.open(tmp_path / "s") as store:
        store.add(None, b"Message-ID: <a@x>\r\n\r\nhi\r\n" * 3)
        store.blobs.put_many(_encoded(TEXT + b"p"))
        assert store.raw("a@x")
    held = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(FileNotFoundError):  # (the listing's own descriptor)
            held.append(os.readlink(f"/proc/self/fd/{fd}"))
    assert not [p for p in held if p.startswith(str(tmp_path))]


class _SlowConnection(sqlite3.Connection):
    """A connection that yields the CPU before each statement: the scheduling a
    loaded machine gives, so that processes opening the index interleave."""

    def execute(self, *args: Any, **kwargs: Any) -> sqlite3.Cursor:
        time.sleep(random.random() * 0.003)
        return super().execute(*args, **kwargs)


def _open_and_use_index(path: str, barrier: Any, answers: Any) -> None:
    from stores.blobs.index import PackIndex

    barrier.wait()
    index = PackIndex(Path(path))
    try:
        index.add(f"pack-{os.getpid()}", [("ab" * 32, 0, 10)], 10)
        answers.put(len(index.lookup("ab" * 32)) >= 1)
    except Exception as exc:  # reported to the test, which names it
        answers.put(f"{type(exc).__name__}: {exc}")


def test_processes_opening_a_new_pack_index_at_once_all_use_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An import's workers open the index at once; before its shape was set up
    under a lock, one dropped the tables another had just made (CI: "no such
    table: blobs" on the import that followed a full disk)."""
    connect = sqlite3.connect
    monkeypatch.setattr(
        sqlite3, "connect", lambda *a, **k: connect(*a, **k, factory=_SlowConnection)
    )
    ctx = multiprocessing.get_context("fork")
    for trial in range(30):
        path = tmp_path / f"index-{trial}.sqlite"
        barrier, answers = ctx.Barrier(6), ctx.Queue()
        procs = [
            ctx.Process(target=_open_and_use_index, args=(str(path), barrier, answers))
            for _ in range(6)
        ]
        for p in procs:
            p.start()
        got = [answers.get(timeout=120) for _ in procs]
        for p in procs:
            p.join()
        assert got == [True] * 6, f"trial {trial}: {got}"
        assert all(p.exitcode == 0 for p in procs)


def test_a_full_disk_under_the_pack_index_is_an_os_error_naming_the_file(
    tmp_path: Path,
) -> None:
    """SQLite's "database or disk is full" reaches the CLI as the OSError it
    reports (file and cause, exit 1, no traceback), and the index stays usable."""
    from stores.blobs.index import PackIndex

    mnt = tmp_path / "small"
    mnt.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mnt)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (not root)")
    try:
        index = PackIndex(mnt / ".packs.sqlite")
        index.add("pack-0", [("00" * 32, 0, 1)], 1)
        with pytest.raises(OSError) as raised:
            for n in range(1, 10_000):
                entries = [
                    (hashlib.sha256(f"{n}-{k}".encode()).hexdigest(), k, 1) for k in range(200)
                ]
                index.add(f"pack-{n}", entries, 200)
        assert raised.value.errno == errno.ENOSPC
        assert "No space left" in str(raised.value) and ".packs.sqlite" in str(raised.value)
        assert index.has("pack-0") and index.lookup("00" * 32) == [("pack-0", 0, 1)]
        index.close()
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_making_blobs_durable_starts_no_process(tmp_path: Path) -> None:
    # finding libc's syncfs through ctypes.util ran `ldconfig -p` in a subprocess
    # for every command that writes (3-17 ms of a one-message sync)
    code = textwrap.dedent(
        f"""
        import subprocess
        from pathlib import Path
        def refuse(*args, **kwargs):
            raise AssertionError(f"a process was started: {{args}}")
        subprocess.Popen = refuse
        from stores.blobs import BlobStore
        blobs = BlobStore(Path({str(tmp_path / "blobs")!r}))
        blobs.create()
        blobs.put(b"one message")
        blobs.mark_dirty()
        blobs.flush()
        print("flushed")
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=Path(__file__).parents[1]
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "flushed"

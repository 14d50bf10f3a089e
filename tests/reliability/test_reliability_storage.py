"""Storage faults: damage is refused at open and by verify, the file named; a full disk
loses nothing. The quick slice of ``torture/storage.py`` plus the rules it rests on."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from pipeline.cli import main
from pipeline.store import MessageStore
from stores.errors import LogIntegrityError
from torture import storage


def _store(root: Path, n: int = 6) -> MessageStore:
    s = MessageStore.open(root)
    for i in range(n):  # one log file per message
        s.add(None, f"Subject: s{i}\r\nMessage-ID: <m{i}@x>\r\n\r\nbody {i}\r\n".encode())
    s.close()
    return s


def test_a_truncated_log_file_is_refused_at_open_with_its_name(tmp_path: Path) -> None:
    s = _store(tmp_path / "s")
    path = s.log.files()[2].path
    os.truncate(path, path.stat().st_size // 2)
    with pytest.raises(LogIntegrityError, match=path.name):
        MessageStore.open(s.root, create=False)


def test_a_log_file_changed_behind_our_back_is_refused_at_open(tmp_path: Path) -> None:
    s = _store(tmp_path / "s")
    MessageStore.open(s.root, create=False).close()  # checked once, remembered
    path = s.log.files()[1].path
    data = bytearray(path.read_bytes())
    data[len(data) // 3] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(LogIntegrityError, match=path.name):
        MessageStore.open(s.root, create=False)


def test_verify_and_replay_name_a_damaged_file_without_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    s = _store(tmp_path / "s")
    path = s.log.files()[3].path
    os.truncate(path, 100)
    for cmd in ("verify", "replay", "stats"):
        code = main(["--store", str(s.root), cmd])
        out, err = capsys.readouterr()
        assert code == 1 and path.name in out + err, (cmd, out, err)


def test_unchanged_files_are_not_read_again_at_open_but_verify_reads_everything(
    tmp_path: Path,
) -> None:
    """The limit of the open-time check, on purpose: a flip the file system never saw
    (mtime put back) is found by verify and by any read of the file, not at open."""
    s = _store(tmp_path / "s")
    MessageStore.open(s.root, create=False).close()
    path = s.log.files()[0].path
    st = path.stat()
    data = bytearray(path.read_bytes())
    for i in range(40, 80):
        data[i] ^= 0x55
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    with MessageStore.open(s.root, create=False, check=False) as again:
        problems = again.log.verify()
    assert problems and path.name in problems[0]
    with pytest.raises(LogIntegrityError, match=path.name):
        MessageStore.open(s.root, create=False).reindex()


def test_the_checked_files_cache_is_private_and_holds_no_content(tmp_path: Path) -> None:
    s = _store(tmp_path / "s")
    MessageStore.open(s.root, create=False).close()
    cache = s.root / "log" / ".checked.json"
    assert oct(cache.stat().st_mode & 0o777) == "0o600"
    assert b"body" not in cache.read_bytes() and b"Subject" not in cache.read_bytes()


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root (CI runs as root)")
def test_a_full_disk_during_an_import_loses_nothing_and_the_rerun_completes(
    tmp_path: Path,
) -> None:
    bench = storage.Bench(tmp_path, random.Random(3))
    what = storage.case_disk_full(bench, random.Random(4), op="import")
    assert "failed cleanly" in what and "No space left" in what


@pytest.mark.slow
def test_storage_campaign_quick_slice(tmp_path: Path) -> None:
    result = storage.main(trials=storage.QUICK_TRIALS, workdir=tmp_path)
    assert result.ok, result.failures
    assert result.trials >= len(storage.CASES) - (1 if result.skipped else 0)
    if os.geteuid() == 0:
        assert not result.skipped, result.skipped


def test_verify_names_a_file_whose_values_no_longer_decode(tmp_path: Path) -> None:
    """Found by the campaign: a flipped byte that still decompressed gave a timestamp
    out of range, and verify ended in an OverflowError traceback."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    s = _store(tmp_path / "s", 2)
    path = s.log.files()[0].path
    table = pq.read_table(path)
    i = table.column_names.index("recorded_at")
    huge = pa.array([2**62], pa.int64()).cast(table.schema.field(i).type)
    pq.write_table(table.set_column(i, table.schema.field(i), huge), path)
    with MessageStore.open(s.root, create=False, check=False) as again:
        problems = again.log.verify()
    # the digest (v2, over Arrow buffers) decodes no value into Python, so it names
    # the altered rows before anything trips over the timestamp
    assert problems and path.name in problems[0]
    assert "unreadable" in problems[0] or "digest" in problems[0]

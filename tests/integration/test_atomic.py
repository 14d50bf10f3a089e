"""stores.atomic: state files are replaced or created whole, by one writer."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path
from typing import Any

import pytest

from stores.atomic import create_once, replace_file, replacing, unique_name


def test_replace_file_swaps_the_whole_content_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    replace_file(path, b"old")
    replace_file(path, b"new" * 10_000)
    assert path.read_bytes() == b"new" * 10_000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]
    assert path.stat().st_mode & 0o777 == 0o600


def test_a_failed_write_keeps_the_old_content_and_removes_its_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "state.json"
    replace_file(path, b"old")

    def full(fd: int, data: object) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(OSError):
        replace_file(path, b"new")
    monkeypatch.undo()
    assert path.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]


def test_a_fixed_temporary_left_by_a_crash_is_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "journal"
    tmp = tmp_path / "journal.tmp"
    tmp.write_bytes(b"half a plan from a crash, much longer than the new one")
    replace_file(path, b"plan", tmp=tmp)
    assert path.read_bytes() == b"plan" and not tmp.exists()


def test_unique_names_differ_and_keep_the_callers_prefix(tmp_path: Path) -> None:
    path = tmp_path / "store.json"
    a, b = unique_name(path, prefix="store.json."), unique_name(path, prefix="store.json.")
    assert a != b and a.name.startswith("store.json.") and a.name.endswith(".tmp")


def _race(path: str, i: int, start: Any) -> bool:
    start.wait()
    return create_once(Path(path), f"creator {i}\n".encode())


def test_create_once_has_exactly_one_winner_among_processes(tmp_path: Path) -> None:
    for round_ in range(10):
        path = tmp_path / f"marker-{round_}"
        with multiprocessing.Manager() as m:
            start = m.Event()
            with multiprocessing.get_context("spawn").Pool(4) as pool:
                results = pool.starmap_async(_race, [(str(path), i, start) for i in range(4)])
                start.set()
                won = results.get(60)
        assert won.count(True) == 1
        winner = won.index(True)
        assert path.read_bytes() == f"creator {winner}\n".encode()
        assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("marker")) == [
            f"marker-{r}" for r in range(round_ + 1)
        ]
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_replacing_streams_into_place_keeping_the_mode_it_is_given(tmp_path: Path) -> None:
    path = tmp_path / "out.mbox"
    path.write_bytes(b"old")
    with replacing(path, mode=0o640) as fh:
        for n in range(3):
            fh.write(b"part %d\n" % n)
        assert path.read_bytes() == b"old"  # (a reader sees the old until the end)
    assert path.read_bytes() == b"part 0\npart 1\npart 2\n"
    assert path.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.mbox"]


def test_an_error_while_replacing_keeps_the_old_content_and_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "out.mbox"
    path.write_bytes(b"old")
    with pytest.raises(LookupError), replacing(path) as fh:
        fh.write(b"half")
        raise LookupError("the caller failed half way")
    assert path.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.mbox"]

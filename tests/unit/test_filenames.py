"""File names from mail (``pipeline.filenames``): a plain name inside the directory,
whatever the message says; created without replacing or following anything."""

from __future__ import annotations

import os
import unicodedata
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.filenames import MAX_NAME_BYTES, create_new, safe_filename


@pytest.mark.parametrize(
    ("name", "safe"),
    [
        ("../../etc/passwd", "passwd"),
        ("/abs", "abs"),
        ("C:\\Users\\me\\x.doc", "x.doc"),
        (".bashrc", "bashrc"),
        ("..", "part-1.bin"),
        ("", "part-1.bin"),
        (None, "part-1.bin"),
        ("-rf", "rf"),
        ("a\x1b]0;x\x07b.txt", "a_]0;x_b.txt"),
        ("invoice\u202efdp.exe", "invoice_fdp.exe"),
        ("z\u200bw\ufeff.pdf", "z_w_.pdf"),
        ("report.tar.gz", "report.tar.gz"),
        ("  notes .txt. ", "notes.txt"),
        ("cafe\u0301.txt", "café.txt"),  # (NFC: one name for one text)
    ],
)
def test_a_hostile_name_becomes_a_plain_name(name: str | None, safe: str) -> None:
    assert safe_filename(name, fallback="part-1.bin") == safe


def test_a_long_name_is_cut_keeping_its_extension() -> None:
    for stem in ("x" * 1000, "ż" * 300):
        name = safe_filename(stem + ".pdf")
        assert name.endswith(".pdf") and len(name.encode()) <= MAX_NAME_BYTES
        assert name.removesuffix(".pdf") == stem[: len(name) - 4]


@given(st.text(max_size=300))
def test_any_name_gives_a_plain_visible_name_of_bounded_length(name: str) -> None:
    safe = safe_filename(name)
    assert safe and "/" not in safe and "\\" not in safe and safe not in (".", "..")
    assert not safe.startswith((".", "-", " "))
    assert len(safe.encode("utf-8", "surrogatepass")) <= MAX_NAME_BYTES
    assert all(unicodedata.category(c) not in {"Cc", "Cf", "Cs", "Zl", "Zp"} for c in safe)


def test_create_new_never_replaces_a_file_nor_follows_a_link(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_bytes(b"keep")
    inside = tmp_path / "dir"
    inside.mkdir()
    (inside / "a.txt").write_bytes(b"first")
    (inside / "b.txt").symlink_to(target)
    (inside / "c.txt").symlink_to(tmp_path / "dangling")
    fd = os.open(inside, os.O_RDONLY | os.O_DIRECTORY)
    try:
        names = []
        for name in ("a.txt", "a.txt", "b.txt", "c.txt", "noext"):
            used, fh = create_new(fd, name)
            with fh:
                fh.write(name.encode())
            names.append(used)
    finally:
        os.close(fd)
    assert names == ["a (1).txt", "a (2).txt", "b (1).txt", "c (1).txt", "noext"]
    assert (inside / "a.txt").read_bytes() == b"first" and target.read_bytes() == b"keep"
    assert not (tmp_path / "dangling").exists()
    assert oct(os.stat(inside / "noext").st_mode & 0o777) == "0o600"

"""Passwords and tokens never appear in output, JSON, metrics, the store or the
arguments of a running sync; store files are 0600 and directories 0700. The quick
slice of ``torture/secrets.py`` and the rule behind the modes."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from pipeline.cli import main
from torture import secrets


@pytest.mark.slow
@pytest.mark.usefixtures("dovecot")
def test_secrets_campaign_quick_slice(tmp_path: Path) -> None:
    result = secrets.main(trials=secrets.QUICK_TRIALS, workdir=tmp_path)
    assert result.ok, result.failures
    assert result.figures["cmdline_samples"] > 10


def test_every_file_a_command_makes_in_a_store_is_private_whatever_the_umask(
    tmp_path: Path,
) -> None:
    src = tmp_path / "md"
    for d in ("cur", "new", "tmp"):
        (src / d).mkdir(parents=True)
    (src / "cur" / "1.M1P1.h:2,S").write_bytes(b"Subject: x\r\nMessage-ID: <p@x>\r\n\r\nx\r\n")
    store = tmp_path / "store"
    old = os.umask(0)
    try:
        for args in (["import", "maildir", str(src)], ["replay"], ["verify"], ["stats"]):
            assert main(["--store", str(store), *args]) == 0
        assert os.umask(0) == 0  # main() gave the caller's umask back
    finally:
        os.umask(old)
    for path in [store, *store.rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), (path, oct(mode))

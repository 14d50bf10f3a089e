"""An upgrade under a running sync (``pip install -U`` during a cron sync): the run
finishes on the code it started with, or, where it would start processes from the
new files, stops by name and loses nothing (a real Dovecot, a real subprocess of
the CLI run from a copy of the code that is swapped while the run waits)."""

from __future__ import annotations

import compileall
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pipeline.held_code import PACKAGES
from pipeline.sync.fetch import WORKER_FETCH_MIN
from testkit.cli import SyncEnv

pytestmark = pytest.mark.usefixtures("dovecot")

MANY = WORKER_FETCH_MIN
_NEW = 'raise ImportError("the new version: not the code this run started with")\n'


def _msg(i: int) -> bytes:
    return (
        f"From: s{i}@upgrade.example\r\nTo: me@upgrade.example\r\nSubject: upgrade {i}\r\n"
        f"Message-ID: <u{i}@upgrade.example>\r\n\r\nbody {i}\r\n"
    ).encode()


def _copy_of_the_code(tmp_path: Path) -> Path:
    """mailledger's packages copied, compiled as an install leaves them (.pyc)."""
    tree = tmp_path / "site"
    repo = Path(__file__).resolve().parents[2]
    for name in PACKAGES:
        shutil.copytree(repo / name, tree / name, ignore=shutil.ignore_patterns("__pycache__"))
    assert compileall.compile_dir(str(tree), quiet=2)
    return tree


def _upgrade(tree: Path) -> None:
    """What an upgrade could leave: one package gone, every other file new."""
    shutil.rmtree(tree / "stores")
    for path in tree.rglob("*.py"):
        path.write_text(_NEW)


@pytest.fixture
def waiting_sync(
    imap_user: Callable[[str], Any], dovecot: Any, tmp_path: Path
) -> Callable[..., tuple[int, str, str, SyncEnv]]:
    """``run(*args)``: a sync of ``MANY`` new messages (enough for worker processes)
    from the copy of the code, which waits in its password_command while the copy is
    upgraded: (exit, stdout, stderr, env)."""
    imap_user("fastmail").bulk_maildir("INBOX", [_msg(i) for i in range(MANY)])
    env = SyncEnv(tmp_path, dovecot, {"fastmail": {"folders": ["INBOX"]}})
    tree = _copy_of_the_code(tmp_path)
    waiting, go = tmp_path / "waiting", tmp_path / "go"
    script = tmp_path / "password.sh"
    password = env.env["MAILLEDGER_TEST_FASTMAIL_PASSWORD"]
    script.write_text(
        f"#!/bin/sh\ntouch {waiting}\nwhile [ ! -e {go} ]; do sleep 0.05; done\necho {password}\n"
    )
    script.chmod(0o755)
    env.config.write_text(
        env.config.read_text().replace(
            'password_env = "MAILLEDGER_TEST_FASTMAIL_PASSWORD"', f'password_command = "{script}"'
        )
    )

    def run(*args: str) -> tuple[int, str, str, SyncEnv]:
        cmd = [sys.executable, "-m", "pipeline", "--store", str(env.store), "sync", "--apply",
               "--config", str(env.config), "--json", *args]  # fmt: skip
        child_env = {**os.environ, **env.env, "PYTHONPATH": str(tree)}
        with subprocess.Popen(
            cmd, env=child_env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True,
        ) as proc:  # fmt: skip
            deadline = time.monotonic() + 60
            while not waiting.exists():
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline, "the sync never asked for its password"
                time.sleep(0.02)
            _upgrade(tree)
            go.touch()
            out, err = proc.communicate(timeout=120)
        return proc.returncode, out, err, env

    return run


def test_a_sync_under_an_upgrade_finishes_on_the_code_it_started_with(
    waiting_sync: Callable[..., tuple[int, str, str, SyncEnv]], tmp_path: Path
) -> None:
    code, out, err, env = waiting_sync("--workers", "0")
    assert code == 0, err
    assert json.loads(out)["accounts"]["fastmail"]["folders"]["INBOX"]["new"] == MANY
    with env.open() as store:
        assert set(store.message_ids()) == {f"u{i}@upgrade.example" for i in range(MANY)}
        assert store.verify() == []
    # the copy it ran from is the new version now: a run started from it fails at once
    later = subprocess.run(
        [sys.executable, "-m", "pipeline", "--version"],
        env={**os.environ, "PYTHONPATH": str(tmp_path / "site")},
        cwd=tmp_path, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert later.returncode != 0 and "the new version" in later.stderr


def test_a_sync_under_an_upgrade_starts_no_worker_from_the_new_files_and_loses_nothing(
    waiting_sync: Callable[..., tuple[int, str, str, SyncEnv]], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err, env = waiting_sync("--workers", "1")
    assert code == 1 and "Traceback" not in err, err
    assert "mailledger's files changed while this run ran" in out + err
    folder = json.loads(out)["accounts"]["fastmail"]["folders"]["INBOX"]
    assert folder["cursor_to"] == folder["cursor_from"]  # no cursor moved past what is held
    # run again (on the code installed now): everything arrives
    code, report = env.sync("--apply", capsys=capsys)
    assert code == 0 and report["accounts"]["fastmail"]["folders"]["INBOX"]["new"] == MANY

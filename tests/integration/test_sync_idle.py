"""An idle `mailledger sync --apply` answered from the cursor snapshot: no store
opened (neither DuckDB nor pyarrow loaded) when nothing changed on the server,
the full path otherwise, and the same report either way (a real Dovecot)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pipeline.cli import main
from projections import snapshot
from testkit.cli import SyncEnv

pytestmark = pytest.mark.usefixtures("dovecot")

# runs the CLI, then says on stderr whether DuckDB or pyarrow were loaded
_PROBE = (
    "import atexit, runpy, sys\n"
    "atexit.register(lambda: print('HEAVY=' + ','.join(m for m in ('duckdb', 'pyarrow')"
    " if m in sys.modules), file=sys.stderr))\n"
    "sys.argv = ['mailledger', *sys.argv[1:]]\n"
    "runpy.run_module('pipeline', run_name='__main__', alter_sys=True)\n"
)


def _msg(i: int) -> bytes:
    return (
        f"From: s{i}@idle.example\r\nTo: me@idle.example\r\nSubject: idle {i}\r\n"
        f"Message-ID: <i{i}@idle.example>\r\n\r\nbody {i}\r\n"
    ).encode()


@pytest.fixture
def fastmail(imap_user: Callable[[str], Any], dovecot: Any, tmp_path: Path) -> tuple[Any, SyncEnv]:
    user = imap_user("fastmail")
    return user, SyncEnv(tmp_path, dovecot, {"fastmail": {"folders": ["INBOX", "\\Archive"]}})


def _run(env: SyncEnv, *args: str) -> tuple[int, dict[str, Any], bool]:
    """A sync in its own process: (exit, JSON report, whether DuckDB or pyarrow loaded)."""
    cmd = [sys.executable, "-c", _PROBE, "--store", str(env.store), "sync", "--apply",
           "--config", str(env.config), "--json", *args]  # fmt: skip
    done = subprocess.run(
        cmd, env={**os.environ, **env.env}, capture_output=True, text=True, timeout=120
    )
    heavy = next(ln for ln in done.stderr.splitlines() if ln.startswith("HEAVY="))
    return done.returncode, json.loads(done.stdout), heavy != "HEAVY="


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return {**a, "run_id": None} == {**b, "run_id": None}


def _last_seq(env: SyncEnv) -> int:
    with env.open() as s:
        return s.log.last_seq()


def test_an_idle_sync_opens_no_store_and_reports_what_the_full_path_reports(
    fastmail: tuple[Any, SyncEnv], capsys: pytest.CaptureFixture[str]
) -> None:
    user, env = fastmail
    for i in range(12):
        user.save("INBOX", _msg(i))
    user.save("Archive", _msg(20))
    assert env.sync("--apply", capsys=capsys)[0] == 0
    seq = _last_seq(env)
    code, fast, heavy = _run(env)
    assert code == 0 and not heavy
    assert fast["accounts"]["fastmail"]["folders"]["INBOX"]["cursor_to"] == 12
    (env.store / snapshot.SNAPSHOT_NAME).unlink()  # the full path, as before the snapshot
    code, full, heavy = _run(env)
    assert code == 0 and heavy and _same(fast, full)
    assert _last_seq(env) == seq  # neither wrote an event
    # an expunge moves no cursor and records nothing without --reconcile: idle still,
    # the same report as the full path's (which a fold of nothing did not rewrite)
    assert env.sync("--apply", capsys=capsys)[0] == 0
    assert not (env.store / snapshot.SNAPSHOT_NAME).exists()  # (no fold: not made)
    user.save("INBOX", _msg(13))
    assert env.sync("--apply", capsys=capsys)[0] == 0  # a fold: the snapshot made again
    user.expunge("INBOX", 5)
    code, fast, heavy = _run(env)
    assert code == 0 and not heavy
    (env.store / snapshot.SNAPSHOT_NAME).unlink()
    code, full, _ = _run(env)
    assert code == 0 and _same(fast, full)


def test_new_mail_takes_the_full_path_on_the_same_connection(
    fastmail: tuple[Any, SyncEnv], capsys: pytest.CaptureFixture[str]
) -> None:
    user, env = fastmail
    for i in range(3):
        user.save("INBOX", _msg(i))
    assert env.sync("--apply", capsys=capsys)[0] == 0
    user.save("INBOX", _msg(3))
    mark = env.dv.log_mark()
    code, report, heavy = _run(env)
    inbox = report["accounts"]["fastmail"]["folders"]["INBOX"]
    assert code == 0 and heavy and (inbox["new"], inbox["bodies"], inbox["cursor_to"]) == (1, 1, 4)
    [session] = user.sessions_since(mark)  # one login: the full path took its connection
    assert session.body_count == 1
    code, report, heavy = _run(env)  # the fold rewrote the snapshot: idle again
    assert code == 0 and not heavy
    assert report["accounts"]["fastmail"]["folders"]["INBOX"]["cursor_from"] == 4


def test_a_uidvalidity_change_takes_the_full_path(
    fastmail: tuple[Any, SyncEnv], capsys: pytest.CaptureFixture[str]
) -> None:
    user, env = fastmail
    for i in range(3):
        user.save("INBOX", _msg(i))
    assert env.sync("--apply", capsys=capsys)[0] == 0
    old = user.status("INBOX")["uidvalidity"]
    env.dv.set_uidvalidity("fastmail", "INBOX", old + 1000)
    code, report, heavy = _run(env)
    assert code == 3 and heavy
    assert any("UIDVALIDITY changed" in a for a in report["alarms"])


@pytest.mark.parametrize("damage", ["stale", "corrupt", "other format"])
def test_a_stale_or_damaged_snapshot_is_not_used(
    fastmail: tuple[Any, SyncEnv], capsys: pytest.CaptureFixture[str], damage: str
) -> None:
    user, env = fastmail
    for i in range(3):
        user.save("INBOX", _msg(i))
    assert env.sync("--apply", capsys=capsys)[0] == 0
    path = env.store / snapshot.SNAPSHOT_NAME
    doc = json.loads(path.read_text())
    if damage == "stale":
        doc["seq"] -= 1
        path.write_text(json.dumps(doc))
    elif damage == "corrupt":
        path.write_bytes(path.read_bytes()[:50])
    else:
        doc["folders"][0]["held"] = "x"
        path.write_text(json.dumps(doc))
    code, report, heavy = _run(env)
    assert code == 0 and heavy
    assert report["accounts"]["fastmail"]["folders"]["INBOX"]["cursor_to"] == 3


def test_a_log_file_not_yet_checked_takes_the_full_path(
    fastmail: tuple[Any, SyncEnv], capsys: pytest.CaptureFixture[str]
) -> None:
    # the store's open checks such a file in full (and refuses a damaged one)
    user, env = fastmail
    user.save("INBOX", _msg(1))
    assert env.sync("--apply", capsys=capsys)[0] == 0
    (env.store / "log" / ".checked.json").unlink()
    assert _run(env)[2]  # heavy: the full path checked the log...
    assert not _run(env)[2]  # ...and noted it checked: idle again


def test_replay_rewrites_the_snapshot(
    fastmail: tuple[Any, SyncEnv], capsys: pytest.CaptureFixture[str]
) -> None:
    user, env = fastmail
    for i in range(10):
        user.save("INBOX", _msg(i))
    assert env.sync("--apply", capsys=capsys)[0] == 0
    path = env.store / snapshot.SNAPSHOT_NAME
    before = json.loads(path.read_text())
    [inbox] = [f for f in before["folders"] if f["folder"] == "INBOX"]
    held = inbox["held"]
    assert [h[0] for h in held] == list(range(1, 11))  # every UID of a small folder
    assert held[0][1] == "i0@idle.example" and held[0][3] > 0
    path.unlink()
    assert main(["--store", str(env.store), "replay"], env={}) == 0
    capsys.readouterr()
    assert json.loads(path.read_text()) == before
    assert not _run(env)[2]


def test_a_password_command_runs_once_when_the_full_path_follows(
    fastmail: tuple[Any, SyncEnv], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    user, env = fastmail
    for i in range(2):
        user.save("INBOX", _msg(i))
    assert env.sync("--apply", capsys=capsys)[0] == 0
    user.save("INBOX", _msg(2))  # new mail: the idle attempt gives up
    calls = tmp_path / "calls"
    password = env.env["MAILLEDGER_TEST_FASTMAIL_PASSWORD"]
    script = tmp_path / "password.sh"
    script.write_text(f"#!/bin/sh\necho x >> {calls}\necho {password}\n")
    script.chmod(0o755)
    text = env.config.read_text().replace(
        'password_env = "MAILLEDGER_TEST_FASTMAIL_PASSWORD"', f'password_command = "{script}"'
    )
    env.config.write_text(text)
    code, report, heavy = _run(env)
    assert code == 0 and heavy and report["accounts"]["fastmail"]["folders"]["INBOX"]["new"] == 1
    assert calls.read_text().splitlines() == ["x"]


def test_a_store_marker_of_another_format_is_refused_as_before(
    fastmail: tuple[Any, SyncEnv], capsys: pytest.CaptureFixture[str]
) -> None:
    user, env = fastmail
    user.save("INBOX", _msg(1))
    assert env.sync("--apply", capsys=capsys)[0] == 0
    (env.store / "store.json").write_text('{"format": "other", "version": 1}\n')
    code = main(["--store", str(env.store), "sync", "--apply", "--config", str(env.config)],
                env=env.env)  # fmt: skip
    assert code == 2 and "unknown store format" in capsys.readouterr().err

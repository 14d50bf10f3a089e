"""Progress on long work (issue 13): a bar on a terminal, nothing under cron.

The commands run as a user runs them, in a child process whose stderr is a real
pseudo-terminal (or a pipe, as under cron); what reaches the terminal is read
with the time it arrived. The sync runs against the tests' Dovecot through the
fault proxy, which stalls each body FETCH's answer as a slow link would.
"""

from __future__ import annotations

import fcntl
import itertools
import os
import re
import select
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pipeline.bootstrap import App
from pipeline.config import load_config
from pipeline.progress import NO_PROGRESS, TerminalProgress, progress_for
from pipeline.reports import SyncOptions
from pipeline.store import MessageStore
from pipeline.sync.accounts import sync_accounts
from projections.fold import REBUILD_PHASES

REPO = Path(__file__).resolve().parents[2]
# what only a progress display writes: a bar, a rate, a carriage return
_PROGRESS_MARKS = ("%|", "msg/s", "\r")


@dataclass
class Run:
    code: int
    stdout: bytes
    stderr: bytes  # the pipe's bytes, or what reached the terminal
    chunks: list[tuple[float, bytes]] = field(default_factory=list)  # (monotonic, bytes) read


@contextmanager
def _pty(columns: int = 100, lines: int = 30) -> Iterator[tuple[int, int]]:
    """A pseudo-terminal of ``columns`` x ``lines``: (master, slave) descriptors."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", lines, columns, 0, 0))
    try:
        yield master, slave
    finally:
        for fd in (master, slave):
            with suppress(OSError):
                os.close(fd)


def _drain(fds: dict[int, bytearray], chunks: list[tuple[float, bytes]], tty: int | None) -> None:
    """Read every descriptor of ``fds`` until each is at its end (a pty master at
    its child's exit reads EIO)."""
    while fds:
        ready, _, _ = select.select(list(fds), [], [], 0.1)
        for fd in ready:
            try:
                data = os.read(fd, 65536)
            except OSError:
                data = b""
            if not data:
                del fds[fd]
                continue
            fds[fd] += data
            if fd == tty:
                chunks.append((time.monotonic(), data))


def mailledger(args: Sequence[str], *, tty: bool, env: dict[str, str] | None = None) -> Run:
    """``python -m pipeline ARGS``; stderr a terminal when ``tty``, else a pipe
    (stdout is a pipe either way, as in ``mailledger ... > file``)."""
    argv = [sys.executable, "-m", "pipeline", *args]
    full_env = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}
    if not tty:
        p = subprocess.run(argv, capture_output=True, env=full_env, cwd=REPO, timeout=300)
        return Run(p.returncode, p.stdout, p.stderr)
    with _pty() as (master, slave):
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL,
            env=full_env, cwd=REPO,
        )  # fmt: skip
        os.close(slave)
        assert proc.stdout is not None
        out_fd = proc.stdout.fileno()
        bufs = {master: bytearray(), out_fd: bytearray()}
        chunks: list[tuple[float, bytes]] = []
        reader = threading.Thread(target=_drain, args=(dict(bufs), chunks, master))
        # (the dict's bytearrays are shared: the reader fills them)
        reader.start()
        code = proc.wait(timeout=300)
        reader.join(30)
        proc.stdout.close()
        return Run(code, bytes(bufs[out_fd]), bytes(bufs[master]), chunks)


def _redraws(tty: bytes) -> list[str]:
    """The successive states of the progress line (each redraw starts with ``\\r``)."""
    return [s.strip() for s in tty.decode("utf-8", "replace").split("\r") if s.strip()]


def _message(i: int) -> bytes:
    return (
        f"From: a{i % 7}@progress.example\r\nTo: me@progress.example\r\n"
        f"Subject: progress {i}\r\nDate: Tue, 01 Dec 2026 10:00:00 +0000\r\n"
        f"Message-ID: <p{i}@progress.example>\r\n\r\n" + "body line\r\n" * 40
    ).encode()


# -- import, replay, verify from the command line ---------------------------------

_MAILDIR = 300


@pytest.fixture
def maildir(tmp_path: Path) -> Path:
    """A Maildir of ``_MAILDIR`` messages in ``cur/`` (the last 20 copies of others)."""
    root = tmp_path / "Maildir"
    for sub in ("cur", "new", "tmp"):
        (root / sub).mkdir(parents=True)
    for i in range(_MAILDIR):
        (root / "cur" / f"{1764590000 + i}.M{i}P1.host:2,S").write_bytes(_message(i % 280))
    return root


def test_import_maildir_on_a_terminal_shows_done_of_total_rate_and_eta(
    maildir: Path, tmp_path: Path
) -> None:
    # (two worker processes read the files: the bar is this process's alone)
    args = ["--store", str(tmp_path / "s"), "import", "maildir", str(maildir), "--workers", "2"]
    run = mailledger(args, tty=True)
    assert run.code == 0, run.stderr
    states = _redraws(run.stderr)
    bars = [s for s in states if s.startswith("import maildir:") and "%|" in s]
    # done/total of the files listed, rate and ETA
    eta = re.compile(rf"\| \d+/{_MAILDIR} \[\d\d:\d\d<[\d:?]+, +[\d.?]+ msg/s\]$")
    assert any(eta.search(b) for b in bars), states
    # one bar at a time (no child drew one), and it is gone when the command ends:
    # its line is blank again, and nothing was drawn after it (at exit)
    assert all(s.startswith("import maildir") for s in states), states
    assert run.stderr.rstrip(b" ").endswith(b"\r")
    assert b"seen=300 new=280 duplicates=20" in run.stdout and b"%|" not in run.stdout


def test_import_and_replay_without_a_terminal_print_no_progress_and_the_same_answer(
    maildir: Path, tmp_path: Path
) -> None:
    box = str(maildir)
    piped = mailledger(["--store", str(tmp_path / "a"), "import", "maildir", box], tty=False)
    on_tty = mailledger(["--store", str(tmp_path / "b"), "import", "maildir", box], tty=True)
    assert piped.code == on_tty.code == 0
    assert piped.stdout == on_tty.stdout  # progress never reaches stdout
    assert piped.stderr == b""  # nothing extra under cron
    assert all(m.encode() in on_tty.stderr for m in _PROGRESS_MARKS)

    piped = mailledger(["--store", str(tmp_path / "a"), "replay"], tty=False)
    on_tty = mailledger(["--store", str(tmp_path / "b"), "replay"], tty=True)
    assert piped.code == on_tty.code == 0
    assert piped.stderr == b""
    seconds = re.compile(rb" in [\d.]+s into \S+")
    assert seconds.sub(b"", piped.stdout) == seconds.sub(b"", on_tty.stdout)
    assert b"replayed 300 events" in piped.stdout
    states = _redraws(on_tty.stderr)
    for i, name in enumerate(REBUILD_PHASES, 1):  # done/total: the rebuild's phases
        shown = rf"replay of 300 events, {i}/{len(REBUILD_PHASES)}: {name} \[\d\d:\d\d\]"
        assert any(re.fullmatch(shown, s) for s in states), states


def test_verify_on_a_terminal_shows_each_step_and_counts_the_blobs(
    maildir: Path, tmp_path: Path
) -> None:
    store = str(tmp_path / "s")
    assert mailledger(["--store", store, "import", "maildir", str(maildir)], tty=False).code == 0
    verify = mailledger(["--store", store, "verify"], tty=True)
    assert verify.code == 0, verify.stdout
    states = _redraws(verify.stderr)
    assert any(s.startswith("verify: the log [") for s in states), states
    # every stored message's blob, counted out of their number
    assert any(re.search(r"^verify: blobs: +\d+%\|.*\| \d+/280 ", s) for s in states), states
    assert any(s.startswith("verify: a fresh replay of 300 events [") for s in states), states
    assert b"ok: 300 events" in verify.stdout
    piped = mailledger(["--store", store, "verify"], tty=False)
    assert (piped.code, piped.stdout, piped.stderr) == (0, verify.stdout, b"")


# -- who decides: the command line ------------------------------------------------


def test_progress_shows_only_on_a_terminal_and_not_when_logging_is_quieter_than_warning(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import logging

    from pipeline.cli.common import command_progress

    with _pty() as (_, slave), open(slave, "w", closefd=False) as tty:
        monkeypatch.setattr(sys, "stderr", tty)
        assert isinstance(command_progress(), TerminalProgress)
        logger = logging.getLogger("mailledger")
        monkeypatch.setattr(logger, "level", logging.ERROR)  # what -q sets (pipeline.verbosity)
        assert command_progress() is NO_PROGRESS
        monkeypatch.setattr(logger, "level", logging.NOTSET)
        assert isinstance(command_progress(), TerminalProgress)
    with open(tmp_path / "err", "w") as cron:
        monkeypatch.setattr(sys, "stderr", cron)
        assert command_progress() is NO_PROGRESS


# -- the terminal display itself --------------------------------------------------


def _read_for(master: int, seconds: float) -> list[tuple[float, bytes]]:
    got: list[tuple[float, bytes]] = []
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        ready, _, _ = select.select([master], [], [], left)
        if ready:
            got.append((time.monotonic(), os.read(master, 65536)))
    return got


def test_a_bar_nothing_advances_is_redrawn_at_least_every_two_seconds() -> None:
    # a large body on a slow link: no unit finishes for a while, the bar stays live
    with _pty() as (master, slave), open(slave, "w", closefd=False) as tty:
        progress = TerminalProgress(tty)
        progress.start(400, "acct INBOX")
        progress.advance(100)
        got = _read_for(master, 4.5)
        progress.close()
        tail = _read_for(master, 0.3)
    times = [t for t, _ in got]
    assert len(times) >= 3, got
    assert max(b - a for a, b in itertools.pairwise(times)) < 2.0, times
    text = b"".join(d for _, d in got).decode()
    # the elapsed time moves: the stall is visible as such
    assert "100/400 [00:03" in text or "100/400 [00:04" in text, text
    assert tail and tail[-1][1].endswith(b"\r")  # closed: the line cleared


def test_a_short_task_under_the_delay_draws_nothing() -> None:
    with _pty() as (master, slave), open(slave, "w", closefd=False) as tty:
        progress = progress_for(True, delay=0.5, stream=tty)
        progress.start(3, "acct Sent")
        progress.advance(3)
        progress.close()
        assert _read_for(master, 0.6) == []


# -- a first sync of a large folder -----------------------------------------------


class Recorder:
    """A ``Progress`` that notes each call with the monotonic time it came."""

    def __init__(self) -> None:
        self.calls: list[tuple[float, str, Any]] = []

    def start(self, total: int | None, label: str, *, unit: str | None = "msg") -> None:
        self.calls.append((time.monotonic(), "start", (total, label, unit)))

    def advance(self, n: int = 1) -> None:
        self.calls.append((time.monotonic(), "advance", n))

    def close(self) -> None:
        self.calls.append((time.monotonic(), "close", None))


def test_import_mbox_counts_the_bytes_of_the_file_message_by_message(store: MessageStore) -> None:
    from pipeline.sources.mbox import import_mbox

    mbox = REPO / "fixtures" / "lists.mbox"
    rec = Recorder()
    counts = import_mbox(store, mbox, progress=rec)
    assert [c[2] for c in rec.calls if c[1] == "start"] == [
        (mbox.stat().st_size, "import mbox", "B")
    ]
    steps = [n for _, k, n in rec.calls if k == "advance"]
    # each message's bytes as it is read, the separator lines between them at the end
    assert len(steps) == counts.uids_seen + 1 and min(steps) > 0
    assert sum(steps) == mbox.stat().st_size


def test_import_gdbm_counts_its_records(store: MessageStore, tmp_path: Path) -> None:
    from pipeline.sources.gdbm import import_gdbm
    from testkit.gdbm import have_gnu, make_gdbm

    path = make_gdbm(tmp_path / "mail.gdbm", [(f"u{i}".encode(), _message(i)) for i in range(7)])
    rec = Recorder()
    counts = import_gdbm(store, path, progress=rec)
    assert counts.new_messages == 7
    # the total where dbm.gnu counts the records; through gdbm_dump, the rate alone
    total = 7 if have_gnu() else None
    assert [c[2] for c in rec.calls if c[1] == "start"] == [(total, "import gdbm", "msg")]
    assert [n for _, k, n in rec.calls if k == "advance"] == [1] * 7


_INBOX = 400  # four FETCHes of 100 bodies
_STALL = 1.2  # seconds each FETCH's answer is held up, 3 kB into it


def _slow_fetches(n: int = _INBOX // 100) -> list[Any]:
    from testkit.faultproxy import Fault

    return [
        Fault("stall", conn=None, on_command="BODY.PEEK[]", nth=k, after=3000,
              seconds=_STALL, then="resume")
        for k in range(1, n + 1)
    ]  # fmt: skip


def _config(dovecot: Any, tmp_path: Path, port: int) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(dovecot.account_toml("plain", name="progress", port=port, folders=["INBOX"]))
    return path


@pytest.mark.usefixtures("dovecot")
def test_first_sync_of_a_large_folder_on_a_slow_link_advances_every_fetch_batch(
    dovecot: Any, imap_user: Any, tmp_path: Path
) -> None:
    from testkit.faultproxy import FaultProxy

    imap_user("plain")
    dovecot.bulk_maildir("plain", "INBOX", [_message(i) for i in range(_INBOX)])
    with FaultProxy(("127.0.0.1", dovecot.imap_port)) as proxy:
        proxy.schedule(_slow_fetches())
        config = load_config(_config(dovecot, tmp_path, proxy.port), dovecot.password_env())
        rec = Recorder()
        with MessageStore.open(tmp_path / "store") as store:
            report = sync_accounts(
                store, config, dovecot.password_env(), SyncOptions(apply=True),
                emit=lambda _: None, progress=rec, sources=App(dovecot.password_env()).sources,
            )  # fmt: skip
        assert sum(1 for f in proxy.fired if f.fault.kind == "stall") == _INBOX // 100
    assert not report.failed and not report.alarms, report.as_dict()
    kinds = [k for _, k, _ in rec.calls]
    assert kinds[0] == "start" and rec.calls[0][2] == (_INBOX, "progress INBOX", "msg")
    assert kinds[-1] == "close"
    steps = [(t, n) for t, k, n in rec.calls if k == "advance"]
    assert sum(n for _, n in steps) == _INBOX
    assert len(steps) >= _INBOX // 100 and max(n for _, n in steps) <= 100
    times = [rec.calls[0][0], *(t for t, _ in steps)]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    # the link was slow (each batch held up), yet the count moved at least every 2 s
    assert times[-1] - times[0] >= (_INBOX // 100) * _STALL
    assert max(gaps) < 2.0, gaps


@pytest.mark.usefixtures("dovecot")
def test_first_sync_fetched_by_workers_advances_per_worker_batch(
    dovecot: Any, imap_user: Any, tmp_path: Path
) -> None:
    imap_user("plain")
    dovecot.bulk_maildir("plain", "INBOX", [_message(i) for i in range(_INBOX)])
    config = load_config(_config(dovecot, tmp_path, dovecot.imap_port), dovecot.password_env())
    rec = Recorder()
    with MessageStore.open(tmp_path / "store") as store:
        report = sync_accounts(
            store, config, dovecot.password_env(), SyncOptions(apply=True, workers=2),
            emit=lambda _: None, progress=rec, sources=App(dovecot.password_env()).sources,
        )  # fmt: skip
    assert not report.failed and not report.alarms, report.as_dict()
    steps = [n for _, k, n in rec.calls if k == "advance"]
    # reported from this process, a worker's batch at a time, never the folder at once
    assert sum(steps) == _INBOX and len(steps) >= _INBOX // 100 and max(steps) <= 100


@pytest.mark.usefixtures("dovecot")
def test_sync_on_a_terminal_redraws_its_folder_bar_at_least_every_two_seconds(
    dovecot: Any, imap_user: Any, tmp_path: Path
) -> None:
    from testkit.faultproxy import FaultProxy

    imap_user("plain")
    dovecot.bulk_maildir("plain", "INBOX", [_message(i) for i in range(_INBOX)])
    with FaultProxy(("127.0.0.1", dovecot.imap_port)) as proxy:
        proxy.schedule(_slow_fetches())
        config = _config(dovecot, tmp_path, proxy.port)
        args = ["--store", str(tmp_path / "store"), "sync", "--apply", "--config", str(config),
                "--workers", "0"]  # fmt: skip
        run = mailledger(args, tty=True, env=dovecot.password_env())
    assert run.code == 0, (run.stdout, run.stderr)
    drawn = [(t, s) for t, d in run.chunks for s in _redraws(d) if s.startswith("progress INBOX:")]
    assert drawn, run.stderr
    times = [t for t, _ in drawn]
    assert times[-1] - times[0] >= 3 * _STALL  # (the bar lived through the slow fetches)
    assert max(b - a for a, b in itertools.pairwise(times)) < 2.0, drawn
    counts = [int(m.group(1)) for _, s in drawn if (m := re.search(r"(\d+)/400 \[", s))]
    assert counts[0] < counts[-1] and counts[-1] >= 300, counts  # the count moved
    assert b"%|" not in run.stdout and b"new=400 bodies=400" in run.stdout


@pytest.mark.usefixtures("dovecot")
def test_pop3_download_advances_message_by_message(
    dovecot: Any, imap_user: Any, tmp_path: Path
) -> None:
    imap_user("plain")
    dovecot.bulk_maildir("plain", "INBOX", [_message(i) for i in range(12)])
    path = tmp_path / "config.toml"
    path.write_text(dovecot.account_toml("plain", name="pop", type="pop3"))
    config = load_config(path, dovecot.password_env())
    rec = Recorder()
    with MessageStore.open(tmp_path / "store") as store:
        report = sync_accounts(
            store, config, dovecot.password_env(), SyncOptions(apply=True),
            emit=lambda _: None, progress=rec, sources=App(dovecot.password_env()).sources,
        )  # fmt: skip
    assert not report.failed and not report.alarms, report.as_dict()
    assert [(k, v) for _, k, v in rec.calls] == [
        ("start", (12, "pop INBOX", "msg")),
        *[("advance", 1)] * 12,
        ("close", None),
    ]

"""The DuckDB file that holds the projections.

DuckDB lets one process open a file for writing and nobody else open it at all,
so every caller holds it briefly and retries while another process has it.

A process keeps one DuckDB instance (in memory) and ATTACHes the projection file
to it for each hold, DETACHing it on release: starting a DuckDB instance costs
13-25 ms here, an ATTACH about 1 ms, and a sync holds the file once or twice
per batch (25 holds for 10,000 messages: half a second of instances). Detaching
closes the file and releases its lock exactly as closing a connection did.

A writer says it wants the file before it waits for it: it holds ``flock(LOCK_EX)``
on ``<file>.intent`` from before its ATTACH until its DETACH. A reader that keeps
the file across many operations (``serve --listen``'s web children, while requests
queue) asks ``writer_waiting`` before each and lets go when one does, then
``wait_for_writer``: without it, readers taking turns from several processes could
keep the file held by one of them at every instant a writer tried.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import signal
import threading
import time
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb

from stores.errors import LockTimeout

__all__ = [
    "CONFIG",
    "MIN_BUDGET",
    "all_threads",
    "builders",
    "connect",
    "default_budget",
    "duckdb_share",
    "fresh_instances",
    "intent_path",
    "interruptible",
    "parse_size",
    "release",
    "set_query_threads",
    "start_instance",
    "wait_for_writer",
    "writer_waiting",
]  # fmt: skip

# A sync run from cron should stay small: DuckDB would otherwise size its buffer
# pool from the machine's RAM and start a thread per core for tiny queries.
CONFIG = {"memory_limit": "512MB", "threads": "2"}
# A read-only connection answers point lookups (get, find, walk_thread): handing
# their few small pipelines to a second thread cost more than it gave (find p50
# 2.3 ms with two threads, 1.7 ms with one, on the 100k bench store). Ad-hoc
# queries get CONFIG's threads back (``all_threads``).
READER_THREADS = "1"


_MIB = 1 << 20
# The least budget a rebuild is given: DuckDB's hash aggregates and joins need
# working memory they cannot spill (at 64 MiB a GROUP BY of 400,000 reference
# pairs failed; at 96 MiB and up it spilled and completed).
MIN_BUDGET = 256 * _MIB
# What a rebuild's process holds besides DuckDB's buffer pool: the interpreter
# and its libraries (about 200 MB), the Parquet reader's buffers, the thread
# graph's union-find (about 40 bytes a node) and the slices of rows handed to
# Python. Measured on 1,000,000 messages: RSS ran 350-400 MB above DuckDB's own
# count of its memory.
_PROCESS_SHARE = 480 * _MIB


def default_budget() -> int:
    """The memory a rebuild (replay, verify) may use when none is configured: a
    quarter of the machine's memory, at most 1 GiB (a background job's share;
    ``--memory`` or the config's ``[store] memory`` give it more), at least 256 MiB."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        total = 4 << 30
    return max(MIN_BUDGET, min(1 << 30, total // 4))


def duckdb_share(budget: int) -> int:
    """DuckDB's ``memory_limit`` within a process ``budget`` of bytes."""
    return max(32 * _MIB, budget - min(_PROCESS_SHARE, budget // 2))


def builders(budget: int) -> int | None:
    """How many tables a rebuild within ``budget`` builds at once (None: its
    default, one more than the cores). Each builder's hash tables and sorts need
    working memory DuckDB cannot spill: on 1,000,000 messages three builders ran
    out of 544 MiB where two did not (and took the same time on two cores)."""
    share = duckdb_share(budget)
    if share >= 1536 * _MIB:
        return None
    return 2 if share >= 512 * _MIB else 1


_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str) -> int:
    """Bytes of a size such as ``1GiB``, ``768M``, ``512mb`` or ``1073741824``
    (binary units); ValueError names what could not be read."""
    import re

    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*", text.lower())
    if not m:
        raise ValueError(f"not a size: {text!r} (say e.g. 1GiB, 768MiB)")
    size = int(float(m.group(1)) * _UNITS[m.group(2)])
    if size < MIN_BUDGET:
        raise ValueError(f"{text!r}: a rebuild needs at least {MIN_BUDGET >> 20}MiB")
    return size


class _Host:
    """This process's DuckDB instance and the files attached to it."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.con = duckdb.connect(":memory:", config=dict(CONFIG))
        self.lock = threading.Lock()
        # path -> [alias, read_only, holders]: one attachment per file, shared by
        # the holders that want the same mode (DuckDB attaches a file once)
        self.attached: dict[str, list[Any]] = {}
        self.alias_path: dict[str, str] = {}
        # what this instance was last set to, so that a hold repeats no SET or
        # lookup it needs not (a query is 0.2-0.4 ms, a hold made seven)
        self.temp: str | None = None
        self.threads: int | None = None


_host: _Host | None = None
# cursor handed out by ``connect`` -> (its instance, the alias it uses): ``release``
# finds both without asking DuckDB (a query) which database the cursor was on
# (weak: a cursor closed without ``release`` leaves nothing behind)
_cursors: weakref.WeakKeyDictionary[duckdb.DuckDBPyConnection, tuple[_Host, str]] = (
    weakref.WeakKeyDictionary()
)
# Files that could not share ``_host``: each has an instance of its own. DuckDB
# refuses to move an instance's spill directory once a query has used it, and a
# file's spill directory is beside it, so a process that spilled for one store
# (an import, then a verify) holds a second store (a script comparing two, the
# hostile campaign's IMAP slice after its import) in another instance.
_hosts: dict[str, _Host] = {}
_host_lock = threading.Lock()
_names = itertools.count()  # aliases, unique across the instances


def _the_host() -> _Host:
    global _host
    with _host_lock:
        if _host is None or _host.pid != os.getpid():  # a forked child starts its own
            _host = _Host()
            _hosts.clear()
        return _host


def start_instance(spill_for: Path | None = None) -> duckdb.DuckDBPyConnection:
    """Start this process's DuckDB instance now, before any file is held: a served
    store's spare worker pays the 20-60 ms while it waits for a command, not after
    the command came. ``spill_for``: a projection file the process is to read (not
    opened here): its spill directory and a reader's threads are set now, as
    ``connect`` would (queries off the command's path). Returns a cursor on the
    instance's own in-memory database (to warm it up; close it). (A process that
    forks must not call it: an instance does not survive a fork.)"""
    host = _the_host()
    if spill_for is not None:
        with host.lock:
            _spill_beside(host, os.path.abspath(spill_for) + ".tmp")
            if host.threads != int(READER_THREADS):
                host.con.execute(f"SET threads = {READER_THREADS}")
                host.threads = int(READER_THREADS)
    return host.con.cursor()


@contextlib.contextmanager
def fresh_instances() -> Iterator[None]:
    """Within: new DuckDB instances for this process, made with ``CONFIG`` as it is
    then (a test's small memory limit), closed at the end; the process's own come
    back after. The instances are process-wide on purpose: two instances holding
    one file in one process are not kept apart by DuckDB's file lock."""
    global _host
    with _host_lock:
        saved, saved_files = _host, dict(_hosts)
        _host = None
        _hosts.clear()
    try:
        yield
    finally:
        with _host_lock:
            for host in [_host, *_hosts.values()]:
                if host is not None:
                    host.con.close()
            _host = saved
            _hosts.clear()
            _hosts.update(saved_files)


def _host_for(key: str) -> _Host:
    """The instance that holds (or is to hold) the file ``key``."""
    default = _the_host()
    with _host_lock:
        return _hosts.get(key, default)


def _spill_beside(host: _Host, temp: str) -> bool:
    """Point ``host``'s spill directory at ``temp``; False when DuckDB refuses
    because the current one has been used."""
    if host.temp == temp:  # (set by this module, which alone sets it)
        return True
    now = host.con.execute("SELECT current_setting('temp_directory')").fetchall()[0][0]
    if now != temp:
        try:
            host.con.execute(f"SET temp_directory = {_quote(temp)}")
        except duckdb.Error as exc:
            if "temporary directory" not in str(exc):
                raise
            return False
    host.temp = temp
    return True


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def intent_path(path: Path | str) -> str:
    """The file a writer of ``path`` holds a ``flock`` on while it wants or holds it."""
    return os.path.abspath(path) + ".intent"


def _announce(key: str, deadline: float) -> int:
    """This process wants ``key`` for writing: ``LOCK_EX`` on its intent file (a
    writer before us holds it until it is done), the descriptor holding it."""
    fd = os.open(intent_path(key), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    delay = 0.002
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise LockTimeout(
                        f"{key}: another process is writing it (its intent held)"
                    ) from None
                time.sleep(delay)
                delay = min(delay * 2, 0.05)
    except BaseException:
        os.close(fd)
        raise


def writer_waiting(path: Path | str) -> bool:
    """True when a writer (another process, or another hold of this one) wants or
    holds ``path``: its intent file is locked."""
    try:
        fd = os.open(intent_path(path), os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False  # (no writer has ever held it)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # (and the probe's lock with it)
    return False


def wait_for_writer(path: Path | str, timeout: float = 30.0) -> bool:
    """Wait until no writer wants or holds ``path`` (at most ``timeout`` s: then
    False, and the caller's ATTACH waits as any would)."""
    deadline = time.monotonic() + timeout
    delay = 0.002
    while writer_waiting(path):
        if time.monotonic() > deadline:
            return False
        time.sleep(delay)
        delay = min(delay * 2, 0.05)
    return True


def connect(path: Path, *, read_only: bool, timeout: float = 30.0) -> duckdb.DuckDBPyConnection:
    """Hold the projection database (release it with ``release``), waiting up to
    ``timeout`` s for another process. A writer announces itself first
    (``<file>.intent``), so that readers keeping the file let go."""
    key = os.path.abspath(path)
    host = _host_for(key)
    deadline = time.monotonic() + timeout
    delay = 0.01
    intent: int | None = None
    if not read_only:
        with host.lock:
            held = host.attached.get(key)
        if held is None:  # (held here already: for writing, announced; for reading, refused)
            intent = _announce(key, deadline)
    try:
        return _attach(host, key, path, read_only, deadline, delay, intent)
    except BaseException:
        with host.lock:
            kept = any(h[3] == intent for h in host.attached.values())
        if intent is not None and not kept:
            os.close(intent)
        raise


def _attach(
    host: _Host,
    key: str,
    path: Path,
    read_only: bool,
    deadline: float,
    delay: float,
    intent: int | None,
) -> duckdb.DuckDBPyConnection:
    timeout = deadline - time.monotonic()
    while True:
        try:
            with host.lock:
                held = host.attached.get(key)
                if held is not None:
                    if held[1] != read_only:
                        raise duckdb.ConnectionException(
                            f"{path}: already held in this process for"
                            f" {'reading' if held[1] else 'writing'}"
                        )
                    held[2] += 1
                    alias = held[0]
                else:
                    alias = f"projections_{next(_names)}"
                    # spill files beside the database, as a connection to it had them
                    # (DuckDB refuses any SET, even of the same directory, once a
                    # query has spilled: a second hold of the file would fail)
                    temp = key + ".tmp"
                    if not _spill_beside(host, temp):
                        own = _Host()  # (nobody else knows it yet: no lock needed)
                        if not _spill_beside(own, temp):
                            raise duckdb.IOException(f"{temp}: cannot spill there")
                        with _host_lock:
                            _hosts[key] = own
                        host = own
                    host.con.execute(
                        f"ATTACH {_quote(key)} AS {alias}" + (" (READ_ONLY)" if read_only else "")
                    )
                    host.attached[key] = [alias, read_only, 1, intent]
                    host.alias_path[alias] = key
            break
        except duckdb.IOException as exc:
            if "lock" not in str(exc).lower() or time.monotonic() > deadline:
                if "lock" in str(exc).lower():
                    raise LockTimeout(
                        f"{path}: held by another process for {max(timeout, 0):.0f}s"
                    ) from exc
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.25)
    con = host.con.cursor()
    con.execute(f"USE {alias}")
    threads = int(READER_THREADS if read_only else CONFIG["threads"])
    with host.lock:
        if host.threads != threads:  # (a global setting of the instance)
            con.execute(f"SET threads = {threads}")
            host.threads = threads
        _cursors[con] = (host, alias)
    return con


def release(con: duckdb.DuckDBPyConnection) -> None:
    """Let go of a connection from ``connect``; the file is detached (closed, its
    lock released) when its last holder lets go."""
    mine = _cursors.pop(con, None)
    con.close()
    if mine is None:
        return  # (not from ``connect``, or released already)
    host, alias = mine
    with host.lock:
        key = host.alias_path.get(alias)
        if key is None:
            return
        held = host.attached[key]
        held[2] -= 1
        if held[2] == 0:
            del host.attached[key]
            del host.alias_path[alias]
            try:
                host.con.execute(f"DETACH {alias}")
            finally:
                if held[3] is not None:
                    os.close(held[3])  # (the intent: readers may hold the file again)


@contextlib.contextmanager
def all_threads(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """Run with CONFIG's threads (an ad-hoc query may scan everything; or this
    process's ``set_query_threads``). On a connection from ``connect`` the
    instance keeps them after (the next hold of a file for reading sets a
    reader's again; its setting is known, no query asks it): setting them and
    back cost a search 1-5 ms of the 2-core machine, and a process that reads one
    command after another (``serve``'s warm worker) paid it at each. Any other
    connection has its own setting restored."""
    want = _query_threads[0] or int(CONFIG["threads"])
    mine = _cursors.get(con)
    if mine is not None:
        host = mine[0]
        with host.lock:
            if host.threads != want:
                con.execute(f"SET threads = {want}")
                host.threads = want
        yield
        return
    before = int(con.execute("SELECT current_setting('threads')").fetchall()[0][0])
    if before == want:
        yield
        return
    con.execute(f"SET threads = {want}")
    try:
        yield
    finally:
        con.execute(f"SET threads = {before}")


@contextlib.contextmanager
def interruptible(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """A Ctrl-C (SIGINT) during the block interrupts ``con``'s query.

    DuckDB's Python client sees a SIGINT only at some points of a query: a long
    ad-hoc query ran on through every Ctrl-C about half the time (6 runs: 3).
    Python's own C handler writes the signal's number to the wakeup file at once,
    whatever the main thread is blocked in; a thread reading it calls
    ``con.interrupt()``, and the query ends with DuckDB's interrupt error. Only from
    the main thread, and only when nothing else uses the wakeup file (an asyncio
    loop does)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    read, write = os.pipe()
    os.set_blocking(write, False)
    try:
        before = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    except ValueError:  # (not the main interpreter's main thread)
        before = -2
    if before != -1:  # (someone else's: left to them)
        if before >= 0:
            signal.set_wakeup_fd(before)
        os.close(read)
        os.close(write)
        yield
        return
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            try:
                got = os.read(read, 64)
            except OSError:
                return
            if not got:
                return
            if signal.SIGINT in got and not done.is_set():
                con.interrupt()

    watcher = threading.Thread(target=watch, name="mailledger-interrupt", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        signal.set_wakeup_fd(-1)
        done.set()
        with contextlib.suppress(OSError):
            os.write(write, b"\0")
        watcher.join(timeout=1.0)
        os.close(read)
        os.close(write)


def set_query_threads(threads: int | None) -> None:
    """The threads ``all_threads`` gives a search or an ad-hoc query in this process
    (None: CONFIG's). ``serve --listen``'s web children, one per core answering side
    by side, run them on one: a second thread per child only contended for the
    other's core (and starting and stopping it cost 0.8 ms a search)."""
    _query_threads[0] = threads


_query_threads: list[int | None] = [None]  # (``set_query_threads``)

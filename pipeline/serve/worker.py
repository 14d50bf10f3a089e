"""One forwarded command, in a child the server forked for it: the client's stdin,
stdout and stderr in place of its own, the client's environment, directory and
umask, then the same ``pipeline.cli.main`` as the command line runs in-process.

A process per command (forked from a server that imported the heavy libraries
but opened nothing) keeps commands apart as the command line always has: each
its own ``sys.stdout``, its own DuckDB connection, its own run id and logging,
and a Ctrl-C (SIGINT to the child) interrupts exactly one command.

The server forks the child *before* the command comes (a spare, :func:`spare`):
it starts its DuckDB instance (set for the store's projection file, its first
query run on an in-memory database) while it waits, 20-60 ms a command would
otherwise spend first, and holds no file of the store meanwhile. The parser, and
the first use of the parsers of the command line and the search language, it
inherits from the server (:func:`prepare`).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import signal
import socket
import sys
import time
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from pipeline.serve import protocol

if TYPE_CHECKING:
    from pipeline.cli.parsing import Parser
    from pipeline.serve.warm import WarmStore

__all__ = [
    "FALLBACK",
    "exit_status",
    "flush_stdio",
    "preload",
    "prepare",
    "run_forwarded",
    "spare",
]

FALLBACK = 254
"""The child's exit status for "not this server's command" (another store): the
client runs it in-process. No command exits with it (its codes are 0-3 and 130)."""


_parser: list[Parser] = []
"""The command line's parser, built once in the server before it forks (plain Python
objects, safe to fork): each worker parses its commands with its own copy."""


_SAMPLE = (
    'from:a@b.example subject:"x y" date:2024-01-01..2024-06-30 to:c* body:z and not list:l.example'
)
"""A query of the prefixes and forms users type most (``prepare`` compiles it)."""


def prepare() -> None:
    """In the server, before any fork: what every worker would otherwise do first,
    done once and inherited: the parser built, and the regular expressions and
    first-use paths of a command taken (a command line parsed, a query compiled, a
    text made safe for a terminal: 3-5 ms a command), on nothing of the store."""
    from datetime import UTC, datetime

    from pipeline.cli.entry import build_parser
    from pipeline.cli.parsing import query_words_last
    from pipeline.terminal import terminal_text
    from projections.queries import compile_query
    from projections.search import parse

    scratch = build_parser({})  # (parsed with here; the workers get one never used)
    for words in (["search", "--output", "count", "x"], ["show", "<x@y>"]):
        scratch.parse_args(query_words_last(words, scratch, scratch.query_commands))
    compile_query(parse(_SAMPLE, now=datetime.now(UTC), tz=UTC))
    terminal_text("x\tx", newlines=True, tabs=True)
    terminal_text("x")
    _parser[:] = [build_parser({})]


# what the reading commands import, found by running them (the rest comes on demand:
# a module a worker imports late, every worker imports again; the modules new in
# sys.modules after each read command, forked as here, were none but
# projections.fulltext.index, 3-4 ms of every text search's worker, now here)
_PRELOAD = (
    "apsw",
    "duckdb",
    "email.policy",
    "pyarrow.compute",
    "pyarrow.dataset",
    "pyarrow.parquet",
    "zoneinfo",
    "zstandard",
    "pipeline.cli.entry",
    "pipeline.config",
    "pipeline.keeping",
    "pipeline.render",
    "pipeline.serve.warm",
    "pipeline.store",
    "projections.fold",
    "projections.fulltext",
    "projections.fulltext.index",
    "projections.projector",
    "projections.queries",
    "projections.queries.fulltext",
    "projections.queries.search",
    "projections.queries.search_sql",
    "projections.search.language",
    "projections.search.printing",
    "projections.fulltext.workers",
    "stores.blobs",
    "stores.db",
    "stores.log",
)


def preload() -> None:
    """Import what commands spend their start on, once, before any fork."""
    import importlib

    for name in _PRELOAD:
        importlib.import_module(name)
    prepare()


def _warm_instance(store: Path) -> None:
    """In the spare: this process's DuckDB instance started, its spill directory and
    reader threads set for ``store``'s projection file, and its first query run
    (the hash probe every reader checks, cached) on its own in-memory database:
    nothing of the store is opened."""
    from projections.fold.meta import hash_probe
    from stores.db import start_instance

    con = start_instance(spill_for=store / "projections.duckdb")
    try:
        hash_probe(con)
        con.sql("SELECT i, i::VARCHAR AS s FROM range(9) t(i) ORDER BY i LIMIT 5").to_arrow_table()
    finally:
        con.close()


def spare(channel: socket.socket, store: Path, keep_warm: float = 0.0) -> NoReturn:
    """A spare worker: warm up, then run the commands the server sends on
    ``channel``: one, or one read after another with the store kept up to
    ``keep_warm`` s between them (``pipeline.serve.warm``); exit quietly when the
    server closes it instead."""
    os.setsid()  # (a Ctrl-C on the server's terminal is the server's: it lets commands end)
    signal.set_wakeup_fd(-1)  # (the server's event loop's, not ours)
    signal.signal(signal.SIGINT, _early_interrupt)  # (a command cancelled before it began)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    keep = channel.fileno()
    os.closerange(3, keep)  # nothing of the server's: its listener, other clients'
    os.closerange(keep + 1, os.sysconf("SC_OPEN_MAX"))
    from pipeline.serve.warm import WarmStore

    warm = WarmStore(store, keep_warm) if keep_warm > 0 else None
    try:
        _warm_instance(store)
        if not _parser:
            prepare()
        while True:
            request, fds = protocol.recv_msg(channel, max_fds=4)
            signal.signal(signal.SIGINT, _early_interrupt)
            code = run_forwarded(request, fds, store, channel, warm)
            if code is not None:
                os._exit(code)
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # (a late cancel of the last)
            _interrupted.clear()
            if warm is None or not warm.wait(channel):
                os._exit(0)
    except protocol.ProtocolError:  # (the server closed the channel: no command)
        os._exit(0)
    except BaseException:  # (on the server's stderr: a bug)
        traceback.print_exc()
        os._exit(1)


_interrupted: list[bool] = []


def _early_interrupt(*_: object) -> None:
    _interrupted.append(True)


def run_forwarded(
    request: Mapping[str, Any],
    fds: Sequence[int],
    store: Path,
    channel: socket.socket,
    warm: WarmStore | None = None,
) -> int | None:
    """Run ``request`` (a ``run`` message) in this forked child and answer its client
    (``fds``: its stdin, stdout, stderr and connection); the exit code this process
    is to end with, or None when it stays for another command (``warm``)."""
    code = 1
    clean = False
    try:
        _adopt(request, fds)
        if _interrupted:  # (cancelled while this worker warmed up)
            raise KeyboardInterrupt
        code = _run(request, store, warm)
        clean = code != FALLBACK
    except KeyboardInterrupt:
        from pipeline.cli.exits import EXIT_INTERRUPTED
        from pipeline.cli.output import echo

        echo("mailledger: interrupted", file=sys.stderr)
        code = EXIT_INTERRUPTED
    except SystemExit as exc:  # (argparse's --help and --version end so)
        code = exit_status(exc)
    except BaseException:  # a bug: its traceback on the client's stderr, as in-process
        with contextlib.suppress(BaseException):
            traceback.print_exc()
    finally:
        flush_stdio()
    again = clean and warm is not None and not _interrupted and warm.again(code)
    answer(code, channel, fds[3] if len(fds) > 3 else None, again=again)
    return None if again else code


def exit_status(exc: SystemExit) -> int:
    """The exit status a ``SystemExit`` asks for, as the interpreter would take it."""
    return exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1


def flush_stdio() -> None:
    """``sys.stdout`` and ``sys.stderr`` flushed, whatever fails."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BaseException):
            stream.flush()


def answer(code: int, channel: socket.socket, client: int | None, *, again: bool = False) -> None:
    """Tell the server, then the client (``client``: its connection), how the command
    ended, before this process exits: the client ends as soon as it reads this, not
    after DuckDB's threads and this process's pages are torn down (and without the
    server in between). The client's stdin, stdout and stderr are let go first, so
    that whoever reads the command's output sees its end with the answer. ``again``:
    this worker stays for another command (the server is told so)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # (a Ctrl-C now is too late to matter)
    reply: dict[str, Any] = {"fallback": "another store"} if code == FALLBACK else {"exit": code}
    with contextlib.suppress(OSError):
        nowhere = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(nowhere, fd)
        os.close(nowhere)
    flush_stdio()  # (what a failed write left: nowhere, not to the next command's client)
    with contextlib.suppress(OSError):
        protocol.send_msg(channel, {**reply, "again": True} if again else reply)
    if client is not None:
        with contextlib.suppress(OSError):
            conn = socket.socket(fileno=client)
            conn.settimeout(5.0)
            protocol.send_msg(conn, reply)


def _adopt(request: Mapping[str, Any], fds: Sequence[int]) -> None:
    """Become the client's process as far as a command can tell."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # (as Python sets it)
    for target, fd in enumerate(fds[:3]):
        os.dup2(fd, target)
        os.close(fd)
    for fd in fds[3:]:  # the client's connection, which ``answer`` writes to: not
        os.set_inheritable(fd, False)  # for what the command starts
    os.environ.clear()
    os.environ.update(request["env"])
    time.tzset()
    os.chdir(request["cwd"])
    os.umask(int(request["umask"]))
    stdio = request.get("stdio") or {}
    sys.stdin = _stream(0, "r", stdio.get("stdin"))
    sys.stdout = _stream(1, "w", stdio.get("stdout"))
    sys.stderr = _stream(2, "w", stdio.get("stderr"))


def _stream(fd: int, mode: str, how: Mapping[str, Any] | None) -> Any:
    """A text stream over ``fd`` made as the client's Python made its own
    (encoding, errors, line buffering: the client sends them)."""
    how = how or {}
    return io.TextIOWrapper(
        open(fd, mode + "b", buffering=-1, closefd=False),
        encoding=how.get("encoding") or "utf-8",
        errors=how.get("errors") or "strict",
        line_buffering=bool(how.get("line_buffering")),
        write_through=mode == "w" and fd == 2,
    )


class _OtherStore(Exception):
    """The forwarded command opens another store than the server's."""


def _run(request: Mapping[str, Any], store: Path, warm: WarmStore | None) -> int:
    from pipeline.cli.entry import main

    def mine(args: argparse.Namespace) -> None:
        if os.path.realpath(_store_of(args)) != str(store):
            raise _OtherStore
        if warm is not None:
            warm.command(args.command, args.cluster)

    if warm is not None:
        warm.reused = False  # (until ``mine`` names the command)
    try:
        return main(list(request["argv"]), os.environ, before=mine, parser=_parser[0], kept=warm)
    except _OtherStore:
        return FALLBACK


def _store_of(args: argparse.Namespace) -> Path:
    """The store the command opens (settled on a copy: sync and dispatch settle
    their own from the whole config file)."""
    from pipeline.cli.common import resolve_store

    if args.opens_store:
        return Path(args.store)
    copy = argparse.Namespace(**vars(args))
    resolve_store(copy)
    return Path(copy.store)

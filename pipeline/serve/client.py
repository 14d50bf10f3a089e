"""The thin client: the ``mailledger`` command hands itself to the store's server
when one runs, else runs in-process as always.

This module is the console script's entry point and runs before anything heavy
is imported: the standard library and ``pipeline.serve.protocol`` only, so that
a command the server answers costs a Python start and a round trip, not
DuckDB's and pyarrow's imports (a test holds it to that). What the command
prints, the server's worker writes straight to this process's stdout and
stderr, passed along the socket; this process waits for the exit code, and on
Ctrl-C asks the server to cancel the command.
"""

from __future__ import annotations

import _socket
import os
import sys

from pipeline.serve import protocol

TYPE_CHECKING = False  # (``typing``: for mypy only, as in ``protocol``)
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import NoReturn

__all__ = ["FORWARDED", "Connection", "connect", "forward", "main"]

FORWARDED = frozenset(
    {
        # reads
        "search",
        "find",
        "show",
        "thread",
        "query",
        "stats",
        "cursor",
        "export",
        "verify",
        # writes: the store's one writer carries them out (a cron `sync` keeps working)
        "sync",
        "import",
        "delete",
        "compact",
        "dispatch",
    }
)
"""The commands a running server carries out for the client. ``replay`` is not one:
it cannot run beside readers, and is refused while a server holds the store."""

_VALUED = ("--store", "--config", "--memory")  # the global options that take a value
_EXIT_INTERRUPTED = 130
_EXIT_ERROR = 1


def main() -> int:
    """The ``mailledger`` console script: the server's answer, else the in-process one."""
    argv = sys.argv[1:]
    code = forward(argv, os.environ)
    if code is not None:
        _leave(code)
    from pipeline.cli.entry import main as run_here

    try:
        return run_here(argv)
    except KeyboardInterrupt:  # (a Ctrl-C DuckDB took for its query, raised again on the
        return _EXIT_INTERRUPTED  # way out: the command has said "interrupted" already)


def _leave(code: int) -> NoReturn:
    """End this process now: the command ran in the server's worker, which wrote its
    output to this process's descriptors itself; nothing here is left to write or to
    tear down (the interpreter's finalization: 2-4 ms a served command)."""
    for stream in (sys.stdout, sys.stderr):
        try:  # noqa: SIM105 (contextlib is not the thin client's)
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def _scan(argv: Sequence[str]) -> tuple[str | None, dict[str, str], bool]:
    """The command's name, the global options with a value, and whether ``--no-serve``
    was given: a scan of ``argv`` without the parser (the server parses it whole)."""
    command: str | None = None
    values: dict[str, str] = {}
    no_serve = False
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            break
        name, eq, value = arg.partition("=")
        if name in _VALUED:
            if not eq:
                i += 1
                value = argv[i] if i < len(argv) else ""
            values[name] = value
        elif arg == "--no-serve":
            no_serve = True
        elif arg in ("-h", "--help", "--version"):
            return None, values, True  # (answered here, no store involved)
        elif command is None and not arg.startswith("-"):
            command = arg
        i += 1
    return command, values, no_serve


def _store(values: Mapping[str, str], env: Mapping[str, str]) -> str:
    """The store the command would open: ``--store``, ``$MAILLEDGER_STORE``, the
    default store when there is no config file, else the CLI's own resolution (the
    config file's ``[store] path``), loaded only then."""
    if values.get("--store"):
        return values["--store"]
    if env.get("MAILLEDGER_STORE"):
        return env["MAILLEDGER_STORE"]
    if not values.get("--config") and not os.path.isfile(_default_config(env)):
        # (no config file: the default store, without the 20-40 ms of the CLI's imports)
        home = os.path.expanduser(env.get("HOME", "~"))
        data = env.get("XDG_DATA_HOME") or os.path.join(home, ".local/share")
        return os.path.join(data, "mailledger")
    import argparse
    from pathlib import Path

    from pipeline.cli.common import resolve_store

    config = values.get("--config")
    args = argparse.Namespace(store=None, config=Path(config) if config else None, env=env)
    resolve_store(args)
    return str(args.store)


def _default_config(env: Mapping[str, str]) -> str:
    """``pipeline.config.default_config_path`` without its imports."""
    if env.get("XDG_CONFIG_HOME"):
        return os.path.join(env["XDG_CONFIG_HOME"], "mailledger", "config.toml")
    home = env.get("HOME") or os.path.expanduser("~")
    return os.path.join(home, ".config", "mailledger", "config.toml")


class Connection(_socket.socket):
    """A connection to a server: ``_socket``'s socket (``socket``'s own is not
    imported on the thin path), closed at the end of a ``with`` as that one is."""

    __slots__ = ()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(point: protocol.Endpoint, version: str | None = None) -> Connection | None:
    """A connection to ``point``'s server, past the handshake (``version``: claim
    another, for a test), else None: no server, a stale socket (removed), or a
    server that will not talk to this client."""
    sock = Connection(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.connect(point.socket)
    except (FileNotFoundError, ConnectionRefusedError):
        sock.close()
        protocol.served_by(point)  # (a dead server's socket is removed, under the lock)
        return None
    except OSError:
        sock.close()
        return None
    try:
        protocol.send_msg(sock, protocol.hello(version))
        reply, _ = protocol.recv_msg(sock)
    except (OSError, protocol.ProtocolError):
        sock.close()
        return None
    if not reply.get("ok"):
        sock.close()
        return None
    return sock


def forward(argv: Sequence[str], env: Mapping[str, str]) -> int | None:
    """Run ``argv`` on the store's server: its exit code, or None when it is to run
    in this process (no server, ``--no-serve``, a command no server runs)."""
    command, values, no_serve = _scan(argv)
    if no_serve or command not in FORWARDED:
        return None
    try:
        point = protocol.endpoint(_store(values, env), env)
    except Exception:  # (a config the CLI will report properly, an unusable runtime dir)
        return None
    if not os.path.exists(point.socket):
        return None
    sock = connect(point)
    if sock is None:
        return None
    with sock:
        return _run(sock, argv, env)


def _how(stream: object) -> dict[str, object]:
    """How this Python made ``stream`` (the worker makes its own the same way)."""
    return {
        "encoding": getattr(stream, "encoding", None),
        "errors": getattr(stream, "errors", None),
        "line_buffering": getattr(stream, "line_buffering", False),
    }


def _run(sock: _socket.socket, argv: Sequence[str], env: Mapping[str, str]) -> int | None:
    umask = os.umask(0o077)
    os.umask(umask)
    request = {
        "op": "run",
        "argv": list(argv),
        "cwd": os.getcwd(),
        "env": dict(env),
        "umask": umask,
        "stdio": {name: _how(getattr(sys, name)) for name in ("stdin", "stdout", "stderr")},
    }
    try:
        protocol.send_msg(sock, request, fds=[0, 1, 2])
    except OSError:
        return None  # (nothing ran: run it here)
    cancelled = False
    while True:
        try:
            reply, _ = protocol.recv_msg(sock)
        except KeyboardInterrupt:
            if cancelled:  # a second Ctrl-C: stop waiting
                return _EXIT_INTERRUPTED
            cancelled = True
            try:
                protocol.send_msg(sock, {"op": "cancel"})
            except OSError:
                return _EXIT_INTERRUPTED
            continue
        except (OSError, protocol.ProtocolError) as exc:
            from pipeline.cli.output import echo

            echo(
                f"mailledger: error: the server went away during the command ({exc})",
                file=sys.stderr,
            )
            return _EXIT_ERROR
        if "fallback" in reply:
            return None
        code = int(reply.get("exit", _EXIT_ERROR))
        if reply.get("killed"):  # cancelled, and its worker did not end on SIGINT
            from pipeline.cli.output import echo

            echo("mailledger: interrupted", file=sys.stderr)
            return _EXIT_INTERRUPTED
        if code < 0:  # (the worker died of a signal)
            import signal

            signame = signal.Signals(-code).name if -code in signal.valid_signals() else -code
            from pipeline.cli.output import echo

            echo(f"mailledger: error: the server's worker died of {signame}", file=sys.stderr)
            return 128 - code
        return code

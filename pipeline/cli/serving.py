"""``mailledger serve [status|stop]``: a long-running process that owns a store and
answers the command line over a local socket (``pipeline.serve``), and the
refusal of a ``replay`` while one does."""

from __future__ import annotations

import argparse
import logging
import math
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.cli import output
from pipeline.cli.exits import EXIT_ERROR, EXIT_OK
from pipeline.cli.parsing import add_command
from pipeline.cli.syncing import interval
from pipeline.cli.web import add_access_options
from pipeline.serve import protocol
from stores.errors import MailledgerError, UsageError

if TYPE_CHECKING:
    from pipeline.serve.sync_child import SyncChild
    from pipeline.web.running import Listen

__all__ = ["StoreServed", "add_serve", "refuse_when_served"]

_STOP_WAIT = 120.0  # seconds `serve stop` waits for the commands under way to end


class StoreServed(MailledgerError):
    """The command cannot run beside the store's server (a full replay)."""


def refuse_when_served(args: argparse.Namespace) -> None:
    """Raise ``StoreServed`` when a server holds ``args.store``: a replay rebuilds
    the projections the server's readers have open."""
    try:
        point = protocol.endpoint(args.store, args.env)
    except OSError:
        return  # (no usable runtime directory: no server can be listening there)
    pid = protocol.served_by(point)
    if pid is not None:
        raise StoreServed(
            f"store is served by pid {pid}: `mailledger serve stop` first, then {args.command}"
        )


def cmd_serve(args: argparse.Namespace) -> int:
    point = protocol.endpoint(args.store, args.env)
    if args.action == "status":
        return _status(args, point)
    if args.action == "stop":
        return _stop(point)
    return _serve(args, point)


def _serve(args: argparse.Namespace, point: protocol.Endpoint) -> int:
    from pipeline.serve.server import Server, log_path
    from stores.marker import check_marker

    check_marker(Path(args.store), create=False)  # (a store, or NotFoundError: exit 1)
    listen, sync = _children_asked(args)
    log_file = log_path(args.env, point)
    log_file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    handler = logging.FileHandler(log_file)
    handler.setFormatter(logging.Formatter("%(asctime)s %(process)d %(message)s"))
    serve_log = logging.getLogger("mailledger-serve")
    serve_log.addHandler(handler)
    serve_log.setLevel(logging.INFO)
    serve_log.propagate = False

    def ready(server: Server) -> None:
        web = f", http://{listen.address}/" if listen is not None else ""
        output.echo(
            f"mailledger: serving {server.point.store} on {server.point.socket}{web}"
            f" (pid {server.describe()['pid']}, log {server.log_file})",
            file=sys.stderr,
            flush=True,
        )

    try:
        server = Server(
            point,
            log_file,
            idle_exit=args.idle_exit,
            keep_warm=args.keep_warm,
            listen=listen,
            http_children=_http_children(args),
            sync=sync,
        )
        server.run(ready)
    finally:
        serve_log.removeHandler(handler)
        handler.close()
    return EXIT_OK


def _interval_or_0(text: str) -> float:
    """``interval``'s, or 0."""
    return 0.0 if text.strip() in ("0", "0s") else interval(text)


def _http_children(args: argparse.Namespace) -> int:
    """``--http-children`` (default: one per core, at most 4)."""
    if args.http_children is None:
        from pipeline.serve.http_child import default_http_children

        return default_http_children()
    if args.listen is None:
        raise UsageError("--http-children goes with --listen HOST:PORT")
    if not 1 <= args.http_children <= 64:
        raise UsageError(f"--http-children: 1 to 64, not {args.http_children}")
    return int(args.http_children)


def _children_asked(args: argparse.Namespace) -> tuple[Listen | None, SyncChild | None]:
    """``--listen`` (checked as ``mailledger web`` checks it) and ``--sync`` (its
    config file read now: a mistake in it is exit 2 here, not a child that fails
    again and again)."""
    listen = None
    if args.listen is not None:
        from pipeline.web.running import listen_settings

        listen = listen_settings(args.listen, args.token_file, args.allow_host)
    elif args.token_file or args.allow_host:
        raise UsageError("--token-file and --allow-host go with --listen HOST:PORT")
    sync = None
    if args.sync:
        from pipeline.config import default_config_path, load_config
        from pipeline.serve.sync_child import SyncChild, sync_argv

        load_config(args.config or default_config_path(args.env), args.env)
        argv = sync_argv(Path(args.store), args.config, args.interval)
        sync = SyncChild(argv, args.env, args.interval)
    return listen, sync


def _ask(point: protocol.Endpoint, request: dict[str, Any]) -> dict[str, Any] | None:
    """The server's answer to ``request``, or None when no server answers."""
    from pipeline.serve.client import connect

    sock = connect(point)
    if sock is None:
        return None
    try:
        protocol.send_msg(sock, request)
        reply, _ = protocol.recv_msg(sock)
    except (OSError, protocol.ProtocolError):
        return None
    finally:
        sock.close()
    return reply


def _status(args: argparse.Namespace, point: protocol.Endpoint) -> int:
    info = _ask(point, {"op": "status"})
    if info is None:
        output.echo(f"mailledger: no server for {point.store}", file=sys.stderr)
        return EXIT_ERROR
    if args.json:
        output.print_json(info)
        return EXIT_OK
    for key in ("pid", "version", "store", "socket", "log"):
        output.echo(f"{key}: {info.get(key)}")
    output.echo(f"uptime: {_duration(float(info.get('uptime', 0)))}")
    spare = info.get("spare") or {}
    if spare.get("pid") is not None:
        keeps = "keeps the store open" if spare.get("warm") else "holds nothing of the store"
        output.echo(
            f"worker: pid {spare['pid']} waits for the next command, {keeps}"
            f" (--keep-warm {_duration(float(info.get('keep_warm', 0)))})"
        )
    if "listen" in info:
        output.echo(f"listen: http://{info['listen']}/ ({_web_children(info['http'])})")
    if "sync" in info:
        sync = info["sync"]
        ran = "never yet"
        if sync.get("last_run") is not None:
            ran = f"{_ago(float(sync['last_run']))} ago, exit {sync.get('last_run_exit')}"
        output.echo(
            f"sync: every {_duration(float(sync['interval']))} and on change ({_child(sync)});"
            f" last run: {ran}"
        )
    return EXIT_OK


def _child(info: dict[str, Any]) -> str:
    """A child of the server as status shows it: its pid, or why none runs."""
    if info.get("pid") is not None:
        return f"pid {info['pid']}"
    again = info.get("next_start")
    when = ""
    if again is not None:
        when = f", starting again in {_duration(math.ceil(max(0.0, float(again) - time.time())))}"
    return f"not running: last exit {info.get('last_exit')}{when}"


def _web_children(info: dict[str, Any]) -> str:
    """The web children as status shows them: their pids, and those not running."""
    pids = info.get("pids") or []
    said = f"pid{'s' if len(pids) > 1 else ''} {', '.join(str(p) for p in pids)}"
    missing = int(info.get("children", 1)) - len(pids)
    if not missing:
        return said
    down = _child({**info, "pid": None})
    return f"{said}; {missing} {down}" if pids else down


def _ago(when: float) -> str:
    return _duration(max(0.0, time.time() - when))


def _stop(point: protocol.Endpoint) -> int:
    reply = _ask(point, {"op": "stop"})
    if reply is None:
        output.echo(f"mailledger: no server for {point.store}", file=sys.stderr)
        return EXIT_OK
    deadline = time.monotonic() + _STOP_WAIT
    while protocol.served_by(point) is not None:  # (its lock is released when it exits)
        if time.monotonic() > deadline:
            output.echo(f"mailledger: pid {reply.get('pid')} is still stopping", file=sys.stderr)
            return EXIT_ERROR
        time.sleep(0.05)
    output.echo(f"mailledger: stopped the server of {point.store} (pid {reply.get('pid')})")
    return EXIT_OK


def _duration(seconds: float) -> str:
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


def add_serve(subs: Any) -> None:
    p = add_command(
        subs,
        "serve",
        cmd_serve,
        "own a store in a long-running process that answers the command line (status,"
        " stop: ask the running one)",
        "mailledger serve --idle-exit 30m &  mailledger search 'from:ada'  (answered by it)",
    )
    p.add_argument(
        "action",
        nargs="?",
        choices=("status", "stop"),
        help="status: pid, version, store, socket, log, uptime; stop: ask it to stop and wait",
    )
    p.add_argument(
        "--idle-exit",
        type=interval,
        metavar="DURATION",
        help="stop after no command and no HTTP request for DURATION (30s, 5m, 1h;"
        " default: never); the --sync schedule does not keep it running",
    )
    p.add_argument(
        "--keep-warm",
        type=_interval_or_0,
        default=30.0,
        metavar="DURATION",
        help="a worker back from a read (search, find, show, thread, stats, cursor)"
        " keeps the store open for the next one this long (default 30s; 0: every"
        " command in a new worker); a writer is let in at once meanwhile. --listen: a"
        " web child idle this long after requests is replaced by a fresh one (the"
        " memory a load left)",
    )
    p.add_argument("--json", action="store_true", help="status as JSON")
    p.add_argument(
        "--listen",
        metavar="HOST:PORT",
        help="serve the archive in a browser and the JSON API there too (as `mailledger"
        " web` does, in a child of the server); any but loopback needs --token-file",
    )
    p.add_argument(
        "--http-children",
        type=int,
        metavar="N",
        help="--listen: N processes answer HTTP on the address, side by side (default:"
        " one per core, at most 4)",
    )
    add_access_options(p, of="--listen: ")
    p.add_argument(
        "--sync",
        action="store_true",
        help="run the configured sync too, as the store's one writer (sync --apply --watch"
        " in a child of the server; the accounts' password_env must be set for serve)",
    )
    p.add_argument(
        "--interval",
        type=interval,
        default=300.0,
        metavar="DURATION",
        help="--sync: at most this long between two runs (default 5m; IMAP IDLE wakes it sooner)",
    )

"""``mailledger web``: the archive in a browser and its JSON API (``pipeline.web``),
served by uvicorn until SIGINT or SIGTERM (both end it, exit 0). Loopback only
unless ``--token-file`` gives the token every request must carry."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

from pipeline.cli.exits import EXIT_OK
from pipeline.cli.parsing import add_command
from stores.errors import UsageError

__all__ = ["add_web", "parse_listen"]

log = logging.getLogger("mailledger.cli")


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) as (host, port); UsageError if not one."""
    host, colon, port = text.rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"--listen: HOST:PORT, such as 127.0.0.1:8025, not {text!r}")
    return host.strip("[]"), int(port)


def cmd_web(args: argparse.Namespace) -> int:
    from pipeline.web.security import allowed_hosts_for, is_loopback, read_token_file

    host, port = parse_listen(args.listen)
    token = read_token_file(Path(args.token_file)) if args.token_file else None
    if token is None and not is_loopback(host):
        raise UsageError(
            f"--listen {args.listen}: not a loopback address, so every request must carry a"
            " token: --token-file FILE (one line, mode 0600)"
        )
    import uvicorn

    from pipeline.web import create_app

    hosts = [*allowed_hosts_for(host, port), *(name.lower() for name in args.allow_host)]
    app = create_app(args.store, token=token, allowed_hosts=hosts)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", server_header=False)
    _serve(uvicorn.Server(config))
    return EXIT_OK


def _serve(server: Any) -> None:
    """Run the uvicorn ``server`` until SIGINT or SIGTERM. uvicorn takes both while it
    runs (it stops taking connections, finishes the requests under way, the app's
    lifespan releases the store), then raises the signal again for the handler that
    was there before it: that handler is a no-op here, so a stop asked for is a
    clean end, exit 0 (not a death by SIGTERM, nor an "interrupted" exit)."""
    import signal

    asked = (signal.SIGINT, signal.SIGTERM)
    before = {sig: signal.signal(sig, lambda *_: None) for sig in asked}
    try:
        server.run()
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def add_web(subs: Any) -> None:
    p = add_command(
        subs,
        "web",
        cmd_web,
        "serve the store read-only in a browser and as a JSON API (/api/v1/...): loopback"
        " only unless --token-file; stops on Ctrl-C or SIGTERM",
        "mailledger web --listen 127.0.0.1:8025",
    )
    p.add_argument(
        "--listen",
        default="127.0.0.1:8025",
        metavar="HOST:PORT",
        help="the address to serve on (default 127.0.0.1:8025); any but loopback needs"
        " --token-file",
    )
    p.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME[:PORT]",
        help="a Host header to answer besides the listen address and the loopback names"
        " (the machine's name or LAN address when listening on 0.0.0.0); repeatable",
    )
    p.add_argument(  # type: ignore[attr-defined]
        "--token-file",
        metavar="FILE",
        help="a file (mode 0600) holding the token every request carries: Authorization:"
        " Bearer TOKEN, or the cookie /login?token=TOKEN sets",
    ).complete_kind = "FILE"

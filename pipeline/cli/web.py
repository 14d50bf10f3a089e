"""``mailledger web``: the archive in a browser and its JSON API (``pipeline.web``),
served by uvicorn until SIGINT or SIGTERM (both end it, exit 0). Loopback only
unless ``--token-file`` gives the token every request must carry."""

from __future__ import annotations

import argparse
from typing import Any

from pipeline.cli.exits import EXIT_OK
from pipeline.cli.parsing import add_command

__all__ = ["add_access_options", "add_web"]


def cmd_web(args: argparse.Namespace) -> int:
    from pipeline.web import create_app
    from pipeline.web.running import listen_settings, run_app

    listen = listen_settings(args.listen, args.token_file, args.allow_host)
    app = create_app(args.store, token=listen.token, allowed_hosts=listen.hosts)
    run_app(app, listen)
    return EXIT_OK


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
    add_access_options(p)


def add_access_options(p: argparse.ArgumentParser, *, of: str = "") -> None:
    """``--allow-host`` and ``--token-file``, as ``web`` and ``serve --listen`` take
    them (``of``: what their help starts with, such as ``"--listen: "``)."""
    p.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME[:PORT]",
        help=f"{of}a Host header to answer besides the listen address and the loopback"
        " names (the machine's name or LAN address when listening on 0.0.0.0); repeatable",
    )
    p.add_argument(  # type: ignore[attr-defined]
        "--token-file",
        metavar="FILE",
        help=f"{of}a file (mode 0600) holding the token every request carries:"
        " Authorization: Bearer TOKEN, or the cookie /login?token=TOKEN sets",
    ).complete_kind = "FILE"

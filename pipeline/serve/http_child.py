"""``serve --listen``: the web app (``pipeline.web``, as ``mailledger web`` runs it)
in a child of the server, on a socket the server bound once and keeps.

The child opens the store as ``mailledger web`` does; the server never does (see
``pipeline.serve.server``). Each request tells the server it came (a byte on a
pipe, at most one a second), so ``--idle-exit`` counts HTTP requests as activity
as it counts commands. ``serve --sync`` adds the app's one state change: "sync
now" (``POST /api/v1/sync``), which the child asks of the server over the
store's socket (``{"op": "sync"}``), and the server of its sync child."""

from __future__ import annotations

import contextlib
import functools
import os
import socket
import time
from pathlib import Path
from typing import Any

from pipeline.serve import protocol
from pipeline.serve.children import Child, fork_child
from pipeline.web.running import Listen

__all__ = ["ask_sync", "http_child"]

_GRACE = 15.0  # seconds the app has to finish its requests after SIGTERM
_TELL_EVERY = 1.0  # seconds between two "a request came" bytes to the server


def http_child(
    listen: Listen,
    sock: socket.socket,
    store: Path,
    point: protocol.Endpoint,
    activity: int,
    *,
    csrf_secret: bytes,
    sync: bool,
) -> Child:
    """The supervised child serving the web app on ``sock``: a request writes a byte
    to ``activity``; ``sync``: the app offers "sync now"."""

    def serve() -> int:
        from pipeline.web import create_app
        from pipeline.web.running import run_app

        app = create_app(
            store,
            token=listen.token,
            allowed_hosts=listen.hosts,
            sync_now=functools.partial(ask_sync, point) if sync else None,
            csrf_secret=csrf_secret,
        )
        run_app(_Activity(app, activity), listen, sockets=[sock])
        return 0

    def spawn(output: int) -> int:
        return fork_child(serve, keep=[sock.fileno(), activity], output=output)

    return Child("http", spawn, grace=_GRACE)


def ask_sync(point: protocol.Endpoint) -> dict[str, Any]:
    """Ask the server to run its sync now: ``{"ok": true, "pid": N}`` (the sync
    child was told), else ``{"ok": false, "reason": ...}``."""
    from pipeline.serve.client import connect

    sock = connect(point)
    if sock is None:
        return {"ok": False, "reason": "the server does not answer"}
    with sock:
        try:
            protocol.send_msg(sock, {"op": "sync"})
            reply, _ = protocol.recv_msg(sock)
        except (OSError, protocol.ProtocolError) as exc:
            return {"ok": False, "reason": f"the server did not answer: {exc}"}
    return reply


class _Activity:
    """ASGI middleware: a request's start and end are activity the server sees."""

    def __init__(self, app: Any, fd: int) -> None:
        self.app = app
        self.fd = fd
        self.told = 0.0

    def _tell(self) -> None:
        now = time.monotonic()
        if now - self.told >= _TELL_EVERY:
            self.told = now
            with contextlib.suppress(OSError):  # (a full pipe: the server knows already)
                os.write(self.fd, b".")

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        self._tell()
        try:
            await self.app(scope, receive, send)
        finally:
            self._tell()

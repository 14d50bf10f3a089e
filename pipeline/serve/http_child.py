"""``serve --listen``: the web app (``pipeline.web``, as ``mailledger web`` runs it)
in children of the server (``--http-children N``), each on a socket of its own the
server bound once and keeps (several: ``SO_REUSEPORT``, the kernel spreading new
connections across them, ``pipeline.web.running.bind``); connections made while a
child restarts wait in its socket's backlog.

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
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any

from pipeline.serve import protocol
from pipeline.serve.children import RECYCLED, Child, fork_child
from pipeline.web.running import Listen

__all__ = ["ask_sync", "default_http_children", "http_children", "preload_web"]

_GRACE = 15.0  # seconds the app has to finish its requests after SIGTERM
_TELL_EVERY = 1.0  # seconds between two "a request came" bytes to the server


def default_http_children() -> int:
    """One web child per core, at most 4: each answers its requests' reads one at a
    time (a ``MessageStore`` is one process's), so the cores answer side by side."""
    return max(1, min(os.cpu_count() or 1, 4))


def preload_web() -> None:
    """Import the web app's libraries and compile its templates in the server, once,
    before any web child is forked: the children share those pages (copy-on-write)
    instead of each importing its own, and a restarted one answers sooner. (Pure
    Python: no thread, no DuckDB; safe to fork after.)"""
    from pipeline.web import create_app  # noqa: F401
    from pipeline.web.pages import compile_templates
    from pipeline.web.running import preload_server

    compile_templates()
    preload_server()


def http_children(
    listen: Listen,
    sockets: list[socket.socket],
    store: Path,
    point: protocol.Endpoint,
    activity: int,
    *,
    csrf_secret: bytes,
    sync: bool,
    keep_warm: float = 0.0,
) -> list[Child]:
    """A supervised child serving the web app on each of ``sockets`` (``http-1``,
    ``http-2``...): a request writes a byte to ``activity``; ``sync``: the app offers
    "sync now"; ``keep_warm``: a child that answered requests and then none for
    that long is replaced by a fresh one (0: never)."""
    several = len(sockets) > 1
    return [
        _http_child(
            f"http-{k}", listen, sock, store, point, activity, csrf_secret, sync, several, keep_warm
        )
        for k, sock in enumerate(sockets, 1)
    ]


def _http_child(
    name: str,
    listen: Listen,
    sock: socket.socket,
    store: Path,
    point: protocol.Endpoint,
    activity: int,
    csrf_secret: bytes,
    sync: bool,
    several: bool,
    keep_warm: float,
) -> Child:
    """``several``: one of several children answering side by side (one per core):
    its searches run on one DuckDB thread (``stores.db.set_query_threads``)."""

    def serve() -> int:
        from pipeline.web import create_app
        from pipeline.web.running import run_app
        from stores.db import set_query_threads

        if several:
            set_query_threads(1)

        app = create_app(
            store,
            token=listen.token,
            allowed_hosts=listen.hosts,
            sync_now=functools.partial(ask_sync, point) if sync else None,
            csrf_secret=csrf_secret,
        )
        served = _Activity(app, activity)
        if keep_warm > 0:
            recycler = threading.Thread(target=served.recycle_when_idle, args=(keep_warm,))
            recycler.daemon = True
            recycler.start()
        run_app(served, listen, sockets=[sock])
        return RECYCLED if served.recycled else 0

    def spawn(output: int) -> int:
        return fork_child(serve, keep=[sock.fileno(), activity], output=output)

    return Child(name, spawn, grace=_GRACE)


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
    """ASGI middleware: a request's start and end are activity the server sees; and
    the child's own idleness (``recycle_when_idle``)."""

    def __init__(self, app: Any, fd: int) -> None:
        self.app = app
        self.fd = fd
        self.told = 0.0
        self.under_way = 0  # requests (only the event loop's thread changes it)
        self.answered = 0
        self.last = time.monotonic()  # when the last request ended
        self.recycled = False

    def recycle_when_idle(self, idle: float) -> None:
        """(A thread.) Once the child has answered requests and then none for ``idle``
        seconds, stop it as SIGTERM does (uvicorn finishes what is under way) and
        exit ``RECYCLED``: the server starts a fresh child at once. After a load a
        child kept 200-270 MiB that DuckDB's and Arrow's allocators held (about 90
        at its start); the fresh one holds nothing of the store until asked."""
        while True:
            time.sleep(min(idle, 5.0) / 2)
            if self.answered and not self.under_way and time.monotonic() - self.last >= idle:
                self.recycled = True
                os.kill(os.getpid(), signal.SIGTERM)
                return

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
        self.under_way += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.under_way -= 1
            self.answered += 1
            self.last = time.monotonic()
            self._tell()

"""How the web app is put on an address, the one way for ``mailledger web`` and
``mailledger serve --listen``: the listen address read and checked against the
security rules (loopback without a token, any other address only with one), the
``Host`` allow-list made for it, and uvicorn run until SIGINT or SIGTERM."""

from __future__ import annotations

import contextlib
import signal
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.web.security import allowed_hosts_for, is_loopback, read_token_file
from stores.errors import UsageError

__all__ = ["Listen", "bind", "listen_settings", "parse_listen", "preload_server", "run_app"]


@dataclass(frozen=True)
class Listen:
    """Where the app listens and who it answers: ``hosts`` the ``Host`` values
    answered, ``token`` the one every request carries (None on loopback)."""

    host: str
    port: int
    token: str | None
    hosts: tuple[str, ...]

    @property
    def address(self) -> str:
        """``HOST:PORT`` (``[::1]:PORT`` for IPv6), as a browser is given it."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) as (host, port); UsageError if not one."""
    host, colon, port = text.rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"--listen: HOST:PORT, such as 127.0.0.1:8025, not {text!r}")
    return host.strip("[]"), int(port)


def listen_settings(listen: str, token_file: str | None, allow_host: Sequence[str]) -> Listen:
    """``--listen``, ``--token-file`` and ``--allow-host`` checked: UsageError (exit 2)
    for an address that is not HOST:PORT, a token file readable by others, or an
    address other than loopback without a token."""
    host, port = parse_listen(listen)
    token = read_token_file(Path(token_file)) if token_file else None
    if token is None and not is_loopback(host):
        raise UsageError(
            f"--listen {listen}: not a loopback address, so every request must carry a"
            " token: --token-file FILE (one line, mode 0600)"
        )
    hosts = (*allowed_hosts_for(host, port), *(name.lower() for name in allow_host))
    return Listen(host, port, token, hosts)


def bind(listen: Listen, count: int = 1) -> list[socket.socket]:
    """``count`` sockets listening on ``listen``'s address (``OSError``: in use, not
    this machine's): ``serve --listen`` binds them once, so that a restarted app
    takes the same socket and connections made meanwhile wait in its backlog.

    Several (``serve --http-children N``): each a child's, bound with
    ``SO_REUSEPORT``, so that the kernel spreads new connections evenly across
    them (one shared socket let whichever child woke first accept every
    connection a burst brought, and a keep-alive connection stays with the child
    that accepted it). A plain bind first, closed again, proves the address free:
    the group is ours alone (the kernel admits to it sockets of the same user that
    set ``SO_REUSEPORT``, which nothing else on the address then holds)."""
    address = (listen.host, listen.port)
    if count == 1:
        return [_listening(address)]
    _listening(address, backlog=1).close()
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sockets.append(_listening(address, reuse_port=True))
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def _listening(
    address: tuple[str, int], *, backlog: int = 256, reuse_port: bool = False
) -> socket.socket:
    """A TCP socket listening on ``address``, made with ``IPPROTO_TCP`` named: asyncio
    sets ``TCP_NODELAY`` only on connections accepted from such a socket (its
    ``proto``), and without it a keep-alive response written in two pieces (head,
    body) waited for the client's delayed ACK: 40 ms a request (``socket.create_server``
    leaves ``proto`` 0)."""
    family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind(address)
        sock.listen(backlog)
    except BaseException:
        sock.close()
        raise
    return sock


def preload_server() -> None:
    """Import what ``run_app`` imports as it starts (uvicorn, its HTTP protocol and
    event loop setup), for a process that forks the servers after."""
    import importlib

    for name in (
        "uvicorn",
        "uvicorn.config",
        "uvicorn.server",
        "uvicorn.lifespan.on",
        "uvicorn.loops.asyncio",
        "uvicorn.protocols.http.h11_impl",
        "uvicorn.protocols.websockets.auto",
        "anyio._backends._asyncio",
    ):
        with contextlib.suppress(ImportError):
            importlib.import_module(name)


def run_app(app: Any, listen: Listen, *, sockets: list[socket.socket] | None = None) -> None:
    """Serve ``app`` on ``listen`` (or on ``sockets``, bound already) until SIGINT or
    SIGTERM. uvicorn takes both while it runs (it stops taking connections,
    finishes the requests under way, the app's lifespan releases the store), then
    raises the signal again for the handler that was there before it: that handler
    is a no-op here, so a stop asked for is a clean end (not a death by SIGTERM,
    nor an "interrupted" exit)."""
    import uvicorn

    config = uvicorn.Config(
        app,
        host=listen.host,
        port=listen.port,
        log_level="warning",
        server_header=False,
        timeout_graceful_shutdown=10,
    )
    server = uvicorn.Server(config)
    asked = (signal.SIGINT, signal.SIGTERM)
    before = {sig: signal.signal(sig, lambda *_: None) for sig in asked}
    try:
        server.run(sockets=sockets)
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)

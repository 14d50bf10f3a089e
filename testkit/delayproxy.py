"""A TCP proxy that adds a fixed delay to every server response: a slow link for
a whole simulation, without slowing loopback for anything else (``tc`` on the
loopback device would delay Dask's own traffic too).

Each accepted connection is forwarded to the upstream server. Whenever the client
has sent something since the server last answered, the server's next bytes are
held ``delay`` seconds before they are forwarded: one round trip's latency per
command and response, whatever the sizes.

    with DelayProxy(("127.0.0.1", dv.imap_port), delay=0.030) as proxy:
        ... point the accounts at ("127.0.0.1", proxy.port) ...
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from types import TracebackType

__all__ = ["DelayProxy"]


class DelayProxy:
    """Listen on 127.0.0.1 (an ephemeral port), forward to ``upstream`` with
    ``delay`` seconds added to each response."""

    def __init__(self, upstream: tuple[str, int], delay: float) -> None:
        self.upstream = upstream
        self.delay = delay
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._closed = threading.Event()
        self._threads: list[threading.Thread] = []
        self.connections = 0

    def __enter__(self) -> DelayProxy:
        t = threading.Thread(target=self._accept, name="delayproxy-accept", daemon=True)
        t.start()
        self._threads.append(t)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self._listener.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=30)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            self.connections += 1
            asked = threading.Event()
            asked.set()  # (the greeting is a response too)
            for src, dst, up in ((client, server, True), (server, client, False)):
                t = threading.Thread(
                    target=self._pump, args=(src, dst, up, asked), daemon=True, name="delayproxy"
                )
                t.start()

    def _pump(
        self, src: socket.socket, dst: socket.socket, up: bool, asked: threading.Event
    ) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if up:
                    asked.set()  # the client spoke: the server's next answer is held
                elif asked.is_set():
                    asked.clear()
                    time.sleep(self.delay)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    s.close()

"""The listening half both test proxies share: a socket on 127.0.0.1 (an
ephemeral port) whose every client is paired with a new connection upstream.

What happens between the two sockets is the proxy's: ``handle(client, server)``
is called on the accept thread and must return quickly (start a thread).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable

__all__ = ["Relay"]


class Relay:
    """``start()`` listens and accepts until ``stop()``; ``port`` is where."""

    def __init__(
        self,
        upstream: tuple[str, int],
        handle: Callable[[socket.socket, socket.socket], None],
        *,
        name: str,
        host: str = "127.0.0.1",
        connect_timeout: float = 5.0,
    ) -> None:
        self.upstream = upstream
        self.host = host
        self.port = 0
        self._handle = handle
        self._name = name
        self._connect_timeout = connect_timeout
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self.stopping = threading.Event()

    def start(self) -> Relay:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, 0))
        sock.listen(64)
        sock.settimeout(0.1)  # (so that stop() is seen within 0.1 s)
        self._sock = sock
        self.port = sock.getsockname()[1]
        self._thread = threading.Thread(target=self._accept, name=self._name, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        if self._thread is not None:
            self._thread.join(5)
        if self._sock is not None:
            self._sock.close()

    def _accept(self) -> None:
        assert self._sock is not None
        while not self.stopping.is_set():
            try:
                client, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=self._connect_timeout)
            except OSError:
                client.close()  # (the client sees the server refuse)
                continue
            for s in (client, server):
                s.settimeout(None)
            self._handle(client, server)

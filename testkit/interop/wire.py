"""What crossed the wire: a byte-counting TCP proxy and a count of the bodies in it.

The proxy forwards every byte unchanged; it keeps what the server sent on each
connection so :func:`count_bodies` can read it afterwards. The count does not
trust the client: a body is any ``BODY[]``, ``BODY[]<n>``, ``BINARY[]`` or
``RFC822`` literal in a server's FETCH answer (partial header fetches such as
``BODY[HEADER.FIELDS (...)]`` are not bodies).
"""

from __future__ import annotations

import contextlib
import re
import socket
import threading
import time
from dataclasses import dataclass, field

from testkit.relay import Relay

__all__ = ["CountingProxy", "Wire", "count_bodies"]

_LITERAL = re.compile(rb"\{(\d+)\}\r\n")
_BODY_ITEM = re.compile(rb"(?:BODY\[\]|BINARY\[\]|RFC822)(?:<\d+>)?\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class Wire:
    """Server-to-client bytes and the full bodies among them, for one run."""

    bytes_s2c: int
    bytes_c2s: int
    bodies: int
    body_bytes: int
    connections: int


def count_bodies(stream: bytes) -> tuple[int, int]:
    """(bodies, their bytes) in one connection's server stream.

    Walks the stream literal by literal, so a body that itself contains text
    like ``BODY[] {12}`` is skipped as data, never counted.
    """
    bodies = body_bytes = 0
    pos = 0
    line_start = 0
    while True:
        m = _LITERAL.search(stream, pos)
        if m is None:
            return bodies, body_bytes
        size = int(m.group(1))
        # the text before the literal, back to the start of its response line
        before = stream[max(line_start, stream.rfind(b"\n", 0, m.start()) + 1) : m.start()]
        if _BODY_ITEM.search(before):
            bodies += 1
            body_bytes += size
        pos = m.end() + size
        line_start = pos


@dataclass
class _Pipe:
    s2c: bytearray = field(default_factory=bytearray)
    c2s: int = 0


@dataclass
class CountingProxy:
    """Listens on 127.0.0.1 (an ephemeral port), forwards to ``upstream``."""

    upstream: tuple[str, int]
    port: int = 0
    _pipes: list[_Pipe] = field(default_factory=list)
    _threads: list[threading.Thread] = field(default_factory=list)
    _relay: Relay | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> CountingProxy:
        self._relay = Relay(
            self.upstream, self._connected, name="interop-proxy", connect_timeout=10
        )
        self.port = self._relay.start().port
        return self

    def stop(self) -> None:
        if self._relay is not None:
            self._relay.stop()
        for t in self._threads:
            t.join(5)

    def take(self, settle: float = 5.0) -> Wire:
        """What crossed since the last ``take`` (waits for open connections to end)."""
        deadline = time.monotonic() + settle
        while time.monotonic() < deadline:
            busy = [t for t in self._threads if t.is_alive()]
            if not busy:
                break
            time.sleep(0.02)
        with self._lock:
            pipes, self._pipes = self._pipes, []
            self._threads = [t for t in self._threads if t.is_alive()]
        counted = [count_bodies(bytes(p.s2c)) for p in pipes]
        return Wire(
            bytes_s2c=sum(len(p.s2c) for p in pipes),
            bytes_c2s=sum(p.c2s for p in pipes),
            bodies=sum(n for n, _ in counted),
            body_bytes=sum(b for _, b in counted),
            connections=len(pipes),
        )

    def _connected(self, client: socket.socket, server: socket.socket) -> None:
        pipe = _Pipe()
        with self._lock:
            self._pipes.append(pipe)
        for src, dst, s2c in ((server, client, True), (client, server, False)):
            t = threading.Thread(
                target=self._pump, args=(src, dst, pipe, s2c), name="interop-pump", daemon=True
            )
            t.start()
            with self._lock:
                self._threads.append(t)

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket, pipe: _Pipe, s2c: bool) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if s2c:
                    pipe.s2c += data
                else:
                    pipe.c2s += len(data)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            # each socket is the source of exactly one pump: that pump closes it
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
            src.close()

"""A TCP proxy that breaks IMAP connections on a schedule (the network torture).

It sits between the code under test and the loopback Dovecot: it listens on
127.0.0.1 (an ephemeral port), forwards every accepted connection to the real
server, and applies the faults of its current schedule to that connection:

- ``drop``      close both sides (the client reads EOF);
- ``rst``       close the client side with SO_LINGER 0 (the client reads ECONNRESET);
- ``stall``     forward nothing for ``seconds`` (the client must time out), then
                drop, or resume (``then="resume"``) as if nothing happened;
- ``truncate``  inside the ``literal``-th ``{n}`` literal of the server's stream,
                let ``cut`` bytes through, then close both sides;
- ``inject``    at the next response boundary, send ``payload`` (an unsolicited
                ``* N FETCH (FLAGS (\\Seen))`` or ``* N EXISTS``) to the client;
- ``strip-uidnext``  remove ``[UIDNEXT n]`` (EXAMINE/SELECT) and ``UIDNEXT n``
                (STATUS) from every server response: a server that never says it
                (``status_too=False``: EXAMINE/SELECT only, as Courier);
- ``quote-fields``  answer ``BODY[HEADER.FIELDS (MESSAGE-ID)]`` as
                ``BODY[HEADER.FIELDS ("MESSAGE-ID")]`` (quoted field names, as Courier);
- ``date-after-body``  move a FETCH answer's ``INTERNALDATE`` from before its
                literal to after it (``BODY[] {n}...<literal> INTERNALDATE "d")``).

The last three rewrite the shape of the server's answers, not their meaning,
and apply to every response (on the connections ``conn`` picks): the shapes
of servers other than Dovecot, for the client's interoperability tests.

A fault fires at a byte offset of the server's stream (``at_bytes``), or
``after`` bytes after the ``nth`` client command line containing the text
``on_command`` (``FETCH``: mid-FETCH; ``BODY.PEEK[]``: a body FETCH, not an
envelope one), or inside a literal (``truncate``). ``conn`` picks the
accepted connection it applies to (0 = the first; None = every one), so a
schedule can break the first connection only (the client's reconnect then
succeeds) or every connection (the folder must fail cleanly).

The proxy parses just enough IMAP to find response boundaries and literals in
the server's stream; it never changes a byte it was not told to. Every
connection's fired faults are recorded (``fired``) so a campaign can count
what really happened, not only what was scheduled. It also counts the full
message bodies that cross it (``bodies``, ``body_bytes``: each ``BODY[]``,
``BODY[]<n>`` or ``RFC822`` literal the server sends).

    with FaultProxy(("127.0.0.1", dv.imap_port)) as proxy:
        proxy.schedule([Fault("drop", on_command="FETCH", after=300)])
        ... point the account at ("127.0.0.1", proxy.port) and sync ...
        proxy.schedule([])            # a clean line for the next run
"""

from __future__ import annotations

import contextlib
import re
import select
import socket
import struct
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from testkit.relay import Relay

__all__ = ["FAULT_KINDS", "Fault", "FaultProxy", "Fired"]

FaultKind = Literal[
    "drop", "rst", "stall", "truncate", "inject", "strip-uidnext", "quote-fields", "date-after-body"
]
FAULT_KINDS: tuple[str, ...] = (
    "drop", "rst", "stall", "truncate", "inject", "strip-uidnext", "quote-fields", "date-after-body"
)  # fmt: skip
REWRITES = frozenset({"strip-uidnext", "quote-fields", "date-after-body"})

_LITERAL = re.compile(rb"\{(\d+)\+?\}\r?\n\Z")
_UIDNEXT_CODE = re.compile(rb"^\* OK \[UIDNEXT \d+\][^\r\n]*\r?\n\Z", re.IGNORECASE)
_UIDNEXT_ITEM = re.compile(rb" ?UIDNEXT \d+", re.IGNORECASE)
_HEADER_FIELDS = re.compile(rb"(BODY\[HEADER\.FIELDS(?:\.NOT)? \()([^)\"]*)(\)\])", re.IGNORECASE)
_INTERNALDATE = re.compile(rb'INTERNALDATE "[^"]*"', re.IGNORECASE)
_BODY_LITERAL = re.compile(rb"[ (](?:BODY\[\](?:<\d+>)?|RFC822) \{(\d+)\+?\}\r?\n\Z", re.I)
_MAX_LINE = 1 << 20  # a line longer than this is forwarded in pieces


@dataclass(frozen=True)
class Fault:
    """One scheduled fault; see the module docstring for the kinds and triggers."""

    kind: FaultKind
    conn: int | None = 0
    at_bytes: int | None = None
    on_command: str | None = None
    nth: int = 1
    after: int = 0
    literal: int = 1
    cut: int = 0
    seconds: float = 0.0
    then: Literal["drop", "resume"] = "drop"
    payload: bytes = b""
    status_too: bool = True  # strip-uidnext: from STATUS answers as well as EXAMINE's

    def applies_to(self, index: int) -> bool:
        return self.conn is None or self.conn == index

    def describe(self) -> str:
        where = "every conn" if self.conn is None else f"conn {self.conn}"
        if self.kind == "truncate":
            when = f"literal #{self.literal} after {self.cut} B"
        elif self.kind == "strip-uidnext":
            when = "EXAMINE and STATUS" if self.status_too else "EXAMINE only"
        elif self.kind in REWRITES:
            when = "every response"
        elif self.on_command:
            when = f"{self.after} B after {self.on_command} #{self.nth}"
        else:
            when = f"at byte {self.at_bytes or 0}"
        extra = ""
        if self.kind == "stall":
            extra = f" {self.seconds:g}s then {self.then}"
        elif self.kind == "inject":
            extra = " " + self.payload.decode("ascii", "replace").strip()
        return f"{self.kind}{extra} ({where}, {when})"


@dataclass(frozen=True)
class Fired:
    """A fault that really happened on a connection, with where it hit."""

    conn: int
    fault: Fault
    at_byte: int


class _Closed(Exception):
    """The connection is over (a fault closed it, or a side hung up)."""


class _Connection:
    """One client connection and its upstream, pumped by one thread.

    All fault logic for both directions lives in this one select loop, so no
    locking is needed between the directions.
    """

    def __init__(
        self,
        proxy: FaultProxy,
        index: int,
        client: socket.socket,
        upstream: socket.socket,
        faults: Sequence[Fault],
    ) -> None:
        self.proxy = proxy
        self.index = index
        self.client = client
        self.upstream = upstream
        self.faults = [f for f in faults if f.applies_to(index)]
        self.done: set[int] = set()  # indexes into self.faults that fired
        self.s2c = bytearray()  # from the server, not yet forwarded
        self.c2s_line = bytearray()  # the client's current command line
        self.sent = 0  # server bytes forwarded to the client
        self.literal_left = 0
        self.literal_pos = 0
        self.literals = 0
        self.commands: dict[bytes, int] = {}  # client commands seen, by watched word
        self._watched = {f.on_command.upper().encode() for f in self.faults if f.on_command}
        self.armed: dict[int, int] = {}  # fault index -> server offset to fire at
        self.stalled_until: float | None = None
        self.stall_fault: Fault | None = None
        self.held_c2s = bytearray()  # client bytes held back during a stall
        self.line_tail = b""  # the end of the server line being forwarded
        self._rewrites = {f.kind for f in self.faults if f.kind in REWRITES}
        self._strip_status = any(f.kind == "strip-uidnext" and f.status_too for f in self.faults)
        self.moved_date = b""  # date-after-body: the INTERNALDATE held past a literal
        for i, f in enumerate(self.faults):
            if f.kind in ("drop", "rst", "stall", "inject") and not f.on_command:
                self.armed[i] = f.at_bytes or 0

    # -- the loop ---------------------------------------------------------------
    def run(self) -> None:
        try:
            while not self.proxy._stopping.is_set():
                if self.stalled_until is not None and time.monotonic() >= self.stalled_until:
                    self._end_stall()
                wanted = (
                    [self.client]
                    if self.stalled_until is not None
                    else [self.client, self.upstream]
                )
                ready, _, _ = select.select(wanted, [], [], 0.05)
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        raise _Closed
                    if sock is self.client:
                        self._from_client(data)
                    else:
                        self.s2c += data
                        self._pump_s2c()
        except (_Closed, OSError):
            pass
        finally:
            self._close()

    def _close(self, *, rst: bool = False) -> None:
        if rst:
            with contextlib.suppress(OSError):
                self.client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        for s in (self.client, self.upstream):
            if not rst:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                s.close()

    def _fire(self, i: int) -> None:
        """Apply fault ``i`` now (at ``self.sent`` bytes of the server's stream)."""
        f = self.faults[i]
        self.done.add(i)
        self.armed.pop(i, None)
        self.proxy._record(Fired(self.index, f, self.sent))
        if f.kind in ("drop", "truncate"):
            self._close()
            raise _Closed
        if f.kind == "rst":
            self._close(rst=True)
            raise _Closed
        if f.kind == "stall":
            self.stalled_until = time.monotonic() + f.seconds
            self.stall_fault = f
            raise _Stalled
        if f.kind == "inject":
            self.client.sendall(f.payload)

    def _end_stall(self) -> None:
        f, self.stall_fault, self.stalled_until = self.stall_fault, None, None
        if f is None or f.then == "drop":
            self._close()
            raise _Closed
        if self.held_c2s:
            held, self.held_c2s = bytes(self.held_c2s), bytearray()
            self._from_client(held)
        self._pump_s2c()

    # -- client -> server ---------------------------------------------------------
    def _from_client(self, data: bytes) -> None:
        if self.stalled_until is not None:
            self.held_c2s += data
            return
        self.upstream.sendall(data)
        self.c2s_line += data
        while b"\n" in self.c2s_line:
            line, _, rest = bytes(self.c2s_line).partition(b"\n")
            self.c2s_line = bytearray(rest)
            upper = line.upper()
            seen = {w for w in self._watched if w in upper}
            for word in seen:
                self.commands[word] = self.commands.get(word, 0) + 1
            for i, f in enumerate(self.faults):
                word = f.on_command.upper().encode() if f.on_command else b""
                if word in seen and self.commands[word] == f.nth and i not in self.done:
                    self.armed[i] = self.sent + f.after  # from the start of its answer
        if len(self.c2s_line) > _MAX_LINE:
            self.c2s_line.clear()

    # -- server -> client ---------------------------------------------------------
    def _pump_s2c(self) -> None:
        """Forward what the server sent, unit by unit (a line, or a piece of a
        literal), firing the faults whose moment has come."""
        try:
            while self.s2c and self.stalled_until is None:
                if self.literal_left:
                    self._forward(bytes(self.s2c[: self.literal_left]), is_line=False)
                    continue
                end = self.s2c.find(b"\n")
                if end < 0:
                    if len(self.s2c) < _MAX_LINE:
                        return
                    end = len(self.s2c) - 1
                self._forward(bytes(self.s2c[: end + 1]), is_line=True)
        except _Stalled:
            return

    def _pass(self, data: bytes, is_line: bool) -> None:
        """Forward ``data`` (the head of ``self.s2c``) and keep the stream's state."""
        if data:
            self.client.sendall(data)
        del self.s2c[: len(data)]
        self.sent += len(data)
        if not is_line:
            self.literal_left -= len(data)
            self.literal_pos += len(data)
        else:
            self.line_tail = (self.line_tail + data)[-64:]

    def _forward(self, unit: bytes, *, is_line: bool) -> None:
        # 1. an offset fault inside this unit: forward up to it, then fire
        for i, at in sorted(self.armed.items(), key=lambda kv: kv[1]):
            if self.faults[i].kind != "inject" and self.sent + len(unit) > at:
                self._pass(unit[: max(0, at - self.sent)], is_line)
                self._fire(i)  # raises
        # 2. the literal to truncate
        if not is_line:
            for i, f in enumerate(self.faults):
                if f.kind != "truncate" or i in self.done or f.literal != self.literals:
                    continue
                cut = min(f.cut, self.literal_pos + self.literal_left - 1)
                if self.literal_pos + len(unit) > cut:
                    self._pass(unit[: max(0, cut - self.literal_pos)], is_line)
                    self._fire(i)  # raises
            self._pass(unit, is_line)
            return
        # 3. a line: rewritten if the schedule says so, then literal bookkeeping
        complete = unit.endswith(b"\n")
        whole = bytes(self.line_tail) + unit
        out = unit
        if complete and not self.line_tail and self._rewrites:
            out = self._rewrite(unit)
        if out is unit:
            self._pass(unit, is_line=True)
        else:
            if out:
                self.client.sendall(out)
            del self.s2c[: len(unit)]
            self.sent += len(unit)
        if not complete:
            return
        self.line_tail = b""
        m = _LITERAL.search(whole)
        if m and _BODY_LITERAL.search(whole):
            self.proxy._count_body(int(m.group(1)))
        if m and int(m.group(1)):
            self.literal_left = int(m.group(1))
            self.literal_pos = 0
            self.literals += 1
            return
        # a response ended here: the place for an unsolicited one
        for i, at in sorted(self.armed.items(), key=lambda kv: kv[1]):
            if self.faults[i].kind == "inject" and self.sent >= at:
                self._fire(i)

    def _rewrite(self, line: bytes) -> bytes:
        """``line`` (a whole server line, not a literal) in the shapes scheduled."""
        out = line
        if "strip-uidnext" in self._rewrites:
            out = self._fired_if(
                "strip-uidnext", out, strip_uidnext(out, status=self._strip_status)
            )
        if "quote-fields" in self._rewrites:
            out = self._fired_if("quote-fields", out, quote_fields(out))
        if "date-after-body" in self._rewrites:
            held, self.moved_date = self.moved_date, b""
            moved = held + out  # the line after a literal goes on from its last octet
            date = _INTERNALDATE.search(moved)
            if date and _LITERAL.search(moved):  # this answer goes on after a literal
                start, end = date.span()
                if moved[end : end + 1] == b" ":
                    end += 1
                elif moved[start - 1 : start] == b" ":
                    start -= 1
                moved = moved[:start] + moved[end:]
                self.moved_date = b" " + date[0]
            out = self._fired_if("date-after-body", out, moved)
        return out

    def _fired_if(self, kind: str, before: bytes, after: bytes) -> bytes:
        """``after``; recording the first time a rewrite of ``kind`` changed a line."""
        if after != before:
            for i, f in enumerate(self.faults):
                if f.kind == kind and i not in self.done:
                    self.done.add(i)
                    self.proxy._record(Fired(self.index, f, self.sent))
        return after


class _Stalled(Exception):
    """Forwarding paused; the loop resumes it when the stall ends."""


def strip_uidnext(line: bytes, *, status: bool) -> bytes:
    if _UIDNEXT_CODE.match(line):
        return b""
    if status and line.upper().startswith(b"* STATUS ") and b"UIDNEXT" in line.upper():
        return _UIDNEXT_ITEM.sub(b"", line).replace(b"( ", b"(")
    return line


def quote_fields(line: bytes) -> bytes:
    """Header-field names in FETCH item names quoted: ``BODY[HEADER.FIELDS ("A" "B")]``."""

    def quote(m: re.Match[bytes]) -> bytes:
        names = b" ".join(b'"' + n + b'"' for n in m[2].split())
        return m[1] + names + m[3]

    return _HEADER_FIELDS.sub(quote, line)


@dataclass
class FaultProxy:
    """The proxy. ``start()`` (or ``with``), ``schedule(faults)``, ``stop()``.

    A new schedule applies to connections accepted after it is set; connection
    indexes count from 0 again with every ``schedule`` call.
    """

    upstream: tuple[str, int]
    host: str = "127.0.0.1"
    port: int = 0
    fired: list[Fired] = field(default_factory=list)
    connections: int = 0
    bodies: int = 0  # full message bodies the server sent through the proxy
    body_bytes: int = 0
    _faults: tuple[Fault, ...] = ()
    _relay: Relay | None = field(default=None, repr=False)
    _workers: list[threading.Thread] = field(default_factory=list, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _stopping: threading.Event = field(default_factory=threading.Event, repr=False)

    def start(self) -> FaultProxy:
        self._relay = Relay(self.upstream, self._connected, name="faultproxy", host=self.host)
        self.port = self._relay.start().port
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._relay is not None:
            self._relay.stop()
        for t in self._workers:
            t.join(5)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def schedule(self, faults: Sequence[Fault]) -> None:
        """Faults for the connections accepted from now on (indexes restart at 0);
        clears what was recorded as fired and the bodies counted."""
        with self._lock:
            self._faults = tuple(faults)
            self.connections = 0
            self.fired = []
            self.bodies = self.body_bytes = 0

    def idle(self, timeout: float = 5.0) -> bool:
        """Wait until no connection is open (a run's sockets are all closed)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._workers = [t for t in self._workers if t.is_alive()]
            if not self._workers:
                return True
            time.sleep(0.01)
        return False

    def _record(self, fired: Fired) -> None:
        with self._lock:
            self.fired.append(fired)

    def _count_body(self, size: int) -> None:
        with self._lock:
            self.bodies += 1
            self.body_bytes += size

    def _connected(self, client: socket.socket, upstream: socket.socket) -> None:
        with self._lock:
            index = self.connections
            self.connections += 1
            faults = self._faults
        for s in (client, upstream):
            # unit-by-unit forwarding + Nagle + delayed ACKs would add 40 ms a reply
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = _Connection(self, index, client, upstream, faults)
        t = threading.Thread(target=conn.run, name=f"faultproxy-{index}", daemon=True)
        self._workers.append(t)
        t.start()

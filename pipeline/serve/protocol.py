"""The socket protocol between ``mailledger`` and ``mailledger serve``: where a
store's server listens, how a client finds out whether one is alive, and the
messages they exchange. Standard library only: the thin client imports this
module before anything else of mailledger.

Where: ``$XDG_RUNTIME_DIR/mailledger/`` (else ``/tmp/mailledger-$UID/``), a 0700
directory of the user's own, holds per served store ``<key>.sock`` (the socket),
``<key>.lock`` (held by the server, ``flock``, for as long as it runs: a server
killed with ``kill -9`` releases it, which is how a stale socket is told from a
live one) and ``<key>.json`` (pid, version, store, socket, log, start time).
``<key>`` hashes the store's real path *and* the package version: a client
never even finds the socket of a server of another version.

Messages: a 4-byte big-endian length, then that many bytes of UTF-8 JSON.

1. client → ``{"op": "hello", "protocol", "version", "store_format"}``;
   server → ``{"ok": true, "pid"}`` or ``{"ok": false, "reason"}`` (then closes):
   a client and a server that differ in any of the three never go further.
2. client → ``{"op": "run", "argv", "cwd", "env", "umask"}`` with its stdin,
   stdout and stderr passed along (``SCM_RIGHTS``): the command writes to the
   client's own terminal or pipes, so stdout and stderr stay apart, long output
   streams, and the terminal's width and ``isatty`` are the client's. Later the
   client may send ``{"op": "cancel"}`` (Ctrl-C). The server answers once:
   ``{"exit": CODE}``, or ``{"fallback": REASON}`` when the command is not its
   to run (another store): the client then runs it in-process.
   ``{"op": "status"}`` → the server's description; ``{"op": "stop"}`` → ``{"ok"}``.
"""

from __future__ import annotations

import _socket
import fcntl
import os
import struct
import sys

TYPE_CHECKING = False  # (``typing`` costs the thin client 9 ms: for mypy only)
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any

# The thin client's imports are the interpreter's own modules: ``socket`` (its enum
# conversions and ``selectors``), ``hashlib`` (OpenSSL), ``json`` (its regular
# expressions) and ``contextlib`` cost it 25 ms of CPU on a loaded two-core machine
# where the interpreter starts in 10; ``_socket``, ``_sha256`` and ``_json`` are what
# they are made of.
try:
    from _sha256 import sha256 as _sha256  # type: ignore[import-not-found]  # (Python 3.11)
except ImportError:  # pragma: no cover (3.12 and later)
    try:
        from _sha2 import sha256 as _sha256  # type: ignore[import-not-found,no-redef]
    except ImportError:
        from hashlib import sha256 as _sha256  # type: ignore[assignment]

__all__ = [
    "PROTOCOL",
    "STORE_FORMAT",
    "Endpoint",
    "ProtocolError",
    "endpoint",
    "hello",
    "package_version",
    "recv_msg",
    "send_msg",
    "served_by",
]

PROTOCOL = 1
"""The version of these messages: raised on any change to them."""

STORE_FORMAT = 1
"""The store format this code reads and writes (``STORE/store.json``'s version)."""

_HEADER = struct.Struct(">I")
_INT = struct.Struct("i")  # (a descriptor passed along the socket)
_MAX_MESSAGE = 16 << 20  # (argv and environment: far below this)


class ProtocolError(Exception):
    """The other side broke the protocol or went away mid-message."""


def _unencodable(value: object) -> object:
    raise TypeError(f"{type(value).__name__} is not JSON")


_CONSTANTS = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": -float("inf")}


class _Reading:
    """What CPython's JSON scanner reads its settings from (``json.loads``'s own)."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = staticmethod(_CONSTANTS.__getitem__)


def _codec() -> tuple[Callable[[Any], str], Callable[[str], Any]]:
    """``json.dumps`` and ``json.loads`` as CPython's ``_json`` makes them, checked
    to write and read what those do; ``json``'s own on any other Python."""
    try:
        import _json

        encoder = _json.make_encoder(
            None, _unencodable, _json.encode_basestring_ascii, None, ": ", ", ", False, False, True
        )
        scanner = _json.make_scanner(_Reading())  # type: ignore[arg-type]

        def dumps(value: Any) -> str:
            return "".join(encoder(value, 0))

        def loads(text: str) -> Any:
            text = text.strip(" \t\n\r")  # (JSON's blanks, which json.loads allows)
            try:
                value, end = scanner(text, 0)
            except StopIteration as exc:
                raise ValueError(f"no JSON value at {exc.value}") from None
            if end != len(text):
                raise ValueError(f"more than one JSON value (at {end})")
            return value

        sample = {"a": [1, -2.5, '\u00e9\n"', None, True, False, {}], "b": {"c": ""}}
        text = '{"a": [1, -2.5, "\\u00e9\\n\\"", null, true, false, {}], "b": {"c": ""}}'
        if dumps(sample) == text and loads(text) == sample:
            return dumps, loads
    except (ImportError, AttributeError, TypeError, ValueError):  # pragma: no cover
        pass
    import json  # pragma: no cover

    return json.dumps, json.loads  # pragma: no cover


dumps, loads = _codec()


def package_version() -> str:
    """The installed mailledger's version, read from its ``dist-info`` directory's
    name on ``sys.path`` (``importlib.metadata`` would cost the thin client 30 ms);
    ``0+unknown`` in a source tree that was never installed."""
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            if name.startswith("mailledger-") and name.endswith(".dist-info"):
                return name[len("mailledger-") : -len(".dist-info")]
    return "0+unknown"


class Endpoint:
    """Where the server of one store, at one version, listens and leaves its state:
    paths as strings (``pathlib`` and ``dataclasses`` cost the thin client 30 ms)."""

    __slots__ = ("info", "key", "lock", "socket", "store")

    def __init__(self, store: str, where: str, key: str) -> None:
        self.store = store  # (its real path)
        self.key = key
        self.socket = os.path.join(where, f"{key}.sock")
        self.lock = os.path.join(where, f"{key}.lock")
        self.info = os.path.join(where, f"{key}.json")

    def lock_held(self, *, wait: bool) -> _LockHeld:
        """The server lock, taken (True) or, with ``wait`` False, found taken by a
        live server (False): ``with point.lock_held(wait=False) as taken:``."""
        return _LockHeld(self.lock, wait)

    def read_info(self) -> dict[str, Any] | None:
        """What the running server wrote about itself, or None."""
        try:
            with open(self.info, encoding="utf-8") as f:
                info = loads(f.read())
        except (OSError, ValueError):
            return None
        return info if isinstance(info, dict) else None


class _LockHeld:
    """``Endpoint.lock_held`` (a class: ``contextlib`` is not the thin client's)."""

    def __init__(self, path: str, wait: bool) -> None:
        self.path, self.wait, self.fd = path, wait, -1

    def __enter__(self) -> bool:
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | (0 if self.wait else fcntl.LOCK_NB))
        except BlockingIOError:
            return False
        except BaseException:
            os.close(self.fd)
            self.fd = -1
            raise
        return True

    def __exit__(self, *exc: object) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # (releases the lock)
            self.fd = -1


def runtime_dir(env: Mapping[str, str]) -> str:
    """The user's 0700 directory of server sockets (created when missing).

    Raises ``OSError`` when it is not the user's own or others may enter it: a
    socket there could be anyone's."""
    base = env.get("XDG_RUNTIME_DIR")
    path = os.path.join(base, "mailledger") if base else f"/tmp/mailledger-{os.getuid()}"
    try:  # noqa: SIM105 (contextlib is not the thin client's)
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if st.st_uid != os.getuid() or st.st_mode & 0o077 or not os.path.isdir(path):
        raise PermissionError(f"{path}: not a 0700 directory of this user's")
    return path


def endpoint(
    store: str | os.PathLike[str], env: Mapping[str, str], version: str | None = None
) -> Endpoint:
    """The endpoint of ``store``'s server at ``version`` (default: this one's)."""
    real = os.path.realpath(store)
    version = package_version() if version is None else version
    key = _sha256(f"{PROTOCOL}\0{version}\0{real}".encode()).hexdigest()[:20]
    return Endpoint(real, runtime_dir(env), key)


def served_by(point: Endpoint) -> int | None:
    """The pid of the live server of ``point``, else None (a stale socket and state
    file of a server that died are removed, under the lock)."""
    with point.lock_held(wait=False) as taken:
        if not taken:
            info = point.read_info()
            return int(info["pid"]) if info else -1
        for stale in (point.socket, point.info):
            try:  # noqa: SIM105 (contextlib is not the thin client's)
                os.unlink(stale)
            except FileNotFoundError:
                pass
        return None


def send_msg(
    sock: _socket.socket, message: Mapping[str, Any], fds: list[int] | None = None
) -> None:
    """Send one message (and ``fds`` with it)."""
    body = dumps(message).encode()
    data = _HEADER.pack(len(body)) + body
    if fds:
        passed = struct.pack(f"{len(fds)}i", *fds)
        sent = sock.sendmsg([data], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, passed)])
        data = data[sent:]
    if data:  # (not even an empty send once all went: a worker that has read its
        sock.sendall(data)  # command and closed the channel makes that EPIPE)


def recv_msg(sock: _socket.socket, *, max_fds: int = 0) -> tuple[dict[str, Any], list[int]]:
    """One message and the descriptors that came with it; ``ProtocolError`` when the
    other side closed or sent something else. Reads exactly one message: what the
    other side sends after it stays in the socket."""
    fds: list[int] = []
    head = b""
    while len(head) < _HEADER.size:
        if max_fds and not head:
            chunk, fds = _recv_fds(sock, _HEADER.size, max_fds)
        else:
            chunk = sock.recv(_HEADER.size - len(head))
        if not chunk:
            for fd in fds:
                os.close(fd)
            raise ProtocolError("connection closed")
        head += chunk
    (size,) = _HEADER.unpack(head)
    if size > _MAX_MESSAGE:
        raise ProtocolError(f"message of {size} bytes")
    body = bytearray()
    while len(body) < size:
        chunk = sock.recv(min(size - len(body), 1 << 20))
        if not chunk:
            raise ProtocolError("connection closed mid-message")
        body += chunk
    try:
        message = loads(body.decode("utf-8"))
    except ValueError as exc:  # (UnicodeDecodeError too)
        raise ProtocolError(f"not JSON: {exc}") from None
    if not isinstance(message, dict):
        raise ProtocolError("not a JSON object")
    return message, fds


def _recv_fds(sock: _socket.socket, size: int, max_fds: int) -> tuple[bytes, list[int]]:
    """``socket.recv_fds`` (without ``socket``'s import)."""
    data, ancillary, _flags, _addr = sock.recvmsg(size, _socket.CMSG_LEN(max_fds * _INT.size))
    fds: list[int] = []
    for level, kind, payload in ancillary:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
            whole = len(payload) - len(payload) % _INT.size
            fds += [fd for (fd,) in _INT.iter_unpack(payload[:whole])]
    return data, fds


def hello(version: str | None = None) -> dict[str, Any]:
    """The client's first message (``version``: another one's, for a test of the
    handshake)."""
    return {
        "op": "hello",
        "protocol": PROTOCOL,
        "version": package_version() if version is None else version,
        "store_format": STORE_FORMAT,
    }

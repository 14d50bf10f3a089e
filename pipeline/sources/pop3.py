"""A POP3 maildrop as a source: the connection (UIDL, LIST, RETR, DELE, QUIT)
and the plan of a run (which listed messages to take, skip, delete), pure.
Knows nothing of the store: ``pipeline.sync.pop3`` drives it.

POP3 has one mailbox (reported as folder ``INBOX``) and no cursor: the set of
UIDLs on record is the state. Messages are told apart by UIDL and size (the
exact sizes RFC 1939 asks for): see :func:`plan_pop3`.
"""

from __future__ import annotations

import base64
import contextlib
import poplib
import socket
import ssl
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pipeline.config import Account, tls_context
from stores.errors import SourceError, TerminalSourceError, TransientSourceError

__all__ = ["FOLDER", "Pop3Entry", "Pop3Plan", "Pop3Source", "plan_pop3", "trim_terminator"]

FOLDER = "INBOX"
_LINE_LIMIT = 64 << 20  # poplib's 2048-byte line limit is too small for real mail
_NET_ERRORS = (OSError, socket.timeout, ssl.SSLError, EOFError)


@dataclass(frozen=True)
class Pop3Entry:
    """One message of the maildrop as UIDL and LIST show it."""

    number: int
    uidl: str
    size: int


class _Commands:
    """What ``poplib`` has no public call for (a SASL AUTH, a RETR that keeps the
    bytes), in the one place that uses its private ones, mixed into its clients.
    Declared here: poplib's type stubs leave them out."""

    file: Any
    _putcmd: Callable[[str], None]
    _getresp: Callable[[], bytes]
    _shortcmd: Callable[[str], bytes]

    def auth_xoauth2(self, username: str, token: str) -> None:
        """``AUTH XOAUTH2`` with ``token`` (RFC 7628's SASL initial response)."""
        sasl = f"user={username}\x01auth=Bearer {token}\x01\x01"
        self._shortcmd("AUTH XOAUTH2 " + base64.b64encode(sasl.encode()).decode())

    def retr_bytes(self, which: int) -> bytes:
        """RETR that keeps the server's bytes exactly (line endings included)."""
        self._putcmd(f"RETR {which}")
        self._getresp()  # raises error_proto on -ERR
        parts: list[bytes] = []
        while True:
            line = self.file.readline(_LINE_LIMIT + 1)
            if not line:
                raise poplib.error_proto("-ERR connection closed during RETR")
            if len(line) > _LINE_LIMIT:
                raise poplib.error_proto(f"-ERR a line longer than {_LINE_LIMIT} bytes")
            if line in (b".\r\n", b".\n"):
                break
            if line.startswith(b".."):  # byte-stuffing (RFC 1939 §3)
                line = line[1:]
            parts.append(line)
        return b"".join(parts)


class _Client(_Commands, poplib.POP3):
    pass


class _ClientSSL(_Commands, poplib.POP3_SSL):
    pass


def _err_text(exc: BaseException) -> str:
    text = exc.args[0] if exc.args else exc
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return str(text)


class Pop3Source:
    """One POP3 connection for one account; knows nothing of the store.

    Leaving the ``with`` block without :meth:`quit` drops the connection: the
    server then deletes nothing, whatever was marked with DELE.
    """

    def __init__(self, account: Account, secret: str, *, timeout: float = 60.0) -> None:
        self.account = account
        self._secret = secret
        self.timeout = timeout
        self.conn: _Client | _ClientSSL | None = None

    def __enter__(self) -> Pop3Source:
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _c(self) -> _Client | _ClientSSL:
        if self.conn is None:
            raise TransientSourceError(f"{self.account.name}: not connected")
        return self.conn

    def connect(self) -> None:
        a = self.account
        try:
            if a.tls == "implicit":
                self.conn = _ClientSSL(a.host, a.port, context=tls_context(a), timeout=self.timeout)
            else:
                self.conn = _Client(a.host, a.port, timeout=self.timeout)
                if a.tls == "starttls":
                    self.conn.stls(tls_context(a))
        except poplib.error_proto as exc:
            self.close()
            raise TerminalSourceError(
                f"{a.name}: {a.host}:{a.port}: {_err_text(exc)} (tls = {a.tls!r})"
            ) from None
        except _NET_ERRORS as exc:
            self.close()
            raise TransientSourceError(
                f"{a.name}: cannot connect to {a.host}:{a.port}: {exc}"
            ) from None
        conn = self._c()
        try:
            if a.auth == "xoauth2":
                conn.auth_xoauth2(a.username, self._secret)
            else:
                conn.user(a.username)
                conn.pass_(self._secret)
        except poplib.error_proto as exc:
            self.close()
            # the server's answer, never the password
            raise TerminalSourceError(f"{a.name}: login failed: {_err_text(exc)}") from None
        except _NET_ERRORS as exc:
            self.close()
            raise TransientSourceError(f"{a.name}: connection lost at login: {exc}") from None

    def close(self) -> None:
        """Drop the connection without QUIT: messages marked with DELE stay."""
        conn, self.conn = self.conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    def quit(self) -> None:
        """QUIT: the server deletes the messages marked with DELE in this session."""
        conn = self._c()
        try:
            conn.quit()
        except poplib.error_proto as exc:
            raise TransientSourceError(
                f"{self.account.name}: QUIT failed, deletions may not have happened:"
                f" {_err_text(exc)}"
            ) from None
        except _NET_ERRORS as exc:
            raise TransientSourceError(f"{self.account.name}: QUIT: {exc}") from None
        finally:
            self.close()

    def _call(self, what: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except poplib.error_proto as exc:
            raise SourceError(f"{self.account.name}: {what}: {_err_text(exc)}") from None
        except _NET_ERRORS as exc:
            self.close()
            raise TransientSourceError(f"{self.account.name}: {what}: {exc}") from None

    def stat(self) -> tuple[int, int]:
        """(messages, bytes) of the maildrop."""
        count, size = self._call("STAT", lambda: self._c().stat())
        return int(count), int(size)

    def listing(self) -> list[Pop3Entry]:
        """Every message's number, UIDL and size (UIDL and LIST, two commands)."""
        try:
            _, uidl_lines, _ = self._c().uidl()
        except poplib.error_proto as exc:
            raise TerminalSourceError(
                f"{self.account.name}: the server has no UIDL ({_err_text(exc)}):"
                " without it messages cannot be told apart across sessions"
            ) from None
        except _NET_ERRORS as exc:
            self.close()
            raise TransientSourceError(f"{self.account.name}: UIDL: {exc}") from None
        _, list_lines, _ = self._call("LIST", lambda: self._c().list())
        sizes: dict[int, int] = {}
        for line in list_lines:
            parts = line.split()
            if len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit():
                sizes[int(parts[0])] = int(parts[1])
        out: list[Pop3Entry] = []
        for line in uidl_lines:
            parts = line.split(None, 1)
            if len(parts) != 2 or not parts[0].isdigit():
                raise SourceError(f"{self.account.name}: UIDL: malformed line {line!r}")
            n = int(parts[0])
            if n not in sizes:
                raise SourceError(f"{self.account.name}: LIST has no size for message {n}")
            out.append(Pop3Entry(n, parts[1].strip().decode("ascii", "replace"), sizes[n]))
        return out

    def retr(self, number: int) -> bytes:
        """The message's bytes exactly as sent (CRLF line endings, un-stuffed)."""
        raw: bytes = self._call(f"RETR {number}", lambda: self._c().retr_bytes(number))
        return raw

    def dele(self, number: int) -> None:
        self._call(f"DELE {number}", lambda: self._c().dele(number))


# -- planning -------------------------------------------------------------------


@dataclass
class Pop3Plan:
    """What to do with each listed message, decided from what the store holds."""

    take: list[Pop3Entry] = field(default_factory=list)
    skip: list[Pop3Entry] = field(default_factory=list)
    deletable: list[Pop3Entry] = field(default_factory=list)
    """Skipped messages whose UIDL and size are durable in the store."""
    suspect: dict[str, set[str]] = field(default_factory=dict)
    """UIDL -> the shas on record for it, for UIDLs taken because the size differs."""


def _is_legacy(source: str) -> bool:
    return source.startswith("import:gdbm:")


def plan_pop3(entries: Sequence[Pop3Entry], known: Mapping[str, list[dict[str, Any]]]) -> Pop3Plan:
    """Decide per listed message: skip it, or take it (and whether as a suspect reuse).

    Pure: ``known`` is :meth:`MessageStore.known_uidls` for the listed UIDLs.

    - not on record: take;
    - on record at the listed size: skip (and it may be deleted on the server);
    - on record, but no size is on record any more (content purged): skip, keep;
    - on record only from a legacy GDBM import, at another size: skip, keep (the
      old program's bytes need not be the server's: line endings, a BOM);
    - on record for this account at other sizes only: the server reused the
      UIDL (or the content changed): take, and compare the content after RETR.
    """
    plan = Pop3Plan()
    for e in entries:
        records = known.get(e.uidl)
        if not records:
            plan.take.append(e)
            continue
        sizes = {r["size"] for r in records}
        if e.size in sizes:
            plan.skip.append(e)
            plan.deletable.append(e)
        elif None in sizes or all(_is_legacy(r["source"]) for r in records):
            plan.skip.append(e)
        else:
            plan.take.append(e)
            plan.suspect[e.uidl] = {r["sha256"] for r in records}
    return plan


def trim_terminator(raw: bytes, listed_size: int) -> bytes:
    """The message without the CRLF a server adds before the final ``.`` when the
    message did not end with a line break (RETR gives 2 bytes more than LIST).

    Stored this way, the bytes are those IMAP's ``BODY[]`` gives for the same
    message, and the stored size equals the listed size on the next run.
    """
    if len(raw) == listed_size + 2 and raw.endswith(b"\r\n"):
        return raw[:-2]
    return raw

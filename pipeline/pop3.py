"""POP3 accounts: UIDL list, skip what the store holds, RETR the rest (README, "POP3 accounts").

POP3 has one mailbox (reported as folder ``INBOX``) and no cursor: the set of
UIDLs on record is the state, so a POP3 sync writes ``message-seen`` events
(the UIDL as location, the account name as source) and never a
``cursor-moved``. One run:

1. ``UIDL`` and ``LIST``: every message's UIDL and size.
2. One batched store query (:meth:`MessageStore.known_uidls`): which UIDLs are
   on record at this account or in a legacy GDBM import, and at what size.
3. A UIDL on record with the size the server lists is skipped: no RETR. A UIDL
   on record only at other sizes is a server that reused (or repeated) a UIDL
   for other content: it is downloaded, and when the content is indeed new it
   is recorded as a new location of a different message and counted
   (``uidl_reused``), never skipped silently. The check relies on the exact
   sizes RFC 1939 asks for (Dovecot gives them); a reused UIDL whose new
   content has exactly the old size is not detected.
4. ``RETR`` the rest (``--limit`` caps how many), committed in batches.
5. ``delete_after = "stored"``: only after the last commit of the run has
   returned, ``DELE`` every listed message whose UIDL and size are durable in
   the store, then ``QUIT`` (the server deletes only on QUIT). Any failure
   before that closes the connection without QUIT, so nothing is deleted; a
   message stored by a run that died before its DELE is deleted by the next.

UIDLs imported from the legacy GDBM store (``mailledger import gdbm``) count as
known: they are not downloaded again. They are deleted on the server
(``delete_after = "stored"``) only when the stored size equals the listed one.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import logging
import poplib
import socket
import ssl
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pipeline.config import Account, resolve_secret, tls_context
from pipeline.ingest import Incoming, Ingest
from pipeline.progress import NO_PROGRESS, Progress, counted
from pipeline.reconcile import not_on_server
from pipeline.reports import AccountReport, FolderReport, SyncOptions
from pipeline.store import MessageStore
from stores.errors import MailledgerError, SourceError, TerminalSourceError, TransientSourceError

__all__ = [
    "FOLDER",
    "Pop3Entry",
    "Pop3FolderReport",
    "Pop3Plan",
    "Pop3Source",
    "plan_pop3",
    "sync_pop3_account",
    "trim_terminator",
]

log = logging.getLogger("mailledger.pop3")

FOLDER = "INBOX"
_LINE_LIMIT = 64 << 20  # poplib's 2048-byte line limit is too small for real mail
_NET_ERRORS = (OSError, socket.timeout, ssl.SSLError, EOFError)


@dataclass(frozen=True)
class Pop3Entry:
    """One message of the maildrop as UIDL and LIST show it."""

    number: int
    uidl: str
    size: int


class _Retr:
    """RETR that keeps the server's bytes exactly (line endings included)."""

    file: Any

    def retr_bytes(self, which: int) -> bytes:
        assert isinstance(self, poplib.POP3)
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


class _Client(_Retr, poplib.POP3):
    pass


class _ClientSSL(_Retr, poplib.POP3_SSL):
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
        try:
            if a.auth == "xoauth2":
                token = f"user={a.username}\x01auth=Bearer {self._secret}\x01\x01"
                self.conn._shortcmd("AUTH XOAUTH2 " + base64.b64encode(token.encode()).decode())
            else:
                self.conn.user(a.username)
                self.conn.pass_(self._secret)
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


# -- the report -----------------------------------------------------------------


@dataclass
class Pop3FolderReport(FolderReport):
    """A POP3 mailbox's report: no cursor (``cursor=-``), UIDL counts instead.

    ``server_messages``: listed by the server; ``skipped``: their UIDLs already
    on record; ``new``: taken this run; ``uidl_reused``: taken because the size
    differed, and the content was indeed other than what that UIDL had;
    ``size_mismatch``: taken because the size differed, but the content was the
    one on record; ``deleted``: removed on the server (``delete_after``).
    """

    server_messages: int = 0
    skipped: int = 0
    uidl_reused: int = 0
    size_mismatch: int = 0
    deleted: int = 0
    would_delete: int | None = None
    failed_uidls: list[str] = field(default_factory=list)

    def line(self, account: str) -> str:
        text = (
            f"{self.mode} {account} {self.folder}: cursor=- uidls={self.server_messages}"
            f" skipped={self.skipped} new={self.new} bodies={self.bodies} errors={self.errors}"
        )
        for key in ("uidl_reused", "size_mismatch", "vanished", "deleted"):
            if getattr(self, key):
                text += f" {key}={getattr(self, key)}"
        if self.failed_uidls:
            text += " failed_uidls=" + ",".join(self.failed_uidls[:20])
        if self.would_fetch is not None:
            text += f" dry-run would_fetch={self.would_fetch}"
            if self.would_delete:
                text += f" would_delete={self.would_delete}"
        if self.error:
            text += f" ERROR: {self.error}"
        return text


# -- one account ----------------------------------------------------------------


class _Pop3Sync:
    def __init__(
        self,
        store: MessageStore,
        src: Pop3Source,
        account: Account,
        opts: SyncOptions,
        report: AccountReport,
        emit: Callable[[str], None],
        progress: Progress = NO_PROGRESS,
    ) -> None:
        self.store = store
        self.progress = progress  # messages downloaded
        self.src = src
        self.account = account
        self.opts = opts
        self.report = report
        self.emit = emit

    def run(self) -> Pop3FolderReport:
        fr = Pop3FolderReport(folder=FOLDER, mode="delta")
        self.report.folders[FOLDER] = fr
        try:
            self._run(fr)
        except (MailledgerError, OSError) as exc:
            fr.error = str(exc)
            self.report.folder_errors += 1
        return fr

    def _has_history(self) -> bool:
        """Has this account ever recorded a message (else this run is its first contact)?"""
        table = self.store.query(
            "SELECT 1 AS x FROM locations WHERE source = ? LIMIT 1", [self.account.name]
        )
        return table.num_rows > 0

    def _run(self, fr: Pop3FolderReport) -> None:
        name = self.account.name
        entries = self.src.listing()
        fr.server_messages = len(entries)
        if not self._has_history():
            fr.mode = "full"
        elif self.opts.reconcile:
            fr.mode = "reconcile"
        elif self.opts.mode_label:
            fr.mode = self.opts.mode_label
        known = self.store.known_uidls(name, [e.uidl for e in entries])
        plan = plan_pop3(entries, known)
        take = plan.take if self.opts.limit is None else plan.take[: self.opts.limit]
        fr.skipped = len(plan.skip)
        fr.new = len(take)
        delete = self.account.delete_after == "stored"
        if self.opts.reconcile:
            self._reconcile(entries, fr)
        if not self.opts.apply:
            fr.would_fetch = len(take)
            fr.would_delete = len(plan.deletable) + len(take) if delete else 0
            self.src.quit()
            return

        ingest = Ingest(self.store, name, batch_size=100, batch_bytes=8 << 20, network=True)
        fetched: list[tuple[Pop3Entry, str]] = []
        self.progress.start(len(take), f"{name} {FOLDER}")
        try:
            for e in counted(take, self.progress):  # (RETR: a message at a time)
                try:
                    raw = self.src.retr(e.number)
                except TransientSourceError:
                    raise
                except SourceError as exc:  # -ERR for this message: the session goes on
                    log.warning("%s: RETR uidl=%s failed: %s", name, e.uidl, exc)
                    ingest.error(f"{name} {FOLDER} uidl={e.uidl}", f"RETR failed: {exc}")
                    fr.failed_uidls.append(e.uidl)
                    continue
                raw = trim_terminator(raw, e.size)
                fr.bytes_fetched += len(raw)
                ingest.offer(Incoming(raw=raw, folder=FOLDER, uidl=e.uidl))
                fetched.append((e, hashlib.sha256(raw).hexdigest()))
            ingest.flush()
        except BaseException:
            # Keep what was downloaded; delete nothing (no DELE was sent, and the
            # connection is dropped without QUIT).
            try:
                ingest.flush()
            except Exception as exc:
                log.warning("%s: could not store the messages fetched so far: %s", name, exc)
            raise
        finally:
            self.progress.close()
            c = ingest.counts
            fr.bodies, fr.known, fr.errors = c.bodies_fetched, c.known_skipped, c.errors
            self.report.counts.add(c)

        for e, sha in fetched:
            shas = plan.suspect.get(e.uidl)
            if shas is None:
                continue
            if sha in shas:
                fr.size_mismatch += 1
            else:
                fr.uidl_reused += 1
        if fr.uidl_reused:
            self.emit(
                f"WARNING {name} {FOLDER}: {fr.uidl_reused} UIDL(s) reused by the server"
                " for other content: recorded as new locations"
            )

        if delete:
            # Every message here is durable: skipped ones were on record before this
            # run, fetched ones in a commit that has returned (ingest.flush above).
            durable = sorted(plan.deletable + [e for e, _ in fetched], key=lambda e: e.number)
            marked = 0
            try:
                for e in durable:
                    self.src.dele(e.number)
                    marked += 1
            except TransientSourceError:
                raise  # connection gone: nothing is deleted
            except SourceError as exc:
                fr.error = f"DELE failed ({exc}); {marked} of {len(durable)} deleted"
                self.report.folder_errors += 1
            self.src.quit()
            fr.deleted = marked
        else:
            self.src.quit()

    def _reconcile(self, entries: Sequence[Pop3Entry], fr: Pop3FolderReport) -> None:
        """Record the UIDLs on record here that the server no longer lists."""
        rows = self.store.query(
            "SELECT DISTINCT folder, uidl, message_id FROM locations WHERE source = ?"
            " AND folder = ? AND NOT vanished AND uidl IS NOT NULL ORDER BY uidl",
            [self.account.name, FOLDER],
        ).to_pylist()
        gone = not_on_server(
            self.store,
            self.account.name,
            rows,
            {e.uidl for e in entries},
            key="uidl",
            reason="reconcile: not on the POP3 server",
            apply=self.opts.apply,
        )
        fr.vanished += len(gone)


def sync_pop3_account(
    store: MessageStore | None,
    account: Account,
    env: Mapping[str, str],
    opts: SyncOptions,
    *,
    emit: Callable[[str], None],
    source_factory: Callable[[Account, str], Pop3Source],
    progress: Progress = NO_PROGRESS,
) -> AccountReport:
    """Sync one POP3 account; every failure is confined to its report."""
    ar = AccountReport(name=account.name)
    try:
        secret = resolve_secret(account, env)
        with source_factory(account, secret) as src:
            if opts.measure:
                count, size = src.stat()
                emit(f"measure {account.name} {FOLDER}: messages={count} bytes={size}")
                ar.folders[FOLDER] = Pop3FolderReport(
                    folder=FOLDER, mode="measure", would_fetch=count, server_messages=count
                )
                src.quit()
                return ar
            assert store is not None
            fr = _Pop3Sync(store, src, account, opts, ar, emit, progress).run()
            emit(fr.line(account.name))
    except MailledgerError as exc:
        ar.error = str(exc)
        emit(f"error {account.name}: {exc}")
    return ar

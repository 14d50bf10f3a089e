"""The IMAP socket shell: one connection for one account, moving UIDs,
envelopes and bodies; knows nothing of the store, and reads no answer itself:
``imap.response`` reads LIST and FETCH from the bytes imaplib hands over, and
what imapclient made of EXAMINE and STATUS; SEARCH is imapclient's.

Read-only always: folders are opened with EXAMINE and bodies fetched with
``BODY.PEEK[]``, so a sync never sets ``\\Seen``. Every call that fails on the
wire raises ``TransientSourceError`` (retry next run) or
``TerminalSourceError`` (credentials, a folder that is gone).
"""

from __future__ import annotations

import contextlib
import imaplib
import logging
import socket
import ssl
from collections.abc import Callable, Iterator, Sequence
from datetime import date, datetime
from typing import Any, TypeVar

from imapclient import IMAPClient
from imapclient.exceptions import IMAPClientError, LoginError, ProtocolError
from imapclient.imapclient import join_message_ids, seq_to_parenstr_upper

from pipeline.config import Account
from pipeline.sources.imap.response import (
    BODY_ASK,
    ENVELOPE_ASK,
    Envelope,
    FolderInfo,
    FolderState,
    folder_infos,
    folder_state,
    read_bodies,
    read_envelopes,
    read_flags,
    status_counts,
)
from stores.errors import SourceError, TerminalSourceError, TransientSourceError

__all__ = ["ImapSource"]

_T = TypeVar("_T")
_NET_ERRORS = (OSError, socket.timeout, ssl.SSLError, imaplib.IMAP4.abort, EOFError)


class ImapSource:
    """One IMAP connection for one account."""

    def __init__(self, account: Account, secret: str, *, timeout: float | None = None) -> None:
        """``timeout``: seconds a connect or one read may take (default: the
        account's ``timeout``); a server that stalls longer fails the call."""
        self.account = account
        self._secret = secret
        self.timeout = timeout if timeout is not None else account.timeout
        self.client: IMAPClient | None = None
        # INTERNALDATE of bodies fetched with ``dates=True``, by UID
        self.internal_dates: dict[int, datetime | None] = {}

    # -- connection -------------------------------------------------------------
    def connect(self) -> None:
        acct = self.account
        ctx = ssl.create_default_context(cafile=acct.ca_file) if acct.tls != "none" else None
        try:
            client = IMAPClient(
                acct.host,
                port=acct.port,
                ssl=acct.tls == "implicit",
                ssl_context=ctx,
                timeout=self.timeout,
            )
            if acct.tls == "starttls":
                client.starttls(ctx)
            if acct.auth == "xoauth2":
                client.oauth2_login(acct.username, self._secret)
            else:
                client.login(acct.username, self._secret)
        except LoginError as exc:
            raise TerminalSourceError(f"{acct.name}: login refused for {acct.username}") from exc
        except ssl.SSLCertVerificationError as exc:
            raise TerminalSourceError(f"{acct.name}: TLS certificate rejected: {exc}") from exc
        except (*_NET_ERRORS, IMAPClientError) as exc:
            raise TransientSourceError(
                f"{acct.name}: cannot connect to {acct.host}:{acct.port}: {exc}"
            ) from exc
        # imapclient sets imaplib's debug level to 5, so imaplib formats the repr of
        # every literal and every answer list (each message body, twice) for a log
        # that is almost never on: 0.6 s of CPU per 5,000 messages fetched. Only
        # when that logger would print does the level stay.
        if not logging.getLogger("imapclient.imaplib").isEnabledFor(logging.DEBUG):
            client._imap.debug = 0
        self.client = client

    def close(self) -> None:
        if self.client is not None:
            with contextlib.suppress(Exception):  # the connection is going away anyway
                self.client.logout()
            self.client = None

    @property
    def connected(self) -> bool:
        return self.client is not None

    def ensure_connected(self) -> None:
        """Connect again if a network error dropped the connection."""
        if self.client is None:
            self.connect()

    def _drop(self) -> None:
        """Forget a connection a network error broke, without a LOGOUT.

        After a timeout Python's socket file refuses every later read ("cannot
        read from timed out object"), after a cut or an answer that does not
        parse the stream is gone or out of step: kept, it would fail every later
        folder of the run. Dropped, the next folder connects again
        (``ensure_connected``), and a LOGOUT never waits out another timeout.
        """
        if self.client is not None:
            with contextlib.suppress(Exception):
                self.client.shutdown()
            self.client = None

    def __enter__(self) -> ImapSource:
        if self.client is None:  # (a connection the idle sync opened is kept)
            self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def _c(self) -> IMAPClient:
        if self.client is None:
            raise TransientSourceError(f"{self.account.name}: not connected")
        return self.client

    def _call(self, what: str, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        try:
            return fn(*args, **kwargs)
        except (*_NET_ERRORS,) as exc:
            self._drop()
            raise TransientSourceError(f"{self.account.name}: {what}: {exc}") from exc
        except ProtocolError as exc:  # an answer that does not parse: out of step too
            self._drop()
            raise TransientSourceError(f"{self.account.name}: {what}: {exc}") from exc
        except IMAPClientError as exc:
            raise SourceError(f"{self.account.name}: {what}: {exc}") from exc

    # -- folders ----------------------------------------------------------------
    def list_folders(self) -> list[FolderInfo]:
        """Every folder LIST shows, in the server's order."""
        return self._call("LIST", lambda: folder_infos(self._untagged("LIST", '""', '"*"')))

    def examine(self, folder: str) -> FolderState:
        """Open ``folder`` read-only (EXAMINE)."""
        info = self._call(f"EXAMINE {folder}", self._c.select_folder, folder, readonly=True)
        state = folder_state(info)
        if state is None:
            raise SourceError(f"{self.account.name}: EXAMINE {folder}: no UIDVALIDITY")
        return state

    def status(self, folder: str) -> dict[str, int]:
        """STATUS (MESSAGES UIDNEXT UIDVALIDITY) without opening the folder."""
        what = ["MESSAGES", "UIDNEXT", "UIDVALIDITY"]
        return status_counts(self._call(f"STATUS {folder}", self._c.folder_status, folder, what))

    def highest_uid(self) -> int:
        """The highest UID in the examined folder (0 when empty)."""
        uids = self._call("UID SEARCH ALL", self._c.search, ["ALL"])
        return max(uids) if uids else 0

    # -- UIDs -------------------------------------------------------------------
    def uids_above(self, last_uid: int) -> list[int]:
        """UIDs strictly above ``last_uid``, ascending.

        ``UID n:*`` returns the highest message when n is past the end, so the
        answer is filtered here: an idle folder gives an empty list.
        """
        found = self._call(
            f"UID SEARCH UID {last_uid + 1}:*", self._c.search, ["UID", f"{last_uid + 1}:*"]
        )
        return sorted(u for u in found if u > last_uid)

    def uids_since(self, day: date) -> list[int]:
        """UIDs whose INTERNALDATE is on or after ``day`` (server side SINCE)."""
        return sorted(self._call("UID SEARCH SINCE", self._c.search, ["SINCE", day]))

    def all_uids(self) -> list[int]:
        """Every UID of the examined folder, ascending."""
        return sorted(self._call("UID SEARCH ALL", self._c.search, ["ALL"]))

    # -- envelopes and bodies ----------------------------------------------------
    def envelopes(self, uids: Sequence[int], chunk: int = 500) -> Iterator[Envelope]:
        """Message-ID, size, INTERNALDATE and flags of each UID still present (no body)."""
        for i in range(0, len(uids), chunk):
            part = list(uids[i : i + chunk])
            raw = self.fetch_raw(part, ENVELOPE_ASK, what="envelopes")
            got = self._call("UID FETCH envelopes", read_envelopes, raw)
            # (a UID not answered was expunged meanwhile: the caller counts it as vanished)
            yield from (got[uid] for uid in part if uid in got)

    def flags(self, uids: Sequence[int], chunk: int = 2000) -> dict[int, tuple[str, ...]]:
        """The flags of each UID still present (``FETCH FLAGS``: a few bytes each),
        in the log's spelling. Read only: FETCH FLAGS sets nothing."""
        out: dict[int, tuple[str, ...]] = {}
        for i in range(0, len(uids), chunk):
            part = list(uids[i : i + chunk])
            raw = self.fetch_raw(part, ("UID", "FLAGS"), what="FLAGS")
            got = self._call("UID FETCH FLAGS", read_flags, raw)
            out.update((uid, got[uid]) for uid in part if uid in got)
        return out

    def bodies(self, uids: Sequence[int], *, dates: bool = False) -> dict[int, bytes]:
        """Raw bytes of each UID still present, by ``BODY.PEEK[]`` (never sets \\Seen).

        ``dates``: also ask for INTERNALDATE, kept in ``internal_dates`` (for bodies
        fetched without an envelope first)."""
        if not uids:
            return {}
        items = [BODY_ASK, "INTERNALDATE"] if dates else [BODY_ASK]
        raw = self.fetch_raw(uids, items, what=BODY_ASK)
        got = self._call(f"UID FETCH {BODY_ASK}", read_bodies, raw)
        out = {}
        for uid in uids:  # (not an unsolicited answer for another message)
            if uid in got:
                out[uid], idate = got[uid]
                if dates:
                    self.internal_dates[uid] = idate
        return out

    def fetch_raw(self, uids: Sequence[int], items: Sequence[str], *, what: str) -> list[Any]:
        """The untagged answer to ``UID FETCH uids (items)`` as imaplib hands it
        over, unread (``imap.response`` reads it); ``what`` names it in errors.

        The calls ``IMAPClient.fetch`` makes before it parses: its lexer reads a
        character at a time, and the common shape of a body's answer is read 17
        times faster without it (``response.bodies_fast``)."""

        def fetch() -> list[Any]:
            imap = self._c._imap
            tag = imap._command("UID", "FETCH", join_message_ids(list(uids)),
                                seq_to_parenstr_upper(list(items)))  # fmt: skip
            typ, data = imap._command_complete("FETCH", tag)
            self._c._checkok("fetch", typ, data)
            return imap._untagged_response(typ, data, "FETCH")[1]  # type: ignore[no-any-return]

        return self._call(f"UID FETCH {what}", fetch)

    def _untagged(self, command: str, *args: str) -> list[Any]:
        """The untagged answer to a simple ``command`` as imaplib hands it over."""
        typ, data = self._c._imap._simple_command(command, *args)
        self._c._checkok(command, typ, data)
        return self._c._imap._untagged_response(typ, data, command)[1]  # type: ignore[no-any-return]

    # -- watching ---------------------------------------------------------------
    def can_idle(self) -> bool:
        return bool(self._call("CAPABILITY", self._c.has_capability, "IDLE"))

    def idle_wait(self, folder: str, seconds: float, *, reopen: bool = True) -> bool:
        """IDLE on ``folder`` until something changes or ``seconds`` pass; True on change."""
        if reopen:
            self.examine(folder)
        self._call("IDLE", self._c.idle)
        try:
            responses = self._call("IDLE", self._c.idle_check, timeout=seconds)
        finally:
            self._call("DONE", self._c.idle_done)
        return bool(responses)

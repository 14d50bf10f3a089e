"""IMAP transport: moves UIDs, envelopes and bodies; knows nothing of the store.

Read-only always: folders are opened with EXAMINE and bodies fetched with
``BODY.PEEK[]``, so a sync never sets ``\\Seen``. Every call that fails on the
wire raises ``TransientSourceError`` (retry next run) or
``TerminalSourceError`` (credentials, a folder that is gone).
"""

from __future__ import annotations

import contextlib
import functools
import imaplib
import logging
import re
import socket
import ssl
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from imapclient import IMAPClient
from imapclient.datetime_util import parse_to_datetime
from imapclient.exceptions import IMAPClientError, LoginError, ProtocolError
from imapclient.imapclient import join_message_ids, seq_to_parenstr_upper
from imapclient.response_parser import parse_fetch_response

from pipeline.config import Account
from projections.normalize import normalize_msgid
from stores.errors import SourceError, TerminalSourceError, TransientSourceError

__all__ = [
    "DEFAULT_EXCLUDED",
    "Envelope",
    "FolderInfo",
    "FolderState",
    "ImapSource",
    "fetch_item_key",
    "fetch_items",
    "gone_folders",
    "missing_attributes",
    "missing_folders",
    "select_folders",
]

# SPECIAL-USE folders a sync leaves alone unless the config names them.
DEFAULT_EXCLUDED = frozenset({"\\Junk", "\\Trash", "\\Drafts"})

_NET_ERRORS = (OSError, socket.timeout, ssl.SSLError, imaplib.IMAP4.abort, EOFError)


# -- FETCH data items, as servers echo them ------------------------------------------

_WS = re.compile(rb"\s+")
_QUOTED = re.compile(rb'"((?:[^"\\]|\\.)*)"')
_ESCAPED = re.compile(rb"\\(.)")
_ORIGIN_0 = re.compile(rb"<0>\Z")
# RFC 3501 6.4.5: "functionally equivalent" spellings of the same data
_SYNONYMS = {b"RFC822": b"BODY[]", b"RFC822.HEADER": b"BODY[HEADER]", b"RFC822.TEXT": b"BODY[TEXT]"}


@functools.lru_cache(maxsize=512)
def fetch_item_key(name: bytes | str) -> bytes:
    """The one spelling of a FETCH data item's name, for asking and for looking up.

    RFC 3501 lets a server echo an item in its own way: Courier answers
    ``BODY.PEEK[HEADER.FIELDS (MESSAGE-ID)]`` under
    ``BODY[HEADER.FIELDS ("MESSAGE-ID")]``; others change the case or the
    spacing, or answer ``BODY[]`` as ``BODY[]<0>``. Looked up by the spelling
    asked for, such an answer is never found (and its Message-ID taken as
    missing: every known body downloaded again). Both sides go through this:
    upper case, ``.PEEK`` dropped (a server echoes ``BODY[...]``), header-field
    names unquoted, runs of whitespace one space and none inside brackets or
    parentheses, an origin ``<0>`` dropped (the whole body from its first
    octet), and ``RFC822``/``RFC822.HEADER``/``RFC822.TEXT`` as their
    ``BODY[...]`` equivalents. Cached: an answer repeats a handful of names."""
    raw = name.encode("ascii", "replace") if isinstance(name, str) else bytes(name)
    key = _WS.sub(b" ", raw.strip()).upper()
    key = _QUOTED.sub(lambda m: _ESCAPED.sub(rb"\1", m[1]), key)
    for opener in (b"(", b"["):
        key = key.replace(opener + b" ", opener)
    for closer in (b")", b"]"):
        key = key.replace(b" " + closer, closer)
    key = key.replace(b".PEEK[", b"[", 1)
    key = _ORIGIN_0.sub(b"", key)
    return _SYNONYMS.get(key, key)


def fetch_items(data: Mapping[bytes, Any]) -> dict[bytes, Any]:
    """One message's parsed FETCH data keyed by ``fetch_item_key``, so that an item
    is found however the server spelled it."""
    return {fetch_item_key(k): v for k, v in data.items()}


# What ``envelopes`` and ``bodies`` ask for, and the key their answers have.
_MSGID_ASK = "BODY.PEEK[HEADER.FIELDS (MESSAGE-ID)]"
_MSGID_FIELD = fetch_item_key(_MSGID_ASK)
_BODY_ASK = "BODY.PEEK[]"
_BODY = fetch_item_key(_BODY_ASK)
_INTERNALDATE = fetch_item_key("INTERNALDATE")
_SIZE = fetch_item_key("RFC822.SIZE")


@dataclass(frozen=True)
class FolderInfo:
    """A folder as LIST shows it: its name (decoded) and attributes."""

    name: str
    attributes: frozenset[str]
    delimiter: str | None

    @property
    def selectable(self) -> bool:
        return not ({"\\Noselect", "\\NonExistent"} & self.attributes)


@dataclass(frozen=True)
class FolderState:
    """What EXAMINE told us: UIDVALIDITY, UIDNEXT (None if the server did not say), EXISTS."""

    uidvalidity: int
    uidnext: int | None
    exists: int


@dataclass(frozen=True)
class Envelope:
    """What a fetcher learns before deciding to download a body."""

    uid: int
    size: int
    message_id: str | None
    internal_date: datetime | None


def select_folders(
    folders: Sequence[FolderInfo], wanted: Sequence[str], exclude: Sequence[str] = ()
) -> list[FolderInfo]:
    """The folders an account's scope names, in server order, each once.

    An entry with a leading backslash names a SPECIAL-USE attribute (``\\All``
    finds Gmail's ``[Gmail]/Wszystkie`` whatever the UI language), ``*`` every
    selectable folder, any other entry a folder name (``INBOX``
    case-insensitively). Junk, Trash and Drafts are left out unless an entry
    names them; ``exclude`` removes more.

    A folder named by its name is always taken, whatever its SPECIAL-USE: the
    user asked for that very folder (``folders = ["Trash"]`` on a server that
    marks it ``\\Trash``), so only an ``exclude`` entry naming it by name
    leaves it out. Attribute exclusions, the default ones included, apply to
    folders picked up by an attribute or by ``*``.
    """
    wanted_attrs = {w.lower() for w in wanted if w.startswith("\\")}
    wanted_names = {w for w in wanted if not w.startswith("\\") and w != "*"}
    every = "*" in wanted
    excl_attrs = {e.lower() for e in exclude if e.startswith("\\")}
    excl_names = {e for e in exclude if not e.startswith("\\")}
    default_excl = {a.lower() for a in DEFAULT_EXCLUDED}
    out: list[FolderInfo] = []
    for f in folders:
        if not f.selectable:
            continue
        attrs = {a.lower() for a in f.attributes}
        by_name = _named(f.name, wanted_names)
        by_attr = bool(attrs & wanted_attrs)
        if not (by_name or by_attr or every):
            continue
        if _named(f.name, excl_names):
            continue
        if not by_name:
            if attrs & excl_attrs:
                continue
            defaulted = attrs & default_excl
            if defaulted and not (defaulted & wanted_attrs):
                continue
        out.append(f)
    return out


def _named(name: str, names: set[str]) -> bool:
    """Whether ``names`` holds the folder name ``name`` (``INBOX`` in any case)."""
    return name in names or (name.upper() == "INBOX" and any(n.upper() == "INBOX" for n in names))


def missing_folders(folders: Sequence[FolderInfo], wanted: Sequence[str]) -> list[str]:
    """The folder names in ``wanted`` (not ``\\Attributes``, not ``*``) that the
    server does not list as selectable: deleted, renamed or mistyped."""
    names = {f.name for f in folders if f.selectable}
    has_inbox = any(n.upper() == "INBOX" for n in names)
    return [
        w
        for w in wanted
        if not w.startswith("\\")
        and w != "*"
        and w not in names
        and not (w.upper() == "INBOX" and has_inbox)
    ]


def missing_attributes(folders: Sequence[FolderInfo], wanted: Sequence[str]) -> list[str]:
    """The SPECIAL-USE attributes in ``wanted`` that no selectable folder carries
    (a server without that folder, or without SPECIAL-USE at all): an entry
    that takes nothing, reported like a missing folder name, never dropped."""
    held = {a.lower() for f in folders if f.selectable for a in f.attributes}
    return [w for w in wanted if w.startswith("\\") and w.lower() not in held]


def gone_folders(folders: Sequence[FolderInfo], known: Sequence[str]) -> list[str]:
    """Of the ``known`` folder names (those the store holds a cursor for), the
    ones LIST no longer shows as selectable: renamed or deleted on the server.

    ``folders`` must be a LIST that was read in full. A LIST without INBOX,
    which every IMAP server has, is no such answer: nothing is taken for gone.
    """
    names = {f.name for f in folders if f.selectable}
    if not any(n.upper() == "INBOX" for n in names):
        return []
    return [k for k in known if not _named(k, names)]


def _header_text(raw: bytes) -> str:
    """Header bytes decoded as ``pipeline.parse`` decodes them (UTF-8, else
    latin-1), so an envelope's Message-ID equals the one the body parses to."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def _utc(idate: Any) -> datetime | None:
    """An INTERNALDATE as an aware UTC datetime (None when the server sent none)."""
    if not isinstance(idate, datetime):
        return None
    return idate.astimezone(UTC) if idate.tzinfo else idate.replace(tzinfo=UTC)


# A body's FETCH answer in the shape servers send it (Dovecot, Gmail, Fastmail,
# Cyrus): ``N (UID u INTERNALDATE "d" BODY[] {size}``, the literal, then ``)``.
_BODY_HEAD = re.compile(rb"\d+ \((.*)BODY\[\] \{(\d+)\}", re.DOTALL)
_BODY_ITEM = re.compile(rb'UID (\d+) |INTERNALDATE "([^"]*)" ')


def bodies_fast(data: list[Any]) -> list[tuple[int, bytes, bytes | None]] | None:
    """(UID, body, INTERNALDATE text) of each answer in imaplib's ``data``, when every
    answer has the common shape above; None otherwise (anything else: unsolicited
    FLAGS, other items, another order), and imapclient's parser reads it all.

    imapclient's lexer reads the answer a character at a time in Python: 39 us a
    message against 2.3 us here (a 100-message answer of the sync bench).
    """
    out: list[tuple[int, bytes, bytes | None]] = []
    n = len(data)
    i = 0
    while i < n:
        item = data[i]
        if not (isinstance(item, tuple) and len(item) == 2 and i + 1 < n and data[i + 1] == b")"):
            return None
        head, body = item
        m = _BODY_HEAD.fullmatch(head)
        if m is None or not isinstance(body, bytes) or int(m[2]) != len(body):
            return None
        uid: int | None = None
        date: bytes | None = None
        items, pos = m[1], 0
        while pos < len(items):
            im = _BODY_ITEM.match(items, pos)
            if im is None:
                return None
            if im[1] is not None:
                uid = int(im[1])
            else:
                date = im[2]
            pos = im.end()
        if uid is None:
            return None
        out.append((uid, body, date))
        i += 2
    return out


def _internaldate(text: bytes | None) -> datetime | None:
    """An INTERNALDATE with its offset, as imapclient reads one (None if it does not)."""
    if text is None:
        return None
    try:
        return parse_to_datetime(text, normalise=False)
    except ValueError:
        return None


def _str(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


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
        # INTERNALDATEs with their offset: imapclient's default turns them into naive
        # local time, which ``_utc`` would then take for UTC (wrong by the machine's
        # offset anywhere but UTC)
        client.normalise_times = False
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
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def _c(self) -> IMAPClient:
        if self.client is None:
            raise TransientSourceError(f"{self.account.name}: not connected")
        return self.client

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
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
        rows = self._call("LIST", self._c.list_folders)
        return [
            FolderInfo(
                name=_str(name),
                attributes=frozenset(_str(a) for a in flags),
                delimiter=_str(delim) if delim else None,
            )
            for flags, delim, name in rows
        ]

    def examine(self, folder: str) -> FolderState:
        """Open ``folder`` read-only (EXAMINE)."""
        info = self._call(f"EXAMINE {folder}", self._c.select_folder, folder, readonly=True)
        uidvalidity = info.get(b"UIDVALIDITY")
        if uidvalidity is None:
            raise SourceError(f"{self.account.name}: EXAMINE {folder}: no UIDVALIDITY")
        uidnext = info.get(b"UIDNEXT")
        return FolderState(
            int(uidvalidity), int(uidnext) if uidnext else None, int(info.get(b"EXISTS", 0))
        )

    def status(self, folder: str) -> dict[str, int]:
        """STATUS (MESSAGES UIDNEXT UIDVALIDITY) without opening the folder."""
        what = ["MESSAGES", "UIDNEXT", "UIDVALIDITY"]
        st = self._call(f"STATUS {folder}", self._c.folder_status, folder, what)
        return {_str(k).lower(): int(v) for k, v in st.items()}

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

    def uids_since(self, day: Any) -> list[int]:
        """UIDs whose INTERNALDATE is on or after ``day`` (server side SINCE)."""
        return sorted(self._call("UID SEARCH SINCE", self._c.search, ["SINCE", day]))

    def all_uids(self) -> list[int]:
        return sorted(self._call("UID SEARCH ALL", self._c.search, ["ALL"]))

    # -- envelopes and bodies ----------------------------------------------------
    def envelopes(self, uids: Sequence[int], chunk: int = 500) -> Iterator[Envelope]:
        """Message-ID, size and INTERNALDATE of each UID still present (no body)."""
        for i in range(0, len(uids), chunk):
            part = list(uids[i : i + chunk])
            resp = self._call(
                "UID FETCH envelopes",
                self._c.fetch,
                part,
                ["UID", "RFC822.SIZE", "INTERNALDATE", _MSGID_ASK],
            )
            for uid in part:
                got = resp.get(uid)
                if got is None:
                    continue  # expunged meanwhile: the caller counts it as vanished
                data = fetch_items(got)
                header = data.get(_MSGID_FIELD) or b""
                mid = None
                if header:
                    mid = normalize_msgid(_header_text(bytes(header)).partition(":")[2])
                idate = _utc(data.get(_INTERNALDATE))
                yield Envelope(uid, int(data.get(_SIZE) or 0), mid, idate)

    def bodies(self, uids: Sequence[int], *, dates: bool = False) -> dict[int, bytes]:
        """Raw bytes of each UID still present, by ``BODY.PEEK[]`` (never sets \\Seen).

        ``dates``: also ask for INTERNALDATE, kept in ``internal_dates`` (for bodies
        fetched without an envelope first)."""
        items = [_BODY_ASK, "INTERNALDATE"] if dates else [_BODY_ASK]
        if not uids:
            return {}
        raw = self._call("UID FETCH BODY.PEEK[]", self._fetch_raw, uids, items)
        wanted = set(uids)
        out = {}
        fast = bodies_fast(raw)
        if fast is not None:
            for uid, body, idate in fast:
                if uid in wanted:  # (not an unsolicited answer for another message)
                    out[uid] = body
                    if dates:
                        self.internal_dates[uid] = _utc(_internaldate(idate))
            return out
        resp = self._call("UID FETCH BODY.PEEK[]", parse_fetch_response, raw, False, True)
        for uid in uids:
            got = resp.get(uid)
            data = fetch_items(got) if got is not None else {}
            if data.get(_BODY) is not None:  # (NIL: no body to give)
                out[uid] = bytes(data[_BODY])
                if dates:
                    self.internal_dates[uid] = _utc(data.get(_INTERNALDATE))
        return out

    def _fetch_raw(self, uids: Sequence[int], items: list[str]) -> list[Any]:
        """imaplib's answer to a UID FETCH, unparsed: what ``IMAPClient.fetch`` does
        before it parses (the same private calls), so ``bodies`` can take the
        common shape of the answer without imapclient's lexer."""
        imap = self._c._imap
        tag = imap._command("UID", "FETCH", join_message_ids(list(uids)),
                            seq_to_parenstr_upper(items))  # fmt: skip
        typ, data = imap._command_complete("FETCH", tag)
        self._c._checkok("fetch", typ, data)
        return imap._untagged_response(typ, data, "FETCH")[1]  # type: ignore[no-any-return]

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

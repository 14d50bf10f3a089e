"""Raw message bytes -> the facts the log records about a message.

Pure and total: ``parse_message`` never raises on bytes, whatever they hold.
What it cannot make sense of it records as a short reason in ``defects`` and
carries on with what it has, so one broken message never stops an import.

Only the header block is read. It is split by hand at the first blank line
(CRLF or LF), unfolded and decoded here rather than by ``email.parser`` with
``policy.default``, which would cost about 15x more per message for facts the
archive does not need. Normalization rules come from
``projections.normalize``, the one copy shared with the query side.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import datetime
from email.header import decode_header, make_header

from projections.normalize import (
    addresses,
    msgid_list,
    normalize_list_id,
    normalize_msgid,
    read_date,
)

__all__ = ["ParsedMessage", "parse_message", "synthetic_message_id"]


@dataclass(frozen=True)
class ParsedMessage:
    """What one raw message says about itself, ready for a ``message-seen`` event."""

    message_id: str
    """Normalized (no angle brackets, case kept); synthetic when missing or unusable."""
    synthetic_id: bool
    sha256: str
    """Hex digest of the raw bytes exactly as given."""
    size: int
    headers: tuple[tuple[str, str], ...]
    """Every header in order: original name, unfolded RFC 2047-decoded value."""
    date_utc: datetime | None
    date_offset_min: int | None
    from_addr: str | None
    """First addr-spec of the first From header, lowercased (None when it holds a
    blank or a control character: debris of a broken header, not an address)."""
    to_addrs: tuple[str, ...]
    """Addr-specs of every To then every Cc header, lowercased, deduplicated;
    those with a blank or a control character are left out."""
    in_reply_to: str | None
    """First Message-ID of the first In-Reply-To header."""
    references: tuple[str, ...]
    """Message-IDs of every References header, in order, deduplicated."""
    list_id: str | None
    subject: str | None
    """Decoded first Subject, not normalized (the index does that)."""
    defects: tuple[str, ...]


def synthetic_message_id(sha256_hex: str) -> str:
    """Return the stable Message-ID given to a message without a usable one.

    Derived from the content hash only, so the same bytes always get the same
    id, wherever and however often they are seen.
    """
    return f"sha256-{sha256_hex[:40]}@synthetic.mailledger"


_BOM = b"\xef\xbb\xbf"
# A field name is printable ASCII without ':'; obsolete syntax allows blanks
# before the colon ("Subject : x").
_FIELD = re.compile(rb"([\x21-\x39\x3b-\x7e]+)[ \t]*:")
# The start of an encoded word as email.header's pattern sees it. A start with
# no "?=" after it makes decode_header scan to the end of the value, once per
# start: those starts times that length bound its cost.
_ENCODED_WORD_START = re.compile(r"=\?[^?]*\?[qQbB]\?")
_MAX_DECODE_LEN = 64 * 1024
_MAX_DECODE_SCAN = 2_000_000
_VALUE_BLANKS = " \t\r\n"


def parse_message(raw: bytes) -> ParsedMessage:
    """Return the facts of one raw RFC 5322 message; never raises on bytes.

    ``sha256`` and ``size`` describe ``raw`` exactly as given; a leading UTF-8
    BOM is skipped before the headers are read. Problems are listed in
    ``defects`` (``no-message-id``, ``bad-date``, ``date-repaired:year``,
    ``bad-encoding:Subject``...).
    ``bytearray`` and ``memoryview`` are accepted too.
    """
    if isinstance(raw, bytearray | memoryview):
        raw = bytes(raw)
    digest = hashlib.sha256(raw).hexdigest()
    try:
        return _parse(raw, digest)
    except Exception as exc:  # totality: a parser bug must not stop an import
        return ParsedMessage(
            message_id=synthetic_message_id(digest),
            synthetic_id=True,
            sha256=digest,
            size=len(raw),
            headers=(),
            date_utc=None,
            date_offset_min=None,
            from_addr=None,
            to_addrs=(),
            in_reply_to=None,
            references=(),
            list_id=None,
            subject=None,
            defects=(f"parse-error:{type(exc).__name__}",),
        )


def _parse(raw: bytes, digest: str) -> ParsedMessage:
    defects: list[str] = []
    data = raw[len(_BOM) :] if raw.startswith(_BOM) else raw
    raw_headers = _read_header_fields(data, defects)
    if not raw_headers:
        defects.append("no-header-block")

    headers: list[tuple[str, str]] = []
    first: dict[str, str] = {}
    every: dict[str, list[str]] = {}
    subject: str | None = None
    for name, value in raw_headers:
        key = name.lower()
        # (most values hold no encoded word: no call for them)
        decoded = _decode_rfc2047(value, name, defects) if "=?" in value else value
        headers.append((name, decoded))
        if key in first:
            every[key].append(value)
        else:
            first[key] = value
            every[key] = [value]
            if key == "subject":
                subject = decoded

    message_id, synthetic = _message_id(first.get("message-id"), digest, defects)
    date_utc, offset = _date(first.get("date"), defects)

    from_value = first.get("from")
    from_list = addresses([from_value]) if from_value is not None else []
    # only the first address can be the sender (the query side takes the first
    # too): when it is unusable there is none, the second is never promoted
    from_list = _indexable(from_list[:1], "From", defects)
    to_list = _indexable(addresses([*every.get("to", ()), *every.get("cc", ())]), "To", defects)
    irt = msgid_list(first.get("in-reply-to"))
    references: dict[str, None] = {}
    for value in every.get("references", ()):
        references.update(dict.fromkeys(msgid_list(value)))

    return ParsedMessage(
        message_id=message_id,
        synthetic_id=synthetic,
        sha256=digest,
        size=len(raw),
        headers=tuple(headers),
        date_utc=date_utc,
        date_offset_min=offset,
        from_addr=from_list[0] if from_list else None,
        to_addrs=tuple(to_list),
        in_reply_to=irt[0] if irt else None,
        references=tuple(references),
        list_id=normalize_list_id(first.get("list-id")),
        subject=subject,
        defects=tuple(dict.fromkeys(defects)),
    )


def _read_header_fields(data: bytes, defects: list[str]) -> list[tuple[str, str]]:
    """Return ``(name, value)`` for each header line, unfolded, 8-bit decoded.

    The block ends at the first empty line, or at the first line that is
    neither a field nor a continuation (as ``email.parser`` does, recorded as
    ``non-header-line``). An mbox ``From `` first line is skipped. Values are
    decoded as UTF-8, else latin-1 (``non-utf8:Name``), and stripped.
    """
    if data.startswith((b"\n", b"\r\n")):
        return []
    end = _header_end(data)
    block = data if end < 0 else data[:end]
    # unfolded: a line break before a blank goes (bytes.replace, at memchr speed,
    # rather than a regex for "\n(?=[ \t])" tried at every position: a third of
    # this function's time). One pass each, as the regex's: a "\n" the first
    # removes leaves its blank, so the second never meets a break it made.
    unfolded = block.replace(b"\r\n", b"\n").replace(b"\n ", b" ").replace(b"\n\t", b"\t")
    lines = unfolded.split(b"\n")
    fields: list[tuple[str, str]] = []
    for index, line in enumerate(lines):
        if not line:
            continue
        match = _FIELD.match(line)
        if match is None:
            if index == 0 and line.startswith(b"From "):
                continue
            if line[:1] in (b" ", b"\t"):
                defects.append("leading-continuation")
                continue
            defects.append("non-header-line")
            break
        name = match.group(1).decode("ascii")
        value_bytes = line[match.end() :]
        try:
            value = value_bytes.decode("utf-8")
        except UnicodeDecodeError:
            value = value_bytes.decode("latin-1")
            defects.append(f"non-utf8:{name}")
        fields.append((name, value.strip(_VALUE_BLANKS)))
    return fields


_FIRST_LOOK = 2048  # bytes searched first for the blank line: most header blocks end within


def _header_end(data: bytes) -> int:
    """Where the header block of ``data`` ends: the first ``"\\n\\n"`` or
    ``"\\n\\r\\n"``, whichever comes first (-1: neither, the whole message is
    headers).

    bytes.find, not a regex for ``"\\r?\\n\\r?\\n"``, which would try every
    position in Python's engine; still, at about 3 ns a byte, a search for the form
    a message does not use crossed its whole body (a quarter of a parse, for the
    11 KB messages of the bench corpus). Both are
    looked for in a window that grows fourfold until one is found: the first match
    found in ``data[:end]`` is the first in ``data``, and a match of the other
    form past the window comes after it.
    """
    end = _FIRST_LOOK
    while True:
        lf = data.find(b"\n\n", 0, end)
        crlf = data.find(b"\n\r\n", 0, end)
        if lf >= 0:
            return lf if crlf < 0 or lf < crlf else crlf
        if crlf >= 0:
            return crlf
        if end >= len(data):
            return -1
        end *= 4


# No addr-spec holds a blank (any Unicode space: NBSP, U+3000, U+2028, the
# ASCII separators \x1c-\x1f) or a control character; what the address parser
# returns with one inside is debris of a broken header (an unbalanced quote,
# a NUL, a folded local part), never an address anyone can query.
_NOT_IN_ADDRESS = re.compile(r"[\s\x00-\x1f\x7f]")


def _indexable(found: list[str], name: str, defects: list[str]) -> list[str]:
    """The addresses of ``found`` an index may hold; a dropped one is a
    ``bad-address:Name`` defect (the header itself stays in ``headers``)."""
    kept = [a for a in found if not _NOT_IN_ADDRESS.search(a)]
    if len(kept) != len(found):
        defects.append(f"bad-address:{name}")
    return kept


def _decode_rfc2047(value: str, name: str, defects: list[str]) -> str:
    """Return ``value`` with its RFC 2047 encoded words decoded.

    A bad encoding or unknown charset gives the raw value back with a
    ``bad-encoding:Name`` defect, and so does a word that decodes to text no
    UTF-8 can hold (UTF-7 and UTF-16 words can give lone surrogates, which
    would make the whole batch unwritable). A value whose decoding could take
    time out of proportion to its length is left raw too
    (``undecoded-long-header:Name``).
    """
    if "=?" not in value:
        return value
    if not _cheap_to_decode(value):
        defects.append(f"undecoded-long-header:{name}")
        return value
    try:
        decoded = str(make_header(decode_header(value)))
        decoded.encode("utf-8")
    except Exception:
        defects.append(f"bad-encoding:{name}")
        return value
    return decoded


def _cheap_to_decode(value: str) -> bool:
    """Whether ``decode_header`` runs in time proportional to ``value``."""
    if len(value) > _MAX_DECODE_LEN:
        return False
    cost = 0
    for line in value.splitlines():  # decode_header works line by line too
        tail = line[line.rfind("?=") + 2 :] if "?=" in line else line
        cost += len(tail) * sum(1 for _ in _ENCODED_WORD_START.finditer(tail))
    return cost <= _MAX_DECODE_SCAN


def _message_id(value: str | None, digest: str, defects: list[str]) -> tuple[str, bool]:
    """Return ``(message_id, synthetic)`` for the first Message-ID header value."""
    if value is None:
        defects.append("no-message-id")
        return synthetic_message_id(digest), True
    message_id = normalize_msgid(value)
    if message_id is None:
        defects.append("bad-message-id")
        return synthetic_message_id(digest), True
    return message_id, False


def _date(value: str | None, defects: list[str]) -> tuple[datetime | None, int | None]:
    """Return the parsed first Date header, noting ``no-date`` / ``bad-date``, and
    ``date-repaired:...`` for each assumption its reading took (RFC 5322 §4.3)."""
    if value is None:
        defects.append("no-date")
        return None, None
    reading = read_date(value)
    if reading.utc is None:
        defects.append("bad-date")
    defects.extend(reading.repairs)
    return reading.utc, reading.offset_min

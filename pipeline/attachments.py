"""A message's MIME parts as files: one part's decoded bytes (``show --part N``),
and every attachment saved into a directory (``show --save-attachments DIR``),
what ``notmuch show --part`` and ``mu extract`` give.

Parts are numbered as notmuch numbers them: a depth-first walk of the MIME tree,
the message's root part 1 (the multipart/mixed of a message with attachments,
the text of a message of one part), the parts of a message/rfc822 part after it,
its own root part first; 0 is the whole message. ``show`` lists each
attachment's number (``pipeline.render``: the same walk).
"""

from __future__ import annotations

import email
import email.policy
import io
import mimetypes
import os
from dataclasses import dataclass
from email.generator import BytesGenerator
from email.message import Message
from pathlib import Path
from typing import Any

from pipeline.filenames import create_new, safe_filename
from pipeline.render import message_text
from stores.errors import MailledgerError, NotFoundError

__all__ = ["SavedAttachment", "part_bytes", "save_attachments"]


def _parts(raw: bytes) -> list[Message]:
    """The parts of ``raw`` in notmuch's order (index 0: part 1)."""
    msg = email.message_from_bytes(raw, policy=email.policy.compat32)
    return list(msg.walk())


def _linesep(raw: bytes) -> str:
    end = raw.find(b"\n")
    return "\r\n" if end > 0 and raw[end - 1 : end] == b"\r" else "\n"


def part_bytes(raw: bytes, number: int, *, message_id: str = "") -> bytes:
    """The bytes of part ``number`` of the message ``raw``: 0 the whole message as
    stored; a leaf part its content with the transfer encoding undone (base64,
    quoted-printable), the charset untouched (the bytes a saved file holds); a
    message/rfc822 part the message it holds, and a multipart its ``Content-``
    headers and its body (the boundaries and the parts), as the parser reads them
    back (line ends as the message has them).
    ``NotFoundError`` names the parts there are when there is no such part."""
    if number == 0:
        return raw
    parts = _parts(raw)
    if not 1 <= number <= len(parts):
        raise NotFoundError(
            f"<{message_id}> has no part {number} (its parts: 0 to {len(parts)};"
            " `mailledger show` lists the attachments' numbers)"
        )
    part = parts[number - 1]
    if not part.is_multipart():
        payload = part.get_payload(decode=True)
        return payload if isinstance(payload, bytes) else b""
    if part.get_content_type() == "message/rfc822":
        inner = part.get_payload()
        if isinstance(inner, list) and inner and isinstance(inner[0], Message):
            part = inner[0]
    else:  # a multipart: its MIME headers (the root's From, To... are the message's)
        for name in {k.lower() for k in part.keys()}:  # noqa: SIM118 (a Message: keys())
            if not name.startswith("content-"):
                del part[name]
    out = io.BytesIO()
    policy = email.policy.compat32.clone(linesep=_linesep(raw), max_line_length=None)
    BytesGenerator(out, mangle_from_=False, policy=policy).flatten(part)
    return out.getvalue()


@dataclass(frozen=True)
class SavedAttachment:
    """One attachment saved: where from (message, part, the name the mail gave),
    where to (the file name used in the directory), what it is."""

    message_id: str
    part: int
    filename: str | None
    saved_as: str
    content_type: str
    size: int

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _fallback(part: int, content_type: str) -> str:
    """The name of an attachment the mail names not (or names nothing usable):
    ``part-N`` and the extension its MIME type usually has."""
    ext = mimetypes.guess_extension(content_type, strict=False) or ".bin"
    return f"part-{part}{ext}"


def save_attachments(raw: bytes, directory: Path, *, message_id: str) -> list[SavedAttachment]:
    """Save each attachment ``show`` lists of the message ``raw`` (each part that is
    not the body: named or inline ones, those of an attached message too) into
    ``directory``, its decoded bytes, under its name made safe
    (``pipeline.filenames``): never outside ``directory``, never over a file,
    never through a link there, ``name (1).ext`` when the name is taken. Returns
    what was saved, in part order. A failure while writing removes that file and
    raises ``MailledgerError`` naming it; the files saved before it stay."""
    listed = message_text(raw).attachments
    if not listed:
        return []
    parts = _parts(raw)
    saved: list[SavedAttachment] = []
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for a in listed:
            payload = parts[a.part - 1].get_payload(decode=True) if a.part <= len(parts) else None
            data = payload if isinstance(payload, bytes) else b""
            name = safe_filename(a.filename, fallback=_fallback(a.part, a.content_type))
            used, fh = create_new(dir_fd, name)
            try:
                with fh:
                    fh.write(data)
            except OSError as exc:
                os.unlink(used, dir_fd=dir_fd)
                raise MailledgerError(
                    f"{directory / used}: not written: {exc.strerror or exc}"
                ) from None
            saved.append(
                SavedAttachment(message_id, a.part, a.filename, used, a.content_type, len(data))
            )
    finally:
        os.close(dir_fd)
    return saved

"""What a reader calls an attachment: the one rule ``has:attachment``, the
full-text extraction, ``show``'s list of attachments (and whatever saves them)
read a MIME part by.

- A detached signature (``application/pgp-signature``, the S/MIME
  ``pkcs7-signature``) is no attachment: it signs the message, nobody opens it.
  Nor is the envelope of a whole encrypted or S/MIME-signed message
  (``application/pkcs7-mime`` ``smime.p7m``, the ``application/pgp-encrypted``
  version part): it is the message itself, not something that came with it.
- A text part, or a forwarded message, marked ``inline`` is body text, a file
  name or not: mail clients show it in the message (a text/html report pasted
  inline), so it is searched as the body is, and shown with it.
- Any other part with a file name, or marked ``attachment``, is an attachment.

Pure: the part's content type, file name and disposition in, a verdict out.
"""

from __future__ import annotations

__all__ = ["ENVELOPES", "SIGNATURES", "is_attachment", "is_inline_text", "is_signature"]

SIGNATURES = frozenset(
    {
        "application/pgp-signature",
        "application/pkcs7-signature",
        "application/x-pkcs7-signature",
    }
)
"""The content types of a detached signature (RFC 3156, RFC 8551)."""

ENVELOPES = frozenset(
    {"application/pkcs7-mime", "application/x-pkcs7-mime", "application/pgp-encrypted"}
)
"""The content types of an encrypted (or S/MIME-signed) message's own envelope."""


def is_signature(content_type: str) -> bool:
    """Whether a part of ``content_type`` (lower case) is a detached signature."""
    return content_type in SIGNATURES


def is_inline_text(content_type: str, disposition: str) -> bool:
    """Whether a part is a text part or a forwarded message marked ``inline``
    (``disposition`` lower case, "" when none): body text even when it has a
    file name."""
    readable = content_type.startswith("text/") or content_type == "message/rfc822"
    return readable and disposition == "inline"


def is_attachment(content_type: str, filename: str | None, disposition: str) -> bool:
    """Whether a (non-multipart) part is an attachment as a reader means it: it
    has a file name or is marked ``attachment``, and is neither a detached
    signature, an encrypted message's envelope nor inline text
    (``content_type`` and ``disposition`` lower case, ``disposition`` "" when
    none)."""
    if is_signature(content_type) or content_type in ENVELOPES:
        return False
    if is_inline_text(content_type, disposition):
        return False
    return bool(filename) or disposition == "attachment"

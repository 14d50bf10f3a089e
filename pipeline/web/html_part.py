"""A message's HTML part as a page may show it: sanitized by nh3 (Ammonia), remote
content dropped, served from its own URL under a strict Content-Security-Policy
and embedded in an ``<iframe sandbox>`` (no scripts, no same origin).

Three walls, each enough alone against a script: nh3 keeps no ``<script>``, no
event attribute, no ``javascript:`` URL; the CSP allows no script source at all;
the sandbox runs none. Remote content (a tracking pixel, a remote stylesheet) is
dropped by the filter below and refused by the CSP (``img-src data:``) besides.
"""

from __future__ import annotations

import base64
import email
import email.policy
import re
from email.message import EmailMessage
from urllib.parse import unquote

import nh3

__all__ = ["FRAME_CSP", "has_html", "html_of", "sanitized"]

# the HTML part's own policy: inline styles and data: images only (a cid: image of
# the message is made one); sandboxed even
# when opened on its own (the CSP sandbox directive); framed by our pages only
FRAME_CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; font-src 'none';"
    " form-action 'none'; base-uri 'none'; frame-ancestors 'self'; sandbox"
)
_LINK_SCHEMES = {"http", "https", "mailto"}
# the layout of a newsletter: inline styles kept for these properties only (none
# that can name a URL: no background-image, no list-style-image, no content)
_STYLE_PROPERTIES = {
    "background-color", "border", "border-collapse", "border-color", "border-radius",
    "border-style", "border-width", "color", "display", "font", "font-family", "font-size",
    "font-style", "font-weight", "height", "line-height", "margin", "margin-bottom",
    "margin-left", "margin-right", "margin-top", "max-width", "padding", "padding-bottom",
    "padding-left", "padding-right", "padding-top", "text-align", "text-decoration",
    "vertical-align", "white-space", "width",
}  # fmt: skip
_URL_ATTRIBUTES = {"src", "srcset", "background", "poster", "lowsrc", "dynsrc"}


def _keep(tag: str, attribute: str, value: str) -> str | None:
    """nh3's attribute filter: a resource URL stays only when it is ``data:`` (an
    image in the message itself); everything that would fetch from the network goes."""
    if attribute in _URL_ATTRIBUTES:
        return value if value.strip().lower().startswith("data:image/") else None
    return value


def sanitized(html: str) -> str:
    """``html`` with nothing that runs and nothing that fetches: Ammonia's safe
    tags and attributes, inline styles of layout properties only (none names a
    URL), links given ``rel="noopener noreferrer"``, images kept only as ``data:``
    URLs; a script's or a style sheet's text dropped with it."""
    attributes = {tag: set(names) for tag, names in nh3.ALLOWED_ATTRIBUTES.items()}
    attributes["*"] = attributes.get("*", set()) | {"style"}
    return nh3.clean(
        html,
        attributes=attributes,
        filter_style_properties=_STYLE_PROPERTIES,
        clean_content_tags={"script", "style"},
        url_schemes=_LINK_SCHEMES | {"data"},
        link_rel="noopener noreferrer",
        attribute_filter=_keep,
        strip_comments=True,
    )


def _html_part(msg: EmailMessage) -> tuple[EmailMessage, bytes] | None:
    """The text/html body part of ``msg`` and its decoded bytes; None without one."""
    try:
        part = msg.get_body(preferencelist=("html",))
    except Exception:  # (a broken multipart: no HTML to show)
        return None
    if part is None:
        return None
    payload = part.get_payload(decode=True)
    if not isinstance(payload, bytes):
        return None
    assert isinstance(part, EmailMessage)
    return part, payload


def has_html(msg: EmailMessage) -> bool:
    """Whether ``html_of`` finds an HTML body in the (parsed) message: the message
    page's frame, without decoding its images."""
    return _html_part(msg) is not None


def html_of(raw: bytes) -> str | None:
    """The text/html body of the message ``raw``, charset decoded, its ``cid:``
    images (parts of the message itself) made ``data:`` URLs; None without one."""
    msg = email.message_from_bytes(raw, policy=email.policy.default)
    assert isinstance(msg, EmailMessage)
    found = _html_part(msg)
    if found is None:
        return None
    part, payload = found
    charset = part.get_content_charset() or "utf-8"
    try:
        html = payload.decode(charset, "replace")
    except LookupError:
        html = payload.decode("utf-8", "replace")
    images = _inline_images(msg)
    if not images:
        return html
    return _CID.sub(lambda m: images.get(unquote(m.group(1)).strip("<>"), m.group(0)), html)


_CID = re.compile(r"cid:([^\s\"'>)]+)", re.IGNORECASE)
_INLINE_MAX = 2 << 20  # bytes: a larger inline image is not shown (it stays a download)


def _inline_images(msg: EmailMessage) -> dict[str, str]:
    """Content-ID -> ``data:`` URL of each image part of ``msg`` that has one."""
    found: dict[str, str] = {}
    for part in msg.walk():
        cid = str(part.get("Content-ID") or "").strip().strip("<>")
        if not cid or part.get_content_maintype() != "image":
            continue
        data = part.get_payload(decode=True)
        if isinstance(data, bytes) and len(data) <= _INLINE_MAX:
            encoded = base64.b64encode(data).decode("ascii")
            found[cid] = f"data:{part.get_content_type()};base64,{encoded}"
    return found

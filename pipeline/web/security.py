"""What a server must have, whatever it serves: loopback by default, a token for
any other address, the ``Host`` header checked (DNS rebinding), no state changed
by GET (a POST only where ``serve --sync`` offers one, ``pipeline.web.writes``,
which checks its CSRF token), and the headers every response carries.

The token: a file of mode 0600 (``--token-file``) holding one line. A request
carries it as ``Authorization: Bearer TOKEN``, or as the ``mailledger_token``
cookie that visiting ``/login?token=TOKEN`` once sets (HttpOnly, SameSite=Strict:
a browser sends it to this server only, never from another site's page).
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path

from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pipeline.web.escape import routing_path
from stores.errors import UsageError

__all__ = [
    "COOKIE",
    "LOOPBACK_NAMES",
    "Guard",
    "allowed_hosts_for",
    "is_loopback",
    "read_token_file",
]

COOKIE = "mailledger_token"
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
_SAFE_METHODS = frozenset({"GET", "HEAD"})
# every response; a page (HTML) also gets PAGE_CSP unless it set its own (the HTML part)
_ALWAYS = (
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
)
PAGE_CSP = (
    "default-src 'none'; style-src 'self'; img-src 'self'; frame-src 'self';"
    " form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)


def is_loopback(host: str) -> bool:
    """True for an address only this machine reaches (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def allowed_hosts_for(host: str, port: int) -> tuple[str, ...]:
    """The ``Host`` values a server listening on ``host:port`` answers: the loopback
    names with that port, and the listen address itself."""
    shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
    names = dict.fromkeys([*LOOPBACK_NAMES, shown])
    return tuple(f"{name}:{port}" for name in names)


def read_token_file(path: Path) -> str:
    """The token in ``path``: refused (UsageError, exit 2) when the file is readable
    by others than its owner, empty, or missing."""
    try:
        mode = os.stat(path).st_mode
        text = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise UsageError(f"--token-file {path}: {exc.strerror or exc}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise UsageError(
            f"--token-file {path}: readable by others (mode {stat.S_IMODE(mode):o}): chmod 600 it"
        )
    if len(text) < 16:
        raise UsageError(f"--token-file {path}: the token must be at least 16 characters")
    return text


class Guard:
    """ASGI middleware: the Host check, the token, the method rule and the headers."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        hosts: Sequence[str],
        token: str | None,
        posts: frozenset[str] = frozenset(),
    ) -> None:
        self.app = app
        self.hosts = frozenset(h.lower() for h in hosts)
        self.token = token
        self.posts = posts  # the paths that take a POST (``serve --sync``: writes.POSTS)

    def _host_ok(self, host: str) -> bool:
        host = host.lower()
        name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        return host in self.hosts or name in self.hosts

    def _token_ok(self, headers: Headers) -> bool:
        if self.token is None:
            return True
        given = ""
        auth = headers.get("authorization", "")
        if auth.lower().startswith("bearer "):
            given = auth[7:].strip()
        else:
            for piece in headers.get("cookie", "").split(";"):
                name, _, value = piece.strip().partition("=")
                if name == COOKIE:
                    given = value
        return hmac.compare_digest(given.encode(), self.token.encode())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        raw_path = scope.get("raw_path")
        if raw_path:  # (routed on the bytes sent, whatever the server decoded)
            scope = {**scope, "path": routing_path(raw_path)}
        headers = Headers(scope=scope)
        refusal = self._refusal(scope, headers)
        if refusal is not None:
            await _with_headers(refusal)(scope, receive, send)
            return
        await _with_headers(self.app)(scope, receive, send)

    def _refusal(self, scope: Scope, headers: Headers) -> ASGIApp | None:
        if not self._host_ok(headers.get("host", "")):
            return PlainTextResponse(
                "400: this server does not answer for that Host (DNS rebinding is refused);"
                " use the address it listens on",
                status_code=400,
            )
        if scope["method"] not in _SAFE_METHODS and not (
            scope["method"] == "POST" and scope["path"] in self.posts
        ):
            # nothing else changes state, and GET never does (its CSRF token: writes.py)
            why = "this server is read-only" if not self.posts else "GET and HEAD only here"
            return PlainTextResponse(f"405: {why}", status_code=405)
        if scope["path"] == "/login" and self.token is not None:
            return _login(scope, self.token)
        if not self._token_ok(headers):
            return PlainTextResponse(
                "401: a token is needed: Authorization: Bearer TOKEN, or visit /login?token=TOKEN",
                status_code=401,
                headers={"www-authenticate": "Bearer"},
            )
        return None


def _login(scope: Scope, token: str) -> Response:
    """``/login?token=T``: the cookie set when T is the token, then the search page."""
    from urllib.parse import parse_qs

    given = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("token", [""])[0]
    if not hmac.compare_digest(given.encode(), token.encode()):
        return PlainTextResponse("401: wrong token", status_code=401)
    response = RedirectResponse("/search", status_code=303)
    response.set_cookie(COOKIE, token, httponly=True, samesite="strict", path="/")
    return response


def _with_headers(app: ASGIApp) -> ASGIApp:
    """``app`` whose responses carry ``_ALWAYS``, and the page CSP and
    ``X-Frame-Options: DENY`` unless the response set its own CSP."""

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                raw: list[tuple[bytes, bytes]] = list(message.get("headers", []))
                names = {k.lower() for k, _ in raw}
                extra: Iterable[tuple[bytes, bytes]] = _ALWAYS
                if b"content-security-policy" not in names:
                    extra = [
                        *extra,
                        (b"content-security-policy", PAGE_CSP.encode()),
                        (b"x-frame-options", b"DENY"),
                    ]
                message = {**message, "headers": raw + [h for h in extra if h[0] not in names]}
            await send(message)

        await app(scope, receive, sending)

    return wrapped

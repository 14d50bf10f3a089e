"""The app's one state change, offered only under ``serve --sync``: "sync now",
which asks the server's sync to run at once (``POST /api/v1/sync``, and the search
page's button, ``POST /sync``). GET changes nothing: ``GET /api/v1/sync`` only
hands an API client the CSRF token it must send.

Every POST carries a CSRF token: ``ISSUED.MAC``, the MAC an HMAC-SHA256 of the
time it was issued under a secret of the server's (made at its start, kept over
restarts of the web child), valid for a day. A page from this server holds it
(the form's hidden ``csrf`` field); another site's page cannot read it, so it
cannot make a browser send it (the ``SameSite=Strict`` token cookie alone would
not be enough: a same-site page could still post). A POST whose ``Origin`` is
another site's, or whose ``Sec-Fetch-Site`` says cross-site, is refused too.
A POST refused: 403; without ``--sync`` there is no POST at all (405, the guard)."""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlencode

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from pipeline.web.reads import json_bytes

__all__ = ["CSRF_FIELD", "CSRF_HEADER", "POSTS", "Csrf", "csrf_token", "write_routes"]

CSRF_FIELD = "csrf"  # the form's field
CSRF_HEADER = "x-csrf-token"  # an API client's header
POSTS = frozenset({"/api/v1/sync", "/sync"})  # the only paths a POST is taken on
_LIFETIME = 24 * 3600  # seconds a token is good for
_MOST_BODY = 4096  # bytes of a form read at most

SyncNow = Callable[[], dict[str, Any]]


class Csrf:
    """Tokens issued and checked under one secret."""

    def __init__(self, secret: bytes, clock: Callable[[], float] = time.time) -> None:
        self._secret = secret
        self._clock = clock

    def _mac(self, issued: str) -> str:
        return hmac.new(self._secret, f"csrf:{issued}".encode(), hashlib.sha256).hexdigest()

    def issue(self) -> str:
        """A token good for a day."""
        issued = str(int(self._clock()))
        return f"{issued}.{self._mac(issued)}"

    def valid(self, given: str) -> bool:
        """``given`` is a token of this secret, issued less than a day ago."""
        issued, dot, mac = given.partition(".")
        if not dot or not issued.isdigit() or not hmac.compare_digest(mac, self._mac(issued)):
            return False
        return 0 <= self._clock() - int(issued) <= _LIFETIME


def csrf_token(request: Request) -> str | None:
    """A token for a page's form, or None when the app offers no POST."""
    csrf: Csrf | None = request.app.state.csrf
    return csrf.issue() if csrf is not None and request.app.state.sync_now is not None else None


def _cross_site(request: Request) -> bool:
    """The browser says the POST comes from another site's page."""
    if request.headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
        return True
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        # (``null``: what a browser sends from a page under ``Referrer-Policy:
        # no-referrer``, as ours are; Sec-Fetch-Site and the token still decide)
        return False
    host = request.headers.get("host", "")
    return origin.lower() not in (f"http://{host}".lower(), f"https://{host}".lower())


def _refused(request: Request, given: str, api: bool) -> Response | None:
    csrf: Csrf = request.app.state.csrf
    why = None
    if _cross_site(request):
        why = "a POST from another site's page is refused"
    elif not csrf.valid(given):
        where = f"the {CSRF_HEADER} header" if api else "the form"
        why = f"no valid CSRF token in {where}: reload the page (GET /api/v1/sync gives one)"
    if why is None:
        return None
    if api:
        return Response(json_bytes({"error": why}), 403, media_type="application/json")
    return PlainTextResponse(f"403: {why}", status_code=403)


async def _ask(request: Request) -> dict[str, Any]:
    sync_now: SyncNow = request.app.state.sync_now
    answer: dict[str, Any] = await run_in_threadpool(sync_now)
    return answer


async def sync_api(request: Request) -> Response:
    """GET: the CSRF token (changes nothing); POST: ask the sync to run now, 202."""
    if request.method != "POST":
        body = {"csrf": request.app.state.csrf.issue(), "post": f"POST with {CSRF_HEADER}"}
        return Response(json_bytes(body), media_type="application/json")
    refusal = _refused(request, request.headers.get(CSRF_HEADER, ""), api=True)
    if refusal is not None:
        return refusal
    answer = await _ask(request)
    if not answer.get("ok"):
        error = {"error": str(answer.get("reason", "the sync could not be asked"))}
        return Response(json_bytes(error), 503, media_type="application/json")
    return Response(
        json_bytes({"sync": "asked", "pid": answer.get("pid")}),
        202,
        media_type="application/json",
    )


async def sync_form(request: Request) -> Response:
    """The search page's button: ask the sync, then the search page again (303)."""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > _MOST_BODY:
            return PlainTextResponse("413: a form of more than 4 KiB", status_code=413)
    form = parse_qs(body.decode("utf-8", "replace"))
    refusal = _refused(request, form.get(CSRF_FIELD, [""])[0], api=False)
    if refusal is not None:
        return refusal
    answer = await _ask(request)
    said = "asked" if answer.get("ok") else "failed"
    back = {"q": form.get("q", [""])[0], "sync": said}
    return RedirectResponse("/search?" + urlencode(back), status_code=303)


def write_routes() -> list[Route]:
    return [
        Route("/api/v1/sync", sync_api, methods=["GET", "HEAD", "POST"]),
        Route("/sync", sync_form, methods=["POST"]),
    ]

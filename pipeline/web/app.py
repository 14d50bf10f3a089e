"""``create_app``: the archive in a browser and its JSON API, one Starlette
application over one store, read-only but for ``serve --sync``'s "sync now";
what ``mailledger web`` runs (and ``serve --listen`` runs in its child)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response

from pipeline.web.api import api_routes
from pipeline.web.pages import page_routes, render, search_error
from pipeline.web.reads import Reads, json_bytes
from pipeline.web.security import LOOPBACK_NAMES, Guard
from pipeline.web.writes import POSTS, Csrf, SyncNow, write_routes
from stores.errors import MailledgerError, NotFoundError, UsageError

__all__ = ["create_app"]


def create_app(
    store_path: Path | str,
    *,
    token: str | None = None,
    allowed_hosts: Sequence[str] = LOOPBACK_NAMES,
    sync_now: SyncNow | None = None,
    csrf_secret: bytes | None = None,
) -> Starlette:
    """The web app over the store at ``store_path`` (which must exist: UsageError).

    ``token``: required of every request when given (``pipeline.web.security``);
    ``allowed_hosts``: the ``Host`` values answered, ``name`` (any port) or
    ``name:port`` (``security.allowed_hosts_for`` makes the list for a listen
    address); every other is a 400. ``sync_now``: ``serve --sync``'s "run the
    sync now" (``pipeline.web.writes``), the one POST the app then takes, with a
    CSRF token made under ``csrf_secret`` (default: one of this app's own); None:
    read-only, GET and HEAD only."""
    path = Path(store_path)
    if not (path / "log").is_dir():
        raise UsageError(f"{path}: no mailledger store there")
    reads = Reads(path)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            reads.close()

    writes = write_routes() if sync_now is not None else []
    posts = POSTS if sync_now is not None else frozenset()
    app = Starlette(
        routes=[*writes, *api_routes(), *page_routes()],
        middleware=[
            Middleware(Guard, hosts=allowed_hosts, token=token, posts=posts)  # type: ignore[arg-type]
        ],
        exception_handlers={
            UsageError: _usage_error,
            NotFoundError: _not_found,
            MailledgerError: _error,
        },
        lifespan=lifespan,
    )
    app.state.reads = reads
    app.state.sync_now = sync_now
    app.state.csrf = Csrf(csrf_secret or os.urandom(32)) if sync_now is not None else None
    return app


def _api(request: Request) -> bool:
    return request.url.path.startswith("/api/")


def _json_error(message: str, status: int) -> Response:
    return Response(json_bytes({"error": message}), status, media_type="application/json")


async def _usage_error(request: Request, exc: Exception) -> Response:
    """A bad query or parameter: 400 with the reason (the search page: with the
    language's help)."""
    if _api(request):
        return _json_error(str(exc), 400)
    if request.url.path == "/search":
        return search_error(request, str(exc))
    return render("error.html", 400, error=str(exc))


async def _not_found(request: Request, exc: Exception) -> Response:
    if _api(request):
        return _json_error(str(exc), 404)
    return render("error.html", 404, error=str(exc))


async def _error(request: Request, exc: Exception) -> Response:
    if _api(request):
        return _json_error(str(exc), 500)
    return render("error.html", 500, error=str(exc))

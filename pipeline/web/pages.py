"""The pages: a search (the search language plus form filters that compile to it
and stay in the URL), a message, a thread nested or flat, the HTML part alone
(for its sandboxed frame), downloads (an attachment, a thread's or a search's
mbox) and an Atom feed per search. Every byte of mail goes through the templates'
``mail`` filter (``escape.page_text``)."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response, StreamingResponse
from starlette.routing import Route

from pipeline.web.api import choice, int_param, raw
from pipeline.web.escape import content_disposition, id_path, page_text, segment
from pipeline.web.html_part import FRAME_CSP, has_html, html_of, sanitized
from pipeline.web.reads import Reads, locked_iter, search_plan
from pipeline.web.writes import csrf_token

__all__ = ["PAGE_SIZE", "compile_templates", "compose_query", "page_routes", "render"]

PAGE_SIZE = 50  # matches on a page, and entries in a feed
# the form's date presets, each a term of the search language
PRESETS = {"today": "date:today", "7d": "date:7d..", "30d": "date:30d..", "1y": "date:1y.."}
_FORM = ("q", "from", "to", "after", "before", "preset", "folder", "account", "attachment")
_FORM_SORTS = ("newest", "oldest", "relevance")
_FORM_OUTPUTS = ("summary", "threads")
_HELP = (
    "Terms: from: to: cc: subject: id: thread: list: date: size: folder: account: is: flag:"
    ' filename: body: has:attachment, bare words and "phrases"; and, or, not, -term,'
    " ( ). Dates: date:2024-06, date:2024-01..2024-06-30, date:2w.. (relative), today."
    ' Quote a value with spaces: subject:"live wire"; * matches every message.'
)


@functools.cache
def _templates() -> Any:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("pipeline.web", "templates"),
        autoescape=True,  # (every template, .html and .xml: nothing is raw by default)
        undefined=jinja2.StrictUndefined,
    )
    env.filters["mail"] = page_text
    env.filters["body"] = functools.partial(page_text, newlines=True)
    env.filters["idp"] = id_path
    return env


def compile_templates() -> None:
    """Compile every template now (a server that forks its web children after)."""
    env = _templates()
    for name in env.list_templates():
        env.get_template(name)


def render(name: str, status: int = 200, media_type: str = "text/html", **values: Any) -> Response:
    """The template ``name`` filled with ``values`` (escaped: autoescape)."""
    text = _templates().get_template(name).render(**values)
    return Response(text, status, media_type=media_type)


def _quoted(value: str) -> str:
    """``value`` as one quoted value of the search language (``\\`` escapes)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def compose_query(params: Any) -> str:
    """The search language query the form's fields say: ``q`` and, for each filter
    filled in, its term (``from:"..."``, ``date:A..B``, ``has:attachment``...)."""
    terms = [params.get("q", "").strip()]
    for field in ("from", "to", "folder", "account"):
        if value := params.get(field, "").strip():
            terms.append(f"{field}:{_quoted(value)}")
    after, before = params.get("after", "").strip(), params.get("before", "").strip()
    if after or before:
        terms.append(f"date:{_quoted(after) if after else ''}..{_quoted(before) if before else ''}")
    if preset := PRESETS.get(params.get("preset", "")):
        terms.append(preset)
    if params.get("attachment"):
        terms.append("has:attachment")
    return " ".join(t for t in terms if t)


def _reads(request: Request) -> Reads:
    reads: Reads = request.app.state.reads
    return reads


def _form(request: Request) -> dict[str, str]:
    return {k: request.query_params.get(k, "") for k in _FORM}


def search_page(request: Request) -> Response:
    form = _form(request)
    query = compose_query(form)
    values: dict[str, Any] = {"form": form, "query": query, "rows": None, "help": _HELP}
    values["sort"] = choice(request, "sort", _FORM_SORTS)
    values["output"] = out = choice(request, "output", _FORM_OUTPUTS)
    offset = int_param(request, "offset", 0)
    values["offset"] = offset
    values.update(_sync_values(request))
    if not query:
        return render("search.html", **values, error=None, links={})
    reads = _reads(request)
    plan = search_plan(query, reads.now())
    with reads.session() as store:
        table = store.search(plan, out, sort=values["sort"], limit=PAGE_SIZE + 1, offset=offset)  # type: ignore[arg-type]
    rows = table.to_pylist()
    kept = {k: v for k, v in form.items() if v} | {"sort": values["sort"], "output": out}
    links = {
        "mbox": "/search.mbox?" + urlencode({"q": query}),
        "atom": "/search.atom?" + urlencode({"q": query}),
    }
    if offset:
        links["prev"] = "/search?" + urlencode(kept | {"offset": max(0, offset - PAGE_SIZE)})
    if len(rows) > PAGE_SIZE:
        links["next"] = "/search?" + urlencode(kept | {"offset": offset + PAGE_SIZE})
    values["rows"] = rows[:PAGE_SIZE]
    return render("search.html", **values, error=None, links=links)


def search_error(request: Request, error: str) -> Response:
    """The search page again, the query kept, its mistake and the language's help: 400."""
    form = _form(request)
    values: dict[str, Any] = {"form": form, "query": compose_query(form), "rows": None}
    values.update(_sync_values(request))
    return render(
        "search.html", 400, **values, help=_HELP, error=error, links={}, sort="newest",
        output="summary",
        offset=0,
    )  # fmt: skip


def _sync_values(request: Request) -> dict[str, Any]:
    """The "sync now" button's CSRF token (None: no button, the app is read-only)
    and what the last press of it came to (``sync=asked|failed`` in the URL)."""
    said = request.query_params.get("sync")
    return {"csrf": csrf_token(request), "sync_said": said if said in ("asked", "failed") else None}


def message_page(request: Request) -> Response:
    from pipeline.render import message_text, parsed

    mid = segment(request, "mid")
    with _reads(request).session() as store:
        rec = store.get(mid)
        if rec is None:
            return _missing(mid)
        raw = store.blobs.get(rec["sha256"])  # (the record's blob: no second query)
    msg = parsed(raw)  # (once, for the text and the HTML part's frame)
    text = message_text(msg)
    wanted = ("from", "to", "cc", "date", "subject", "message-id")
    headers = [(n, v) for w in wanted for n, v in rec["headers"] if n.lower() == w]
    return render("message.html", rec=rec, headers=headers, text=text, has_html=has_html(msg))


def _missing(mid: str) -> Response:
    return render("missing.html", 404, what=mid)


def html_frame(request: Request) -> Response:
    """The message's HTML part, sanitized, under its own strict CSP: what the
    message page's sandboxed ``<iframe>`` shows."""
    mid = segment(request, "mid")
    with _reads(request).session() as store:
        rec = store.get(mid)
        raw = store.raw(rec["message_id"]) if rec is not None else None
    html = html_of(raw) if raw is not None else None
    if html is None:
        return Response("no HTML part", 404, media_type="text/plain")
    page = '<!doctype html><meta charset="utf-8">' + sanitized(html)
    return Response(
        page,
        media_type="text/html",
        headers={"content-security-policy": FRAME_CSP, "x-frame-options": "SAMEORIGIN"},
    )


def _flat(roots: list[Any]) -> list[Any]:
    """Every node of a tree, stored ones by date (undated after), ghosts last."""
    nodes, stack = [], list(roots)
    while stack:
        node = stack.pop()
        nodes.append(node)
        stack.extend(node.children)
    return sorted(nodes, key=lambda n: (n.missing, n.date_iso is None, n.date_iso or ""))


def thread_page(request: Request) -> Response:
    from stores.errors import NotFoundError

    mid = segment(request, "mid")
    view = choice(request, "view", ("nested", "flat"))
    try:
        with _reads(request).session() as store:
            roots = store.thread_tree(mid)
    except NotFoundError:
        return _missing(mid)
    return render("thread.html", mid=mid, roots=roots, view=view, flat=_flat(roots))


def _mbox(request: Request, query: str, name: str, *, gz: bool = False) -> Response:
    """The messages ``query`` finds as the mbox ``export`` writes, streamed
    (``gz``: gzip-compressed as it streams, a ``.mbox.gz`` download)."""
    from pipeline.export import mbox_stream

    reads = _reads(request)
    plan = search_plan(query, reads.now())
    chunks = locked_iter(reads, mbox_stream(reads.store, plan))
    fallback = "mail.mbox.gz" if gz else "mail.mbox"
    headers = {"content-disposition": content_disposition(name, fallback=fallback)}
    if gz:
        return StreamingResponse(_gzipped(chunks), media_type="application/gzip", headers=headers)
    return StreamingResponse(chunks, media_type="application/mbox", headers=headers)


def _gzipped(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """``chunks`` gzip-compressed, a piece at a time (memory follows a chunk)."""
    import zlib

    z = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)  # (16+: a gzip header)
    for chunk in chunks:
        if out := z.compress(chunk):
            yield out
    yield z.flush()


def search_mbox(request: Request) -> Response:
    return _mbox(request, request.query_params.get("q", ""), "search.mbox")


def thread_mbox(request: Request) -> Response:
    mid = segment(request, "mid")
    return _mbox(request, f"thread:{_quoted(mid)}", f"thread-{mid}.mbox")


def thread_mbox_gz(request: Request) -> Response:
    mid = segment(request, "mid")
    return _mbox(request, f"thread:{_quoted(mid)}", f"thread-{mid}.mbox.gz", gz=True)


def search_atom(request: Request) -> Response:
    query = request.query_params.get("q", "")
    reads = _reads(request)
    plan = search_plan(query, reads.now())
    with reads.session() as store:
        rows = store.search(plan, "summary", limit=PAGE_SIZE).to_pylist()
    base = str(request.base_url).rstrip("/")
    page = base + "/search?" + urlencode({"q": query})
    return render(
        "feed.xml", media_type="application/atom+xml", rows=rows, query=query, base=base,
        page=page, updated=(rows[0]["date_iso"] if rows else None) or "1970-01-01T00:00:00Z",
    )  # fmt: skip


def page_routes() -> list[Route]:
    return [
        Route("/", lambda _request: RedirectResponse("/search", status_code=303)),
        Route("/search", search_page),
        Route("/search.mbox", search_mbox),
        Route("/search.atom", search_atom),
        Route("/style.css", style),
        Route("/m/{mid}/html", html_frame),
        Route("/m/{mid}/raw", raw),
        Route("/m/{mid}", message_page),
        Route("/t/{mid}/mbox", thread_mbox),
        Route("/t/{mid}.mbox.gz", thread_mbox_gz),
        Route("/t/{mid}", thread_page),
    ]


def style(_request: Request) -> Response:
    return render("style.css", media_type="text/css")

"""The JSON API, version 1 (``/api/v1/...``): the answers of the command line's
``--json`` / ``--format json``, in the same shapes, for the same store.

``search`` = ``search --format json`` (``output=count``: ``{"count": N}``), a message =
``show --json``, a thread = ``thread --tree-json``, ``stats`` = ``stats --json``,
a cursor's log = ``cursor log --json``; ``raw`` and ``parts/N`` the bytes of
``show --raw`` and ``show --part N``; ``events?since=SEQ&limit=N`` the log itself
for downstream consumers: ``{"events": [...], "next": SEQ}``, ask again with
``since=next`` (``next`` equal to ``since``: nothing new yet).
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from pipeline.web.escape import content_disposition, segment
from pipeline.web.reads import Reads, json_bytes, search_plan
from stores.errors import UsageError

__all__ = ["EVENTS_LIMIT", "api_routes", "int_param"]

EVENTS_LIMIT = 1000  # events a page of the feed holds at most (and by default)
_OUTPUTS = ("summary", "threads", "messages", "count")
_SORTS = ("newest", "oldest", "relevance")


def _json(value: Any, status: int = 200) -> Response:
    return Response(json_bytes(value), status, media_type="application/json")


def int_param(request: Request, name: str, default: int | None, *, most: int | None = None) -> Any:
    """The query parameter ``name`` as a whole number >= 0 (UsageError: 400)."""
    text = request.query_params.get(name)
    if text is None or text == "":
        return default
    if not text.isdigit():
        raise UsageError(f"{name}: a whole number of 0 or more, not {text!r}")
    value = int(text)
    return min(value, most) if most is not None else value


def choice(request: Request, name: str, choices: tuple[str, ...]) -> str:
    value = request.query_params.get(name) or choices[0]
    if value not in choices:
        raise UsageError(f"{name}: one of {', '.join(choices)}, not {value!r}")
    return value


def _reads(request: Request) -> Reads:
    reads: Reads = request.app.state.reads
    return reads


def search(request: Request) -> Response:
    out = choice(request, "output", _OUTPUTS)
    sort = choice(request, "sort", _SORTS)
    limit, offset = int_param(request, "limit", None), int_param(request, "offset", 0)
    reads = _reads(request)
    plan = search_plan(request.query_params.get("q", ""), reads.now())
    with reads.session() as store:
        table = store.search(plan, out, sort=sort, limit=limit, offset=offset)  # type: ignore[arg-type]
    if out == "count":
        return _json({"count": table.column(0)[0].as_py()})
    if out == "messages":
        return _json(table.column("message_id").to_pylist())
    return _json(table.to_pylist())


def message(request: Request) -> Response:
    from pipeline.render import message_json

    mid = segment(request, "mid")
    with _reads(request).session() as store:
        rec = _record(store, mid)
        raw = store.blobs.get(rec["sha256"])  # (the record's blob: no second query)
    return _json(message_json(rec, raw))


def _record(store: Any, mid: str) -> dict[str, Any]:
    from stores.errors import NotFoundError

    rec: dict[str, Any] | None = store.get(mid)
    if rec is None:
        raise NotFoundError(f"no message {mid!r} in the store")
    return rec


def raw(request: Request) -> Response:
    mid = segment(request, "mid")
    with _reads(request).session() as store:
        data = store.raw(_record(store, mid)["message_id"])
    disposition = content_disposition(f"{mid}.eml", fallback="message.eml")
    return Response(data, media_type="message/rfc822", headers={"content-disposition": disposition})


def part(request: Request) -> Response:
    """One MIME part's decoded bytes, as a download named as the mail names it
    (made safe) and typed as ``application/octet-stream``: a browser never renders
    an attachment from mail in this origin."""
    from pipeline.attachments import part_bytes
    from pipeline.render import message_text

    mid, number = segment(request, "mid"), request.path_params["n"]
    with _reads(request).session() as store:
        rec = _record(store, mid)
        data = store.raw(rec["message_id"])
    body = part_bytes(data, number, message_id=rec["message_id"])
    name = next((a.filename for a in message_text(data).attachments if a.part == number), None)
    disposition = content_disposition(name, fallback=f"part-{number}.bin")
    return Response(
        body, media_type="application/octet-stream", headers={"content-disposition": disposition}
    )


def thread(request: Request) -> Response:
    with _reads(request).session() as store:
        roots = store.thread_tree(segment(request, "mid"))
    return _json([root.as_dict() for root in roots])


def stats(request: Request) -> Response:
    from pipeline.at_rest import quick_stats

    reads = _reads(request)
    found = quick_stats(reads.store.root)
    if found is None:
        with reads.session() as store:
            found = store.stats()
    return _json(found)


def cursor_log(request: Request) -> Response:
    account, folder = segment(request, "account"), segment(request, "folder")
    with _reads(request).session() as store:
        return _json(store.cursor_log(account, folder))


def events(request: Request) -> Response:
    """A page of the log after ``since``: at most ``limit`` events, in seq order,
    read from the files that hold them only."""
    from stores.events import SCHEMA

    since = int_param(request, "since", 0)
    limit = int_param(request, "limit", EVENTS_LIMIT, most=EVENTS_LIMIT)
    reads = _reads(request)
    rows: list[dict[str, Any]] = []
    with reads.lock:  # (the log's listing is the store's, shared with the other reads)
        log = reads.store.log
        last = min(log.last_seq(fresh=True), since + limit)
        if last > since:
            columns = [name for name in SCHEMA.names if name != "seq"]
            rows = log.read_at(range(since + 1, last + 1), columns).to_pylist()
    return _json({"events": rows, "next": max(since, last)})


def api_routes() -> list[Route]:
    """The routes of ``/api/v1``: a Message-ID, an account or a folder is one path
    segment, percent-encoded (``/`` as ``%2F``: ``escape.id_path``)."""
    base = "/api/v1"
    return [
        Route(f"{base}/search", search),
        Route(f"{base}/stats", stats),
        Route(f"{base}/events", events),
        Route(f"{base}/cursors/{{account}}/{{folder}}/log", cursor_log),
        Route(f"{base}/messages/{{mid}}/raw", raw),
        Route(f"{base}/messages/{{mid}}/parts/{{n:int}}", part),
        Route(f"{base}/messages/{{mid}}", message),
        Route(f"{base}/threads/{{mid}}", thread),
        # (the names issue 37 gave, beside the plural ones)
        Route(f"{base}/message/{{mid}}/raw", raw),
        Route(f"{base}/message/{{mid}}/parts/{{n:int}}", part),
        Route(f"{base}/message/{{mid}}", message),
        Route(f"{base}/thread/{{mid}}", thread),
    ]

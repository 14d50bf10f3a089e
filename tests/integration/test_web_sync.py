"""The web app's one state change, "sync now" (``serve --sync``): its POSTs carry a
CSRF token or are refused (403), GET changes nothing, and without ``--sync``
there is no POST at all. Starlette's TestClient over a real store in tmp_path;
``sync_now`` records the asks here (the server's socket and its sync child are
the subject of tests/integration/test_serve_sync.py, end to end)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from pipeline.store import MessageStore
from pipeline.web import create_app
from pipeline.web.writes import Csrf
from tests.integration.web_mail import fill

BASE = "http://127.0.0.1:8025"
SECRET = b"k" * 32


@pytest.fixture
def store_path(store: MessageStore) -> Path:
    fill(store)
    store.close()
    return store.root


class Asks:
    """The asks of the sync, as the server's socket would take them."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> dict[str, Any]:
        self.count += 1
        return {"ok": True, "pid": 4242}


@pytest.fixture
def asks() -> Asks:
    return Asks()


@pytest.fixture
def client(store_path: Path, asks: Asks) -> Iterator[TestClient]:
    app = create_app(store_path, sync_now=asks, csrf_secret=SECRET)
    with TestClient(app, base_url=BASE) as c:
        yield c


def _form_token(page: str) -> str:
    found = re.search(r'<form method="post" action="/sync" id="sync-now">\s*'
                      r'<input type="hidden" name="csrf" value="([^"]+)">', page)  # fmt: skip
    assert found, page
    return found[1]


def test_a_post_without_a_csrf_token_is_refused_and_with_one_asks_the_sync(
    client: TestClient, asks: Asks
) -> None:
    assert client.post("/api/v1/sync").status_code == 403
    bad = {"x-csrf-token": "1700000000.00ff"}
    refused = client.post("/api/v1/sync", headers=bad)
    assert refused.status_code == 403 and "CSRF" in refused.json()["error"]
    assert asks.count == 0
    token = client.get("/api/v1/sync").json()["csrf"]
    done = client.post("/api/v1/sync", headers={"x-csrf-token": token})
    assert done.status_code == 202 and done.json() == {"sync": "asked", "pid": 4242}
    assert asks.count == 1


def test_get_of_the_sync_endpoint_changes_nothing(client: TestClient, asks: Asks) -> None:
    for _ in range(3):
        answer = client.get("/api/v1/sync")
        assert answer.status_code == 200 and Csrf(SECRET).valid(answer.json()["csrf"])
    assert client.head("/api/v1/sync").status_code == 200
    assert client.get("/sync").status_code == 405  # (the form's target takes POST only)
    assert asks.count == 0


def test_a_token_of_another_secret_or_too_old_or_from_another_site_is_refused(
    client: TestClient, asks: Asks
) -> None:
    other = Csrf(b"x" * 32).issue()
    old = Csrf(SECRET, clock=lambda: 1_000_000_000.0).issue()
    for token in (other, old):
        assert client.post("/api/v1/sync", headers={"x-csrf-token": token}).status_code == 403
    good = client.get("/api/v1/sync").json()["csrf"]
    for cross in ({"origin": "http://evil.example"}, {"sec-fetch-site": "cross-site"}):
        answer = client.post("/api/v1/sync", headers={"x-csrf-token": good, **cross})
        assert answer.status_code == 403 and "another site" in answer.json()["error"]
    same = {"origin": BASE, "sec-fetch-site": "same-origin"}
    assert client.post("/api/v1/sync", headers={"x-csrf-token": good, **same}).status_code == 202
    # (our pages are no-referrer: a browser's form POST from them says Origin: null)
    ours = {"origin": "null", "sec-fetch-site": "same-origin"}
    assert client.post("/api/v1/sync", headers={"x-csrf-token": good, **ours}).status_code == 202
    assert asks.count == 2


def test_the_search_page_s_button_posts_its_token_and_comes_back_to_the_search(
    client: TestClient, asks: Asks
) -> None:
    page = client.get("/search?q=live").text
    token = _form_token(page)
    assert client.post("/sync", data={"q": "live"}).status_code == 403  # (no token)
    assert asks.count == 0
    done = client.post("/sync", data={"csrf": token, "q": "live"}, follow_redirects=False)
    assert done.status_code == 303 and done.headers["location"] == "/search?q=live&sync=asked"
    assert asks.count == 1
    assert "The sync was asked to run" in client.get(done.headers["location"]).text


def test_without_sync_there_is_no_post_and_no_button(store_path: Path) -> None:
    with TestClient(create_app(store_path), base_url=BASE) as c:
        assert 'id="sync-now"' not in c.get("/search?q=live").text
        for path in ("/api/v1/sync", "/sync"):
            answer = c.post(path, headers={"x-csrf-token": "anything"})
            assert answer.status_code == 405 and "read-only" in answer.text
        assert c.get("/api/v1/sync").status_code == 404


def test_with_a_token_file_a_post_needs_the_token_as_well_as_the_csrf_one(
    store_path: Path, asks: Asks
) -> None:
    token = "s3cret-token-of-24-chars"
    app = create_app(store_path, token=token, sync_now=asks, csrf_secret=SECRET)
    with TestClient(app, base_url=BASE) as c:
        csrf = {"x-csrf-token": Csrf(SECRET).issue()}
        assert c.post("/api/v1/sync", headers=csrf).status_code == 401
        bearer = {"authorization": f"Bearer {token}"}
        assert c.post("/api/v1/sync", headers={**csrf, **bearer}).status_code == 202
    assert asks.count == 1

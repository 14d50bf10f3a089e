"""``serve --listen --sync`` in a real browser: Debian's chromium driven by
Playwright (``executable_path``) presses the search page's "Sync now" and the
server's sync runs (a real Dovecot account); a page of another site posting the
same form, even with a valid CSRF token in it, is refused (403).

Without chromium the test is skipped on a developer's machine and FAILS in CI."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_serve import make_place
from tests.integration.test_serve_http import WebServer, get, wait_until
from tests.integration.test_web_browser import CHROMIUM_FLAGS, _chromium


@pytest.fixture
def web(tmp_path: Path, dovecot: Any, imap_user: Callable[[str], Any]) -> Iterator[WebServer]:
    place = make_place(tmp_path)
    imap_user("fastmail")
    config = tmp_path / "config.toml"
    config.write_text(dovecot.account_toml("fastmail", folders=["INBOX"]))
    place.env.update(dovecot.password_env())
    server = WebServer(place, "--sync", "--config", str(config), "--interval", "1h")
    try:
        assert wait_until(lambda: server.status()["sync"]["runs"] >= 1), server.log()
        yield server
    finally:
        server.stop()


@pytest.fixture
def other_site() -> Iterator[tuple[str, dict[str, str]]]:
    """Another site (localhost on another port): serves ``page["html"]``."""
    page = {"html": ""}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = page["html"].encode()
            self.send_response(200)
            self.send_header("content-type", "text/html")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://localhost:{httpd.server_address[1]}", page
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_the_sync_now_button_runs_the_sync_and_another_site_s_form_is_refused(
    web: WebServer, other_site: tuple[str, dict[str, str]]
) -> None:
    executable = _chromium()
    from playwright.sync_api import sync_playwright

    site, page_of_site = other_site
    token = json.loads(get(web.base, "/api/v1/sync")[1])["csrf"]  # (as if it had leaked)
    page_of_site["html"] = (
        f'<form id="f" method="post" action="{web.base}/sync">'
        f'<input type="hidden" name="csrf" value="{token}"><input name="q" value="x"></form>'
        '<script>document.getElementById("f").submit()</script>'
    )
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=executable, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page()
            page.goto(f"{web.base}/search?q=live")
            page.click("#sync-now button")
            page.wait_for_url("**/search?q=live&sync=asked")
            assert "The sync was asked to run" in page.inner_text("#sync-now")
            assert wait_until(lambda: "woke up (asked to sync now)" in web.log()), web.log()
            assert wait_until(lambda: web.status()["sync"]["runs"] >= 2), web.log()

            runs = web.status()["sync"]["runs"]
            with page.expect_response(f"{web.base}/sync") as answer:
                page.goto(site)
            assert answer.value.status == 403
            assert "another site" in page.inner_text("body")
        finally:
            browser.close()
    assert web.log().count("asked to run now") == 1
    assert web.status()["sync"]["runs"] == runs

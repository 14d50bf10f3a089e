"""``mailledger web`` in a real browser: the command run as a subprocess on a free
loopback port over a store of hostile mail, Debian's chromium driven headless by
Playwright (``executable_path``: nothing downloads a browser). Search, open the
hostile message, and no script of the mail runs: no dialog, the HTML part in a
sandboxed frame. Then SIGTERM ends the server, exit 0.

Without chromium the test is skipped on a developer's machine and FAILS in CI
(``CI=true``: .ci/run installs chromium)."""

from __future__ import annotations

import contextlib
import http.client
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from pipeline.store import MessageStore
from tests.integration.web_mail import HOSTILE_ID, RLO, fill

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOT = Path("/tmp/mailledger-web-message.png")


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        why = "chromium not installed (apt-get install -y chromium; .ci/run does this)"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def _web(store_root: Path, cwd: Path, *extra: str) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``mailledger web`` on a free loopback port, ready (its search page answers)."""
    port = _free_port()
    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline.cli", "--store", str(store_root), "web",
         "--listen", f"127.0.0.1:{port}", *extra],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(repo)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(f"{base}/search", timeout=2) as answer:
                assert answer.status == 200
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                _out, err = proc.communicate()
                pytest.fail(f"mailledger web did not start: {err.decode(errors='replace')}")
            time.sleep(0.1)
    try:
        yield base, proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.fixture
def server(store: MessageStore, tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    fill(store)
    store.close()
    with _web(store.root, tmp_path) as running:
        yield running


def test_a_browser_searches_opens_hostile_mail_and_no_script_of_it_runs(
    server: tuple[str, subprocess.Popen[bytes]],
) -> None:
    executable = _chromium()
    from playwright.sync_api import sync_playwright

    base, proc = server
    dialogs: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=executable, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page()
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            page.goto(f"{base}/search")
            page.fill("input[name=q]", "*")
            page.click("button[type=submit]")
            page.wait_for_selector("a.hit")
            assert page.locator("a.hit").count() == 4
            subject = page.locator(f'a.hit[href="/m/{quote(HOSTILE_ID, safe="@")}"]')
            assert "<script>" in subject.inner_text()  # (shown as text, not run)
            subject.click()
            page.wait_for_selector("iframe#html-part")
            frame_el = page.locator("iframe#html-part")
            assert frame_el.get_attribute("sandbox") == ""
            frame = page.frame_locator("iframe#html-part")
            assert frame.locator("b").inner_text() == "there"  # (the sanitized HTML shows)
            assert frame.locator("script").count() == 0
            assert frame.locator("img[src], [onerror]").count() == 0  # (the pixel: src gone)
            headers = page.locator("#headers").inner_text()
            assert "<U+202E>" in headers and RLO not in headers
            assert page.locator("#attachments a").get_attribute("download") is not None
            page.wait_for_timeout(500)  # (time for anything that would fire)
            page.screenshot(path=str(SCREENSHOT), full_page=True)
            page.goto(f"{base}/t/{quote(HOSTILE_ID, safe='@')}")
            assert "[missing]" in page.locator("#thread").inner_text()
        finally:
            browser.close()
    assert dialogs == []
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 0


def test_ctrl_c_ends_mailledger_web_cleanly_exit_0(
    server: tuple[str, subprocess.Popen[bytes]],
) -> None:
    base, proc = server
    with urllib.request.urlopen(f"{base}/api/v1/stats", timeout=5) as answer:
        assert answer.status == 200
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert b"Traceback" not in err and b"interrupted" not in err


def test_web_answers_the_hosts_it_was_given_and_refuses_any_other(
    store: MessageStore, tmp_path: Path
) -> None:
    fill(store)
    store.close()
    with _web(store.root, tmp_path, "--allow-host", "mail.example") as (base, _proc):
        port = int(base.rsplit(":", 1)[1])

        def status(host: str) -> int:
            con = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            try:
                con.request("GET", "/api/v1/stats", headers={"Host": host})
                return con.getresponse().status
            finally:
                con.close()

        assert status(f"127.0.0.1:{port}") == 200
        assert status(f"localhost:{port}") == 200
        assert status(f"mail.example:{port}") == 200
        assert status(f"evil.example:{port}") == 400
        assert status(f"127.0.0.1:{port + 1}") == 400

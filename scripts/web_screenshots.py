"""The README's screenshots of the web pages (`make screenshots`): a small store
of the bundled fixture mail plus one reply with an HTML part and an attachment,
served by `mailledger serve --listen` on a free loopback port, and the search,
thread and message pages shot by Playwright driving Debian's chromium
(/usr/bin/chromium; nothing downloads a browser) into docs/web-*.png.

Not part of `make test`: run it after changing a page, and look at the pictures.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from email.message import EmailMessage
from pathlib import Path
from urllib.parse import quote

REPO = Path(__file__).resolve().parents[1]
MAILLEDGER = [sys.executable, "-m", "pipeline"]
CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update",
         "--disable-sync"]  # fmt: skip
REPLY_ID = "plan-6@example.org"


def _reply() -> bytes:
    """A reply in the fixtures' thread with a text part, an HTML part and an attachment."""
    msg = EmailMessage()
    msg["From"] = "Grace Hopper <grace@example.org>"
    msg["To"] = "ada@example.org, zofia@example.pl"
    msg["Subject"] = "Re: Live Wire: release plan"
    msg["Date"] = "Fri, 28 Jun 2024 10:15:00 +0000"
    msg["Message-ID"] = f"<{REPLY_ID}>"
    msg["In-Reply-To"] = "<plan-2@example.org>"
    msg["References"] = "<plan-1@example.org> <plan-2@example.org>"
    text = ("Ada, Zofia,\n\nthe checklist for Friday is attached. The migration runs first;\n"
            "the release waits for its dry run.\n\nGrace\n")  # fmt: skip
    msg.set_content(text)
    msg.add_alternative(
        "<p>Ada, Zofia,</p><p>the <b>checklist</b> for Friday is attached. The migration"
        " runs first; the release waits for its dry run.</p>"
        '<p><img src="https://tracker.example/pixel.gif" alt="">Grace</p>',
        subtype="html",
    )
    msg.add_attachment(
        b"1. dry run of the migration\n2. tag v2.0\n3. release notes\n",
        maintype="text",
        subtype="plain",
        filename="checklist.txt",
    )
    return msg.as_bytes()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _run(env: dict[str, str], *argv: str) -> None:
    subprocess.run([*MAILLEDGER, *argv], env=env, check=True, cwd=REPO, capture_output=True)


def main() -> int:
    if not Path(CHROMIUM).exists():
        print(f"web_screenshots: {CHROMIUM} is missing (apt-get install -y chromium)")
        return 2
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="mailledger-shots-") as tmp:
        root = Path(tmp)
        (root / "run").mkdir(mode=0o700)
        env = {**os.environ, "XDG_RUNTIME_DIR": str(root / "run"),
               "XDG_STATE_HOME": str(root / "state"), "HOME": str(root)}  # fmt: skip
        env.pop("MAILLEDGER_STORE", None)
        store = str(root / "store")
        _run(env, "--store", store, "import", "maildir", str(REPO / "fixtures" / "maildir"))
        _run(env, "--store", store, "import", "mbox", str(REPO / "fixtures" / "lists.mbox"))
        mbox = root / "reply.mbox"
        mbox.write_bytes(b"From grace@example.org Fri Jun 28 10:15:00 2024\n" + _reply() + b"\n")
        _run(env, "--store", store, "import", "mbox", str(mbox))
        port = _free_port()
        base = f"http://127.0.0.1:{port}"
        server = subprocess.Popen(
            [*MAILLEDGER, "--store", store, "serve", "--listen", f"127.0.0.1:{port}"],
            env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            _wait(base)
            pages = {
                "web-search.png": f"{base}/search?q=" + quote("date:2024-06"),
                "web-thread.png": f"{base}/t/" + quote("plan-1@example.org", safe="@"),
                "web-message.png": f"{base}/m/" + quote(REPLY_ID, safe="@"),
            }
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
                try:
                    page = browser.new_page(viewport={"width": 1100, "height": 480})
                    for name, url in pages.items():
                        page.goto(url)
                        page.wait_for_load_state("networkidle")
                        page.screenshot(path=str(REPO / "docs" / name), full_page=True)
                        print(f"docs/{name}: {url}")
                finally:
                    browser.close()
        finally:
            server.terminate()
            server.wait(timeout=60)
        shutil.rmtree(root / "run", ignore_errors=True)
    return 0


def _wait(base: str) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"{base}/api/v1/stats", timeout=2):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


if __name__ == "__main__":
    sys.exit(main())

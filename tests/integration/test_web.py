"""``pipeline.web``: the JSON API in the command line's shapes, the pages with
hostile mail shown inert, and the server's security (Host, token, headers,
read-only), through Starlette's TestClient over a real store in tmp_path."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import quote

import pytest
from starlette.testclient import TestClient

from pipeline.cli import main
from pipeline.store import MessageStore
from pipeline.web import create_app
from tests.integration.web_mail import (
    ESC,
    GHOST_ID,
    HOSTILE_ID,
    QUOTE_ID,
    RLO,
    ROOT_ID,
    fill,
    plain,
)

BASE = "http://127.0.0.1:8025"


@pytest.fixture
def store_path(store: MessageStore) -> Path:
    fill(store)
    store.close()
    return store.root


@pytest.fixture
def client(store_path: Path) -> Iterator[TestClient]:
    with TestClient(create_app(store_path), base_url=BASE) as c:
        yield c


def _cli_json(capsys: pytest.CaptureFixture[str], store: Path, *argv: str) -> object:
    capsys.readouterr()
    assert main(["--store", str(store), *argv], env={}) == 0
    return json.loads(capsys.readouterr().out)


def _p(mid: str) -> str:
    return quote(mid, safe="@")


# -- the API: the command line's shapes -------------------------------------------


@pytest.mark.parametrize("output", ["summary", "threads", "messages", "count"])
def test_api_search_answers_as_search_format_json_does(
    client: TestClient, store_path: Path, capsys: pytest.CaptureFixture[str], output: str
) -> None:
    got = client.get("/api/v1/search", params={"q": "*", "output": output, "sort": "oldest"})
    assert got.status_code == 200
    assert got.headers["content-type"] == "application/json"
    want = _cli_json(
        capsys, store_path, "search", "*", f"--output={output}", "--format=json", "--sort=oldest"
    )
    # (count: the number in an object, `{"count": N}`, as issue 37 names it)
    assert got.json() == ({"count": want} if output == "count" else want)
    assert want  # (4 messages: no empty answer compared)


def test_api_message_thread_stats_and_cursor_log_answer_as_the_cli(
    client: TestClient, store_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    message = client.get(f"/api/v1/messages/{_p(HOSTILE_ID)}").json()
    assert message == _cli_json(capsys, store_path, "show", f"id:{HOSTILE_ID}", "--json")
    assert message["attachments"][0]["part"] == 5
    tree = client.get(f"/api/v1/threads/{_p(ROOT_ID)}").json()
    assert tree == _cli_json(capsys, store_path, "thread", ROOT_ID, "--tree-json")
    assert tree[0]["message_id"] == GHOST_ID or tree[0]["message_id"] == ROOT_ID
    stats = client.get("/api/v1/stats").json()
    assert stats == _cli_json(capsys, store_path, "stats", "--json")
    assert stats["messages"] == 4
    log = client.get("/api/v1/cursors/gmail/INBOX/log").json()
    assert log == _cli_json(capsys, store_path, "cursor", "log", "gmail", "INBOX", "--json")


def test_api_raw_and_part_are_the_bytes_of_show_raw_and_show_part(
    client: TestClient, store_path: Path
) -> None:
    with MessageStore.open(store_path, create=False) as s:
        raw = s.raw(HOSTILE_ID)
    got = client.get(f"/api/v1/messages/{_p(HOSTILE_ID)}/raw")
    assert got.content == raw
    assert got.headers["content-type"] == "message/rfc822"
    part = client.get(f"/api/v1/messages/{_p(HOSTILE_ID)}/parts/5")
    assert part.content == b"hello"
    assert part.headers["content-type"] == "application/octet-stream"
    assert client.get(f"/api/v1/messages/{_p(HOSTILE_ID)}/parts/99").status_code == 404
    # the singular names too, and the page's own raw download
    for path in (f"/api/v1/message/{_p(HOSTILE_ID)}/raw", f"/m/{_p(HOSTILE_ID)}/raw"):
        assert client.get(path).content == raw, path
    assert client.get(f"/api/v1/message/{_p(HOSTILE_ID)}").json() == (
        client.get(f"/api/v1/messages/{_p(HOSTILE_ID)}").json()
    )
    assert client.get(f"/api/v1/thread/{_p(ROOT_ID)}").json() == (
        client.get(f"/api/v1/threads/{_p(ROOT_ID)}").json()
    )


def test_a_download_is_named_by_the_mail_filename_rule_never_raw(client: TestClient) -> None:
    got = client.get(f"/api/v1/messages/{_p(HOSTILE_ID)}/parts/5")
    disposition = got.headers["content-disposition"]
    assert disposition.startswith("attachment; ")
    assert "/" not in disposition.split("filename*=")[1]  # (percent-encoded: no path)
    assert ".." not in disposition and "<" not in disposition and "\n" not in disposition
    assert "%E2%80%AE" not in disposition  # (the bidi override made _ by safe_filename)
    assert disposition.endswith("fdp.exe")


def test_the_events_feed_pages_through_the_whole_log_in_seq_order(
    client: TestClient, store_path: Path
) -> None:
    seen: list[int] = []
    since = 0
    while True:
        page = client.get("/api/v1/events", params={"since": since, "limit": 3}).json()
        assert len(page["events"]) <= 3
        seen.extend(e["seq"] for e in page["events"])
        if page["next"] == since:
            break
        since = page["next"]
    with MessageStore.open(store_path, create=False) as s:
        assert seen == s.log.read(columns=["seq"]).column("seq").to_pylist()
    assert len(seen) == 4
    first = client.get("/api/v1/events", params={"since": 0, "limit": 1}).json()["events"][0]
    assert first["type"] == "message-seen" and first["message_id"] == ROOT_ID


def test_a_bad_query_is_a_400_with_the_reason_and_the_languages_help(
    client: TestClient,
) -> None:
    api = client.get("/api/v1/search", params={"q": "from:ada ("})
    assert api.status_code == 400
    assert "position" in api.json()["error"]
    page = client.get("/search", params={"q": "from:ada ("})
    assert page.status_code == 400
    assert "query error at position" in page.text
    assert "has:attachment" in page.text  # (the help)
    assert client.get("/api/v1/search", params={"q": "*", "limit": "-1"}).status_code == 400


def test_the_search_mbox_download_is_the_bytes_mailledger_export_writes(
    client: TestClient, store_path: Path, tmp_path: Path
) -> None:
    dest = tmp_path / "out.mbox"
    assert main(["--store", str(store_path), "export", "*", str(dest)], env={}) == 0
    got = client.get("/search.mbox", params={"q": "*"})
    assert got.status_code == 200
    assert got.content == dest.read_bytes()
    assert got.content.count(b"\nFrom ") + 1 == 4
    thread = client.get(f"/t/{_p(ROOT_ID)}/mbox")
    assert thread.content.count(b"From ") >= 3 and QUOTE_ID.encode() not in thread.content
    gz = client.get(f"/t/{_p(ROOT_ID)}.mbox.gz")
    assert gz.headers["content-type"] == "application/gzip"
    assert ".mbox.gz" in gz.headers["content-disposition"]
    assert gzip.decompress(gz.content) == thread.content  # (httpx leaves it compressed)


# -- the pages: hostile mail inert ------------------------------------------------


class _Markup(HTMLParser):
    """Every element and attribute of a page, and its text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _markup(html: str) -> _Markup:
    parsed = _Markup()
    parsed.feed(html)
    parsed.close()
    return parsed


def _assert_inert(html: str) -> None:
    parsed = _markup(html)
    for tag, attrs in parsed.tags:
        assert tag not in ("script", "img", "svg", "object", "embed"), (tag, attrs)
        for name, value in attrs:
            assert not name.startswith("on"), (tag, name, value)
            assert not (value or "").lower().startswith("javascript:"), (tag, name, value)
    text = "".join(parsed.text)
    assert RLO not in html and ESC not in html  # (shown as <U+202E> and ␛)
    assert "\u241b" in text or "<U+202E>" in text


@pytest.mark.parametrize(
    "path",
    [
        "/search?q=*",
        "/search?q=*&output=threads",
        f"/m/{_p(HOSTILE_ID)}",
        f"/t/{_p(ROOT_ID)}",
        f"/t/{_p(ROOT_ID)}?view=flat",
    ],
)
def test_hostile_subjects_names_filenames_and_ids_come_out_inert(
    client: TestClient, path: str
) -> None:
    got = client.get(path)
    assert got.status_code == 200, got.text
    _assert_inert(got.text)
    assert "&lt;script&gt;" in got.text or "&lt;U+202E&gt;" in got.text


def test_the_message_page_frames_the_html_part_sandboxed_and_links_by_message_id(
    client: TestClient,
) -> None:
    page = _markup(client.get(f"/m/{_p(HOSTILE_ID)}").text)
    frames = [dict(attrs) for tag, attrs in page.tags if tag == "iframe"]
    assert len(frames) == 1
    assert frames[0]["sandbox"] in ("", None)  # (no allow-scripts, no allow-same-origin)
    assert frames[0]["src"] == f"/m/{_p(HOSTILE_ID)}/html"
    links = {dict(attrs).get("href") for tag, attrs in page.tags if tag == "a"}
    assert f"/t/{_p(HOSTILE_ID)}" in links
    assert f"/api/v1/messages/{_p(HOSTILE_ID)}/parts/5" in links
    quoted = client.get(f"/m/{_p(QUOTE_ID)}")
    assert quoted.status_code == 200 and "quoted id" in quoted.text


def test_the_html_part_runs_nothing_fetches_nothing_and_has_its_own_csp(
    client: TestClient,
) -> None:
    got = client.get(f"/m/{_p(HOSTILE_ID)}/html")
    assert got.status_code == 200
    csp = got.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "sandbox" in csp and "script-src" not in csp
    assert got.headers["x-frame-options"] == "SAMEORIGIN"
    parsed = _markup(got.text)
    tags = {tag for tag, _ in parsed.tags}
    assert "script" not in tags and "b" in tags
    attrs = [a for _, attrs in parsed.tags for a in attrs]
    assert not [a for a in attrs if a[0].startswith("on") or a[0] == "src"]
    assert "tracker.example" not in got.text and "javascript:" not in got.text
    assert 'style="color:red"' in got.text  # (layout kept, its remote image not)


def test_the_thread_page_shows_the_ghost_as_missing_nested_and_flat(client: TestClient) -> None:
    for view in ("nested", "flat"):
        text = client.get(f"/t/{_p(ROOT_ID)}", params={"view": view}).text
        assert "[missing]" in text and GHOST_ID in text
    nested = _markup(client.get(f"/t/{_p(ROOT_ID)}").text)
    assert sum(1 for tag, _ in nested.tags if tag == "ul") >= 2  # (a reply under its parent)


def test_the_form_filters_compile_to_the_query_and_stay_in_the_url(client: TestClient) -> None:
    got = client.get(
        "/search",
        params={"q": "wire", "from": "ada@example.org", "folder": "INBOX", "after": "2024-07-01"},
    )
    assert got.status_code == 200
    assert 'from:"ada@example.org" folder:"INBOX" date:"2024-07-01"..' in got.text.replace(
        "&#34;", '"'
    )
    hits = [dict(a)["href"] for t, a in _markup(got.text).tags if t == "a" and "hit" in str(a)]
    assert hits == [f"/m/{_p(ROOT_ID)}"]


def test_the_atom_feed_lists_the_matches_escaped(client: TestClient) -> None:
    import xml.etree.ElementTree as ET

    got = client.get("/search.atom", params={"q": "*"})
    assert got.headers["content-type"].startswith("application/atom+xml")
    feed = ET.fromstring(got.content)
    ns = "{http://www.w3.org/2005/Atom}"
    entries = feed.findall(f"{ns}entry")
    assert len(entries) == 4
    assert all(RLO not in (e.findtext(f"{ns}title") or "") for e in entries)


# -- security --------------------------------------------------------------------


def test_every_response_carries_nosniff_no_referrer_and_pages_a_csp(client: TestClient) -> None:
    for path in ("/search?q=*", "/api/v1/stats", f"/m/{_p(ROOT_ID)}", "/nowhere"):
        got = client.get(path)
        assert got.headers["x-content-type-options"] == "nosniff"
        assert got.headers["referrer-policy"] == "no-referrer"
        assert "default-src 'none'" in got.headers["content-security-policy"]
        assert got.headers["x-frame-options"] == "DENY"
        assert "script-src" not in got.headers["content-security-policy"]


def test_a_host_not_on_the_list_is_refused_dns_rebinding(store_path: Path) -> None:
    app = create_app(store_path, allowed_hosts=("127.0.0.1:8025", "localhost:8025"))
    with TestClient(app, base_url=BASE) as c:
        assert c.get("/api/v1/stats").status_code == 200
        assert c.get("/api/v1/stats", headers={"host": "evil.example:8025"}).status_code == 400
        assert c.get("/api/v1/stats", headers={"host": "127.0.0.1:9999"}).status_code == 400


def test_with_a_token_every_request_carries_it_by_header_or_login_cookie(
    store_path: Path,
) -> None:
    token = "s3cret-token-of-24-chars"
    with TestClient(create_app(store_path, token=token), base_url=BASE) as c:
        assert c.get("/api/v1/stats").status_code == 401
        assert c.get("/search").status_code == 401
        bearer = {"authorization": f"Bearer {token}"}
        assert c.get("/api/v1/stats", headers=bearer).status_code == 200
        assert c.get("/login", params={"token": "wrong-token-wrong-token"}).status_code == 401
        login = c.get("/login", params={"token": token}, follow_redirects=False)
        assert login.status_code == 303
        cookie = login.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie
        assert c.get("/search?q=*").status_code == 200  # (the cookie, kept by the client)


def test_nothing_but_get_is_answered_read_only(client: TestClient) -> None:
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        assert client.request(method, "/api/v1/search?q=*").status_code == 405


def _run(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pipeline.cli", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )


def test_web_refuses_a_non_loopback_address_without_a_token_and_a_loose_token_file(
    store_path: Path, tmp_path: Path
) -> None:
    done = _run("--store", str(store_path), "web", "--listen", "0.0.0.0:8025", cwd=tmp_path)
    assert done.returncode == 2
    assert "--token-file" in done.stderr
    loose = tmp_path / "token"
    loose.write_text("s3cret-token-of-24-chars\n")
    loose.chmod(0o644)
    done = _run(
        "--store", str(store_path), "web", "--listen", "0.0.0.0:8025",
        "--token-file", str(loose), cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2
    assert "chmod 600" in done.stderr
    done = _run("--store", str(tmp_path / "none"), "web", cwd=tmp_path)
    assert done.returncode == 2 and "no mailledger store" in done.stderr


def test_the_command_line_loads_no_web_library(store_path: Path, tmp_path: Path) -> None:
    probe = (
        "import sys\n"
        "from pipeline.cli import main\n"
        f"code = main(['--store', {str(store_path)!r}, 'search', '*'], env={{}})\n"
        "print(code, sorted(m for m in ('starlette', 'uvicorn', 'jinja2', 'nh3', 'pipeline.web')"
        " if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "0 []"


def test_a_writer_in_another_process_commits_while_the_app_serves(
    client: TestClient, store_path: Path, tmp_path: Path
) -> None:
    """The projection file is never held between requests: an import in another
    process commits (and folds) between two requests, and the next one sees it."""
    assert client.get("/api/v1/search", params={"q": "*", "output": "count"}).json() == {"count": 4}
    assert client.get(f"/m/{_p(ROOT_ID)}").status_code == 200
    mbox = tmp_path / "new.mbox"
    mbox.write_bytes(b"From ada Mon Jul  1 09:00:00 2024\n" + plain("late@example.org", "later"))
    done = _run("--store", str(store_path), "import", "mbox", str(mbox), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert client.get("/api/v1/search", params={"q": "*", "output": "count"}).json() == {"count": 5}
    assert client.get("/api/v1/messages/late%40example.org").status_code == 200


def test_a_session_kept_across_requests_lets_a_writer_in_and_sees_its_text(
    store_path: Path, tmp_path: Path
) -> None:
    """Under load the projection file, and the full-text index's connection with it,
    is kept from one request to the next (here a request is always waiting): a
    writer in another process still gets in, and a text search after it finds the
    text it added."""
    app = create_app(store_path)
    reads = app.state.reads
    reads._wanting += 1  # (one more request waiting behind each: the session kept)
    count = {"q": "body:penguin", "output": "count"}
    with TestClient(app, base_url=BASE) as client:
        for _ in range(2):
            assert client.get("/api/v1/search", params=count).json() == {"count": 0}
            assert reads.held  # (kept: no request is ever the last)
        mbox = tmp_path / "new.mbox"
        mbox.write_bytes(
            b"From ada Mon Jul  1 09:00:00 2024\n" + plain("late@example.org", "penguin")
        )
        argv = [sys.executable, "-m", "pipeline.cli", "--store", str(store_path), "import", "mbox"]
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
        writer = subprocess.Popen([*argv, str(mbox)], cwd=tmp_path, env=env)
        try:  # (a request that sees the writer waiting lets go, then waits for it)
            while writer.poll() is None:
                client.get("/api/v1/search", params=count)
            assert writer.wait(timeout=60) == 0
        finally:
            writer.kill()
        assert client.get("/api/v1/search", params=count).json() == {"count": 1}


def test_a_message_id_holding_a_slash_is_one_path_segment_never_another_route(
    store: MessageStore,
) -> None:
    store.add(None, plain("a/raw@x", "slashed"))
    store.add(None, plain("b/html@x", "slashed too"))
    store.close()
    with TestClient(create_app(store.root), base_url=BASE) as c:
        got = c.get(f"/api/v1/messages/{_p('a/raw@x')}")
        assert got.headers["content-type"] == "application/json"
        assert got.json()["message_id"] == "a/raw@x"
        assert c.get(f"/api/v1/messages/{_p('a/raw@x')}/raw").content.startswith(b"From: ada")
        page = c.get(f"/m/{_p('b/html@x')}")
        assert page.status_code == 200 and "slashed too" in page.text
        assert c.get("/api/v1/messages/a/raw@x").status_code == 404  # (a/ + raw@x: no route)
        assert c.get("/api/v1/cursors/gmail/%5BGmail%5D%2FAll%20Mail/log").json() == []


def test_an_inline_cid_image_of_the_message_shows_as_data_and_a_remote_one_not(
    store: MessageStore,
) -> None:
    raw = (
        b"From: a@example.org\nMessage-ID: <cid@example.org>\nMIME-Version: 1.0\n"
        b'Content-Type: multipart/related; boundary="R"\n\n--R\nContent-Type: text/html\n\n'
        b'<p><img src="cid:logo@example.org"><img src="https://tracker.example/p.png"></p>\n'
        b"--R\nContent-Type: image/png\nContent-ID: <logo@example.org>\n"
        b"Content-Transfer-Encoding: base64\n\niVBORw0KGgo=\n--R--\n"
    )
    store.add(None, raw)
    store.close()
    with TestClient(create_app(store.root), base_url=BASE) as c:
        frame = _markup(c.get("/m/cid@example.org/html").text)
    sources = [dict(attrs).get("src") for tag, attrs in frame.tags if tag == "img"]
    assert sources == ["data:image/png;base64,iVBORw0KGgo=", None]


def test_the_search_page_pages_by_fifty_with_its_filters_kept_in_the_links(
    store: MessageStore,
) -> None:
    from pipeline.web.pages import PAGE_SIZE

    for n in range(PAGE_SIZE + 5):
        store.add(None, plain(f"m{n}@example.org", f"number {n}", day=1 + n % 28))
    store.close()
    with TestClient(create_app(store.root), base_url=BASE) as c:
        first = _markup(c.get("/search", params={"from": "ada", "sort": "oldest"}).text)
        hits = [dict(a)["href"] for t, a in first.tags if t == "a" and ("class", "hit") in a]
        assert len(hits) == PAGE_SIZE
        [after] = [dict(a)["href"] for t, a in first.tags if t == "a" and ("rel", "next") in a]
        assert "from=ada" in after and "sort=oldest" in after and f"offset={PAGE_SIZE}" in after
        second = _markup(c.get(after).text)
        rest = [dict(a)["href"] for t, a in second.tags if t == "a" and ("class", "hit") in a]
        assert len(rest) == 5 and not set(rest) & set(hits)
        assert [a for t, a in second.tags if t == "a" and ("rel", "prev") in a]
        assert not [a for t, a in second.tags if t == "a" and ("rel", "next") in a]

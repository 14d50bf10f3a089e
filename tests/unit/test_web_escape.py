"""``pipeline.web.escape``: the one function for mail text in a page, the one for a
name in a download header, and Message-IDs as one URL segment, for any text."""

from __future__ import annotations

import re
from html.parser import HTMLParser

from hypothesis import example, given
from hypothesis import strategies as st

from pipeline.terminal import UNSAFE_RANGES
from pipeline.web.escape import content_disposition, id_path, page_text, routing_path

_UNSAFE = re.compile("[" + "".join(f"\\U{lo:08x}-\\U{hi:08x}" for lo, hi in UNSAFE_RANGES) + "]")
HOSTILE = [
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(1)>',
    "'onmouseover='alert(1)",
    "invoice\u202efdp.exe",
    "\x1b]52;c;cm0=\x07",
    "../../etc/passwd",
    "a\r\nSet-Cookie: x=1",
]


class _Elements(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.elements = 0
        self.text = ""

    def handle_starttag(self, tag: str, attrs: object) -> None:
        self.elements += 1

    def handle_data(self, data: str) -> None:
        self.text += data


@given(st.text())
@example(HOSTILE[0])
@example(HOSTILE[1])
@example(HOSTILE[3])
@example(HOSTILE[4])
def test_page_text_makes_no_element_and_no_control_or_bidi_character(text: str) -> None:
    shown = str(page_text(text))
    assert not set(shown) & set("<>\"'")
    assert _UNSAFE.search(shown) is None
    parsed = _Elements()
    parsed.feed(f"<p title='{shown}'>{shown}</p>")
    parsed.close()
    assert parsed.elements == 1  # (only the <p>: nothing of the text became markup)


def test_page_text_shows_what_it_neutralises_visibly() -> None:
    assert str(page_text(HOSTILE[3])) == "invoice&lt;U+202E&gt;fdp.exe"
    assert str(page_text(HOSTILE[4])).startswith("\u241b]52")
    assert str(page_text("a\nb\tc", newlines=True)) == "a\nb\tc"
    assert str(page_text("a\nb")) == "a\u240ab"


@given(st.text(), st.text(min_size=1, alphabet="abc.-"))
@example(HOSTILE[1], "part")
@example(HOSTILE[5], "part")
@example(HOSTILE[6], "part")
def test_a_download_header_holds_only_a_plain_safe_name(name: str, fallback: str) -> None:
    header = content_disposition(name, fallback=fallback)
    assert header.isascii() and header.isprintable()
    assert header.startswith("attachment; filename=")
    plain, _, encoded = header.partition("; filename*=UTF-8''")
    assert plain.count('"') == 2 and ";" not in plain.removeprefix("attachment; ")
    assert re.fullmatch(r"[A-Za-z0-9%._~-]*", encoded)
    assert "/" not in encoded and "\\" not in encoded


@given(st.text(min_size=1))
@example("a/raw@x")
@example("../../etc/passwd%2F?#\u202e@evil")
def test_a_message_id_is_one_url_segment_routed_and_read_back_exactly(mid: str) -> None:
    from urllib.parse import unquote

    path = f"/m/{id_path(mid)}".encode("ascii")
    routed = routing_path(path)
    assert routed.count("/") == 2  # (one segment, whatever the id holds)
    assert unquote(routed.split("/")[2]) == mid

"""A message as people read it (``pipeline.render``): total on any bytes."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.render import html_to_text, message_text, render_text

_PARTS = st.sampled_from(
    [
        b"Content-Type: multipart/mixed; boundary=b\r\n",
        b"Content-Type: text/plain; charset=x-no-such-charset\r\n",
        b"Content-Type: text/html; charset=utf-8\r\n",
        b"Content-Transfer-Encoding: base64\r\n",
        b"Content-Transfer-Encoding: quoted-printable\r\n",
        b"Content-Disposition: attachment; filename*=bogus''%ZZ\r\n",
        b"Subject: =?utf-8?q?broken=ZZ?=\r\n",
        b"\r\n",
        b"--b\r\n",
        b"--b--\r\n",
        b"<p>x &amp; <script>y",
        b"=C3=28 \xff\xfe\x00",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(_PARTS, st.binary(max_size=40)), max_size=12))
def test_rendering_never_raises_on_any_bytes(chunks: list[bytes]) -> None:
    raw = b"".join(chunks)
    text = message_text(raw)
    assert isinstance(text.body, str)
    out = render_text([("Subject", "s")], raw)
    assert out.startswith("Subject: s\n") and out.endswith("\n")


def test_an_unknown_charset_falls_back_without_an_error() -> None:
    raw = b"Content-Type: text/plain; charset=x-unknown\r\n\r\ncaf\xc3\xa9 \xe2\x82\xac\r\n"
    assert message_text(raw).body.strip() == "café €"


def test_html_reduction_keeps_words_and_paragraphs_and_drops_code() -> None:
    html = (
        "<style>.a{}</style><table><tr><td>A</td><td>B</td></tr><tr><td>C</td></tr></table>"
        "<p>one<br>two</p><pre>  kept   as is</pre>"
    )
    assert html_to_text(html).splitlines() == ["A B", "C", "", "one", "two", "", "kept   as is"]


def test_an_inline_text_html_file_is_shown_with_the_body_and_a_signature_is_not_listed() -> None:
    raw = (
        b"Subject: report\r\nMIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=M\r\n\r\n"
        b'--M\r\nContent-Type: multipart/signed; protocol="application/pgp-signature";'
        b" boundary=S\r\n\r\n"
        b"--S\r\nContent-Type: text/plain\r\n\r\nsee below\r\n"
        b"--S\r\nContent-Type: application/pgp-signature; name=signature.asc\r\n\r\n"
        b"SIG\r\n--S--\r\n"
        b"--M\r\nContent-Type: text/html\r\nContent-Disposition: inline; filename=r.html\r\n\r\n"
        b"<p>quarterly <b>report</b></p>\r\n"
        b"--M\r\nContent-Type: application/pdf\r\nContent-Disposition: attachment;"
        b" filename=r.pdf\r\n\r\n%PDF\r\n--M--\r\n"
    )
    text = message_text(raw)
    assert "see below" in text.body and "quarterly report" in text.body
    listed = [(a.filename, a.content_type) for a in text.attachments]
    assert listed == [("r.pdf", "application/pdf")]


@pytest.mark.corpus
def test_real_inline_html_file_is_shown_and_a_real_signature_not_listed(
    notmuch_corpus: Path,
) -> None:
    html = message_text((notmuch_corpus / "html/attribute-text").read_bytes())
    assert "hunter2" in html.body and html.attachments == ()  # (was: neither)
    signed = [
        p for p in notmuch_corpus.rglob("*") if p.is_file() and b"pgp-signature" in p.read_bytes()
    ]
    assert signed
    for path in signed:
        listed = message_text(path.read_bytes()).attachments
        assert "application/pgp-signature" not in {a.content_type for a in listed}, path

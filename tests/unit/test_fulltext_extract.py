"""The full-text extractor: raw bytes -> the folded text fields a message is found by."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from projections.fulltext.extract import extract

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def _mime(*parts: bytes, subject: bytes = b"Hello") -> bytes:
    head = (
        b"From: =?utf-8?q?Ren=C3=A9e_M=C3=BCller?= <renee@example.org>\r\n"
        b"To: Bob <bob@example.com>, carol@example.net\r\n"
        b"Subject: " + subject + b"\r\n"
        b'MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary="XX"\r\n\r\n'
    )
    body = b"".join(b"--XX\r\n" + p + b"\r\n" for p in parts) + b"--XX--\r\n"
    return head + body


def test_plain_text_is_preferred_over_its_html_alternative() -> None:
    raw = (
        b"Subject: alt\r\nContent-Type: multipart/alternative; boundary=b1\r\n\r\n"
        b"--b1\r\nContent-Type: text/plain\r\n\r\nplain words\r\n"
        b"--b1\r\nContent-Type: text/html\r\n\r\n<p>html words</p>\r\n--b1--\r\n"
    )
    text = extract(raw)
    assert "plain words" in text.body
    assert "html" not in text.body


def test_an_html_only_body_is_reduced_to_its_visible_text() -> None:
    raw = (
        b"Subject: news\r\nContent-Type: text/html; charset=utf-8\r\n\r\n"
        b"<html><head><title>T\xc3\xaftle</title><style>p{color:red}</style></head>"
        b"<body><p>Caf\xc3\xa9 <b>opening</b></p><script>var secret=1;</script></body></html>"
    )
    text = extract(raw)
    assert text.body == "cafe opening"


def test_charsets_and_transfer_encodings_are_decoded_and_folded() -> None:
    latin1 = (
        b"Content-Type: text/plain; charset=iso-8859-1\r\n"
        b"Content-Transfer-Encoding: quoted-printable\r\n\r\nMot=F6rhead live in Z=FCrich"
    )
    b64 = b"Content-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: base64\r\n\r\n"
    b64 += b"U3RyYcOfZQ==\r\n"  # "Straße"
    text = extract(_mime(latin1, b64, subject=b"=?iso-8859-1?q?Gr=FC=DFe?="))
    assert "motorhead live in zurich" in text.body
    assert "strasse" in text.body
    assert text.subject == "grusse"
    assert text.names == "renee muller renee@example.org bob bob@example.com carol@example.net"


def test_raw_8bit_headers_are_read_as_utf8_or_latin1() -> None:
    raw = "Subject: Motörhead\r\nFrom: Zoë <z@example.org>\r\n\r\nbody\r\n".encode()
    text = extract(raw)
    assert (text.subject, text.names) == ("motorhead", "zoe z@example.org")
    assert extract(b"Subject: Gr\xfc\xdfe\r\n\r\nx").subject == "grusse"


def test_attachment_names_are_decoded_from_rfc2047_and_rfc2231() -> None:
    first = (
        b'Content-Type: application/pdf; name="=?UTF-8?Q?R=C3=A9sum=C3=A9.pdf?="\r\n'
        b'Content-Disposition: attachment; filename="=?UTF-8?Q?R=C3=A9sum=C3=A9.pdf?="\r\n'
        b"Content-Transfer-Encoding: base64\r\n\r\nJVBERi0=\r\n"
    )
    second = (
        b"Content-Type: application/octet-stream\r\n"
        b"Content-Disposition: attachment; filename*=utf-8''%C3%9Cbersicht.xlsx\r\n\r\nxx"
    )
    text = extract(_mime(b"Content-Type: text/plain\r\n\r\nsee attached", first, second))
    assert text.filenames == "resume.pdf ubersicht.xlsx"
    assert text.has_attachment
    assert text.body == "see attached"
    assert text.row()[4] == "attachment"


def test_a_message_without_attachment_says_so() -> None:
    text = extract(b"Subject: hi\r\n\r\njust text\r\n")
    assert (text.subject, text.body, text.filenames, text.has_attachment) == (
        "hi",
        "just text\r\n",
        "",
        False,
    )
    assert text.row()[4] == ""


def test_an_unknown_charset_and_broken_base64_still_give_words() -> None:
    raw = (
        b"Subject: x\r\nContent-Type: text/plain; charset=x-no-such-charset\r\n"
        b"Content-Transfer-Encoding: base64\r\n\r\nnot base64 at all!!\r\n"
    )
    assert "not base64 at all" in extract(raw).body


def test_the_same_bytes_always_give_the_same_text() -> None:
    raw = _mime(b"Content-Type: text/html\r\n\r\n<div>a <i>b</i></div>")
    assert extract(raw) == extract(raw)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=400))
def test_the_extractor_never_raises_on_arbitrary_bytes(raw: bytes) -> None:
    extract(b"Content-Type: multipart/mixed; boundary=a\r\n\r\n--a\r\n" + raw)
    extract(raw)


def test_the_bundled_fixtures_give_their_subjects_and_bodies() -> None:
    files = sorted((FIXTURES / "maildir" / "cur").glob("*fixture*"))
    texts = [extract(f.read_bytes()) for f in files]
    assert len(texts) == 5
    assert all(t.subject and t.body.strip() for t in texts)
    assert texts[2].subject == "live wire: release plan — migracja"  # (the subject key)


@pytest.mark.corpus
def test_notmuch_corpus_html_charset_attachment_and_broken_mail(notmuch_corpus: Path) -> None:
    accented = extract((notmuch_corpus / "default/cur/53:2,").read_bytes())
    assert accented.subject == "essai accentue"  # "Essai accentué", latin-1
    assert "a la bonne heure" in accented.body
    patch = extract((notmuch_corpus / "default/bar/baz/23:2,").read_bytes())
    assert patch.filenames == "notmuch-help.patch"
    assert patch.has_attachment
    html_attachment = extract((notmuch_corpus / "html/attribute-text").read_bytes())
    assert html_attachment.filenames == "test.html"
    # an inline text/html file is body text (reduced to text), no attachment
    assert "hunter2" in html_attachment.body
    assert "swordfish" not in html_attachment.body  # (an attribute's value: not shown)
    assert not html_attachment.has_attachment
    pdf = extract((notmuch_corpus / "indexing/fake-pdf:2,S").read_bytes())
    assert pdf.filenames == "fake.pdf"
    for path in sorted((notmuch_corpus / "broken").rglob("*")):
        if path.is_file():
            assert extract(path.read_bytes()).names  # parsed, not the raw fallback


def test_display_names_of_from_and_of_to_and_cc_are_kept_apart() -> None:
    raw = _mime(b"Content-Type: text/plain\r\n\r\nhi")
    raw = raw.replace(b"carol@example.net", b'carol@example.net\r\nCc: "Worth, Carl" <cw@x.org>')
    text = extract(raw)
    assert text.from_names == "renee muller"
    assert text.to_names == "bob worth, carl"
    assert "renee@example.org" not in text.from_names + text.to_names  # (addresses: messages)


_SIGNED = (
    b"From: Carl Worth <cworth@example.org>\r\nSubject: signed\r\nMIME-Version: 1.0\r\n"
    b'Content-Type: multipart/signed; micalg=pgp-sha256; protocol="application/pgp-signature";'
    b' boundary="S"\r\n\r\n'
    b"--S\r\nContent-Type: text/plain\r\n\r\nsigned words\r\n"
    b'--S\r\nContent-Type: application/pgp-signature; name="signature.asc"\r\n'
    b'Content-Disposition: attachment; filename="signature.asc"\r\n\r\n'
    b"-----BEGIN PGP SIGNATURE-----\r\niQEzBAEBCAAdFiEE\r\n-----END PGP SIGNATURE-----\r\n--S--\r\n"
)


def test_a_detached_signature_is_no_attachment_and_no_text() -> None:
    text = extract(_SIGNED)
    assert not text.has_attachment
    assert text.filenames == ""
    assert "signed words" in text.body
    assert "pgp" not in text.body
    smime = _SIGNED.replace(b"application/pgp-signature;", b"application/pkcs7-signature;")
    assert not extract(smime).has_attachment


def test_an_inline_text_file_is_body_text_and_an_attached_one_an_attachment() -> None:
    html = b'Content-Type: text/html\r\nContent-Disposition: inline; filename="r.html"\r\n\r\n'
    attached = b'Content-Type: text/plain\r\nContent-Disposition: attachment; filename="a.txt"\r\n'
    text = extract(
        _mime(b"Content-Type: text/plain\r\n\r\nthe body", html + b"<p>quarterly report</p>")
    )
    assert "the body" in text.body and "quarterly report" in text.body
    assert not text.has_attachment
    assert text.filenames == "r.html"
    with_file = extract(_mime(b"Content-Type: text/plain\r\n\r\nthe body", attached + b"\r\nnotes"))
    assert with_file.has_attachment and "notes" not in with_file.body

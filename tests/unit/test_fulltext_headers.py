"""The lean header reading: the same headers and MIME facts (a multipart
boundary too) as the standard library's parser, whatever the block holds."""

from __future__ import annotations

import email.parser
import email.policy
from email.message import Message

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from projections.fulltext.headers import boundary, charset, kind, parse_head

_STD = email.parser.BytesParser(policy=email.policy.compat32)


def _std_kind(h: Message) -> tuple[str, str | None, str]:
    return h.get_content_type(), h.get_filename(), (h.get_content_disposition() or "").lower()


def _same(head: bytes) -> None:
    ours, std = parse_head(head), _STD.parsebytes(head, headersonly=True)
    assert list(ours.raw_items()) == list(std.raw_items())
    assert kind(ours) == _std_kind(std)
    assert charset(ours) == std.get_content_charset()
    assert boundary(ours) == std.get_boundary()


@pytest.mark.parametrize(
    "head",
    [
        b'Content-Type: text/plain;\r\n charset="ISO-8859-2"\r\nSubject: a\r\n b\r\n\r\n',
        b"content-type: TEXT/HTML; charset=utf-8\nContent-Type: text/plain\n\n",
        b'Content-Type: application/pdf; name="=?UTF-8?Q?R=C3=A9sum=C3=A9.pdf?="\r\n'
        b"Content-Disposition: ATTACHMENT; filename*=utf-8''%C3%9Cbersicht.xlsx\r\n\r\n",
        b"From someone@example.org Mon Jan  1 00:00:00 2024\r\nSubject: mbox\r\n\r\n",
        b" starts folded\r\nSubject: x\r\n\r\n",
        b": no name\r\nSubject: x\r\n\r\n",
        b"Subject: a\rX-Lone-CR: b\r\n\r\n",
        b"Subject: a\x0bX-Vertical-Tab: b\r\n\r\n",
        b"Subject: caf\xc3\xa9\r\nContent-Type: text/plain; charset=\xff\r\n\r\n",
        b"Subject: no blank line at the end",
        b"Subject: x\r\nnot a header line\r\nX-After: y\r\n\r\n",
        b'Content-Type: multipart/alternative;\r\n boundary="----=_Part_1_2.3"\r\n\r\n',
        b"Content-Type: MULTIPART/Mixed; BOUNDARY=simple-token  \r\n\r\n",
        b'Content-Type: multipart/mixed; boundary="trailing space "\r\n\r\n',
        b'Content-Type: multipart/mixed; boundary="a"; name="x.zip"\r\n\r\n',
        b'Content-Type: multipart/mixed; boundary=""\r\nContent-Disposition: attachment;'
        b' filename="m.eml"\r\n\r\n',
        b'Content-Type: multipart/mixed; boundary="caf\xc3\xa9"\r\n\r\n',
        b"",
    ],
)
def test_a_header_block_reads_as_the_standard_parser_reads_it(head: bytes) -> None:
    _same(head)


_PIECES = st.sampled_from(
    [
        b"Content-Type: ",
        b"Content-Disposition: ",
        b"content-type:",
        b"Subject: ",
        b"From ",
        b"From: ",
        b":",
        b"text/plain",
        b"multipart/mixed",
        b"; charset=utf-8",
        b"; charset*=us-ascii'en'%66oo",
        b'; name="a;b.txt"',
        b"; filename*0*=utf-8''%C3%A9; filename*1=x",
        b'; boundary="b"',
        b"multipart/alternative",
        b"; boundary=",
        b"; Boundary=",
        b"=_x-y.z",
        b"attachment",
        b"\r\n",
        b"\n",
        b"\r",
        b"\r\n ",
        b"\t",
        b" ",
        b"\x0c",
        b"\xc3\xa9",
        b"\xff",
        b"=?utf-8?q?=C3=A9?=",
        b'"',
        b"\\",
        b"x",
    ]
)


@settings(max_examples=500, deadline=None)
@given(st.lists(_PIECES, max_size=24).map(b"".join))
def test_any_block_reads_as_the_standard_parser_reads_it(head: bytes) -> None:
    _same(head)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_arbitrary_bytes_read_as_the_standard_parser_reads_them(head: bytes) -> None:
    _same(head)

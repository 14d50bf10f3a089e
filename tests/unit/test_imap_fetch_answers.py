"""Reading FETCH answers for bodies and envelopes from a real Dovecot: the common
shape is read without imapclient's lexer, and gives what imapclient's parser gives
(the byte literals of other shapes: ``test_imap_response``)."""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from imapclient.response_parser import parse_fetch_response

from pipeline.config import load_config, resolve_secret
from pipeline.sources.imap import ImapSource, response
from pipeline.sources.imap.response import ENVELOPE_ASK, bodies_fast, envelopes_fast

BODY = b"From: a@example.org\r\nSubject: hi\r\n\r\nbody\r\n"


@pytest.fixture
def source(imap_user: Callable[[str], Any], tmp_path: Path) -> ImapSource:
    user = imap_user("fastmail")
    when = datetime(2024, 3, 9, 23, 30, 5, tzinfo=UTC)
    for i in range(5):
        user.save("INBOX", BODY.replace(b"hi", f"hi {i}".encode()) + b"x" * i * 100, when=when)
    cfg = tmp_path / "config.toml"
    cfg.write_text(user.account_toml())
    env = {**os.environ, **user.dv.password_env()}
    account = load_config(cfg, env).accounts["fastmail"]
    src = ImapSource(account, resolve_secret(account, env))
    src.connect()
    src.examine("INBOX")
    return src


def test_dovecots_answers_read_the_same_both_ways(source: ImapSource) -> None:
    raw = source.fetch_raw([1, 2, 3, 4, 5], ["BODY.PEEK[]", "INTERNALDATE"], what="bodies")
    fast = bodies_fast(raw)
    assert fast is not None and [uid for uid, _, _ in fast] == [1, 2, 3, 4, 5]
    slow = parse_fetch_response(raw, False, True)
    assert {uid: body for uid, body, _ in fast} == {u: d[b"BODY[]"] for u, d in slow.items()}
    got = source.bodies([1, 2, 3, 4, 5, 99], dates=True)  # 99: not on the server
    assert sorted(got) == [1, 2, 3, 4, 5] and got[5].endswith(b"x" * 400)
    assert set(source.internal_dates.values()) == {datetime(2024, 3, 9, 23, 30, 5, tzinfo=UTC)}
    assert {u: source.internal_dates[u] for u in got} == {
        u: d[b"INTERNALDATE"].astimezone(UTC) for u, d in slow.items()
    }
    source.close()


def test_dovecots_envelopes_read_the_same_both_ways(source: ImapSource) -> None:
    raw = source.fetch_raw([1, 2, 3, 4, 5], ENVELOPE_ASK, what="envelopes")
    fast = envelopes_fast(raw)
    assert fast is not None and sorted(fast) == [1, 2, 3, 4, 5]
    assert fast == response._envelopes_parsed(raw)
    sizes = {len(BODY.replace(b"hi", f"hi {i}".encode())) + 100 * i for i in range(5)}
    assert {e.size for e in fast.values()} == sizes
    assert {e.internal_date for e in fast.values()} == {datetime(2024, 3, 9, 23, 30, 5, tzinfo=UTC)}
    source.close()


def test_imaplib_does_not_format_every_body_for_a_log_nobody_reads(source: ImapSource) -> None:
    """imapclient sets imaplib's debug level to 5: the repr of every body, twice."""
    assert source._c._imap.debug == 0
    source.close()

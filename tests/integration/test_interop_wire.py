"""The interop harness counts bodies in the server's stream itself (testkit/interop/wire.py)."""

from __future__ import annotations

from testkit.interop.wire import CountingProxy, count_bodies


def test_counts_full_bodies_in_each_servers_answer_shape() -> None:
    stream = (
        b"* OK ready\r\n"
        # Courier: quoted header field name; not a body
        b'* 1 FETCH (UID 1 BODY[HEADER.FIELDS ("MESSAGE-ID")] {21}\r\n'
        b"Message-ID: <a@b>\r\n\r\n)\r\n"
        # Dovecot / Cyrus: BODY[] then INTERNALDATE after it
        b'* 1 FETCH (UID 1 BODY[] {10}\r\n0123456789 INTERNALDATE "x")\r\n'
        # partial and RFC822 forms, lower case
        b"* 2 FETCH (UID 2 body[]<0> {3}\r\nabc)\r\n"
        b"* 3 FETCH (UID 3 RFC822 {4}\r\nwxyz)\r\n"
        b"A1 OK done\r\n"
    )
    assert count_bodies(stream) == (3, 17)


def test_text_inside_a_literal_is_data_not_a_body() -> None:
    inner = b"Subject: x\r\n\r\nsee * 9 FETCH (BODY[] {5}\r\nhello)\r\n"
    stream = b"* 1 FETCH (UID 1 BODY[] {%d}\r\n" % len(inner) + inner + b")\r\nA1 OK\r\n"
    assert count_bodies(stream) == (1, len(inner))


def test_header_only_fetches_count_no_body() -> None:
    stream = (
        b"* 1 FETCH (UID 1 BODY[HEADER.FIELDS (MESSAGE-ID)] {21}\r\nMessage-ID: <a@b>\r\n\r\n)\r\n"
        b"* 1 FETCH (UID 1 BODY[HEADER] {8}\r\nA: b\r\n\r\n)\r\n"
    )
    assert count_bodies(stream) == (0, 0)


def test_proxy_counts_what_a_real_server_sent(imap_user: object, dovecot: object) -> None:
    user = imap_user("plain")  # type: ignore[operator]
    raws = [
        b"Message-ID: <w%d@x>\r\nSubject: w\r\n\r\n" % i + b"body\r\n" * (i + 1) for i in range(2)
    ]
    for raw in raws:
        user.save("INBOX", raw)
    proxy = CountingProxy(("127.0.0.1", dovecot.imap_port)).start()  # type: ignore[attr-defined]
    try:
        from imapclient import IMAPClient

        client = IMAPClient("127.0.0.1", proxy.port, ssl=False, timeout=10)
        client.login("plain", user.password)
        client.select_folder("INBOX", readonly=True)
        uids = client.search("ALL")
        client.fetch(uids, ["BODY.PEEK[HEADER.FIELDS (MESSAGE-ID)]"])
        fetched = client.fetch(uids, ["BODY.PEEK[]"])
        client.logout()
        wire = proxy.take()
        assert (wire.bodies, wire.connections) == (2, 1)
        assert wire.body_bytes == sum(len(f[b"BODY[]"]) for f in fetched.values())
        assert wire.bytes_s2c > wire.body_bytes
        assert proxy.take(settle=0).connections == 0  # take() starts the count again
    finally:
        proxy.stop()

"""The Dovecot test server itself: logins, folders, seeding, UIDVALIDITY tricks and
the logs that let sync tests assert what crossed the wire."""

from __future__ import annotations

import poplib
import ssl
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from imapclient import IMAPClient

from pipeline.config import load_config
from testkit.dovecot import USERS, Dovecot, MailUser, iter_messages, mail_events, session_bytes

MakeUser = Callable[[str], MailUser]


def message(n: int, *, body: str = "hello") -> bytes:
    return (
        f"From: a@example.org\r\nTo: b@example.org\r\nSubject: test {n}\r\n"
        f"Date: Mon, 01 Jun 2026 10:00:00 +0000\r\nMessage-ID: <m{n}@example.org>\r\n"
        f"\r\n{body}\r\n"
    ).encode()


# --- logins ---------------------------------------------------------------------


@pytest.mark.parametrize("user", sorted(USERS))
def test_each_user_logs_in_over_plain_imap_and_imaps(dovecot: Dovecot, user: str) -> None:
    plain = IMAPClient("127.0.0.1", int(dovecot.env["DOVE_IMAP_PORT"]), ssl=False, timeout=10)
    plain.login(user, USERS[user])
    assert plain.select_folder("INBOX", readonly=True)[b"EXISTS"] >= 0
    plain.logout()

    ctx = ssl.create_default_context(cafile=dovecot.env["DOVE_CAFILE"])
    secure = IMAPClient(
        "127.0.0.1", int(dovecot.env["DOVE_IMAPS_PORT"]), ssl_context=ctx, timeout=10
    )
    secure.login(user, USERS[user])
    assert secure.noop()
    secure.logout()


def test_imaps_without_the_ca_file_fails_certificate_check(dovecot: Dovecot) -> None:
    with pytest.raises(ssl.SSLCertVerificationError):
        IMAPClient(
            "127.0.0.1", dovecot.imaps_port, ssl_context=ssl.create_default_context(), timeout=10
        )


def test_starttls_upgrades_the_plain_port(dovecot: Dovecot) -> None:
    client = dovecot.imap("plain", tls="starttls")
    assert client.noop()
    client.logout()


def test_pop3_login_plain_and_tls(imap_user: MakeUser) -> None:
    u = imap_user("plain")
    u.save("INBOX", message(1))
    for tls in ("none", "implicit"):
        conn = u.pop3(tls=tls)  # type: ignore[arg-type]
        count, _size = conn.stat()
        assert count == 1
        _resp, listing, _ = conn.uidl()
        # pop3_uidl_format = %08Xu%08Xv: UID then UIDVALIDITY, in hex
        uidvalidity = u.status("INBOX")["uidvalidity"]
        assert listing == [f"1 {1:08x}{uidvalidity:08x}".encode()]  # Dovecot: lower case
        conn.quit()
    with pytest.raises(poplib.error_proto):
        bad = poplib.POP3("127.0.0.1", int(u.dv.env["DOVE_POP3_PORT"]), timeout=10)
        bad.user("plain")
        bad.pass_("wrong")


# --- folders --------------------------------------------------------------------


def test_gmail_lists_special_use_folders_with_polish_names(dovecot: Dovecot) -> None:
    client = dovecot.imap("gmail")
    folders = {name: set(flags) for flags, _sep, name in client.list_folders()}
    client.logout()
    assert b"\\All" in folders["[Gmail]/Wszystkie"]
    assert b"\\Sent" in folders["[Gmail]/Wysłane"]  # decoded from modified UTF-7
    assert b"\\Flagged" in folders["[Gmail]/Oznaczone gwiazdką"]
    assert b"\\Junk" in folders["[Gmail]/Spam"]


def test_fastmail_and_plain_folders(dovecot: Dovecot) -> None:
    client = dovecot.imap("fastmail")
    special = {
        name: [f for f in flags if f not in (b"\\HasNoChildren", b"\\HasChildren")]
        for flags, _sep, name in client.list_folders()
    }
    client.logout()
    assert special == {
        "INBOX": [],
        "Archive": [b"\\Archive"],
        "Drafts": [b"\\Drafts"],
        "Sent": [b"\\Sent"],
        "Spam": [b"\\Junk"],
        "Trash": [b"\\Trash"],
    }
    client = dovecot.imap("plain")
    names = {name: flags for flags, _sep, name in client.list_folders()}
    client.logout()
    assert set(names) == {"INBOX", "Sent Items", "Deleted Items"}
    assert not any(b"\\Sent" in f or b"\\Trash" in f for f in names.values())


# --- seeding and state ------------------------------------------------------------


def test_save_and_fetch_round_trip_without_setting_seen(imap_user: MakeUser) -> None:
    u = imap_user("gmail")
    raw = message(1)
    when = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
    uid = u.save("[Gmail]/Wysłane", raw, when=when)
    assert uid == 1
    client = u.imap()
    client.select_folder("[Gmail]/Wysłane", readonly=True)  # EXAMINE
    got = client.fetch([uid], ["BODY.PEEK[]", "INTERNALDATE", "FLAGS"])[uid]
    client.logout()
    assert got[b"BODY[]"] == raw
    assert got[b"INTERNALDATE"].astimezone(UTC) == when
    assert u.flags("[Gmail]/Wysłane") == {1: ()}


def test_reset_user_empties_folders_and_gives_new_uidvalidity(imap_user: MakeUser) -> None:
    u = imap_user("fastmail")
    u.save("INBOX", message(1))
    before = u.status("INBOX")
    u.reset()
    after = u.status("INBOX")
    assert after["messages"] == 0 and after["uidnext"] == 1
    assert after["uidvalidity"] != before["uidvalidity"]


def test_set_uidvalidity_shows_in_status_over_a_new_connection(imap_user: MakeUser) -> None:
    u = imap_user("gmail")
    u.save("INBOX", message(1))
    u.set_uidvalidity("INBOX", 12345)
    client = u.imap()
    status = client.folder_status("INBOX", [b"UIDVALIDITY", b"UIDNEXT", b"MESSAGES"])
    client.logout()
    assert status[b"UIDVALIDITY"] == 12345
    assert (status[b"UIDNEXT"], status[b"MESSAGES"]) == (2, 1)


def test_lose_state_renumbers_under_a_new_uidvalidity(imap_user: MakeUser) -> None:
    u = imap_user("plain")
    for n in range(1, 6):
        u.save("Sent Items", message(n))
    u.expunge("Sent Items", 2)
    assert u.uids("Sent Items") == [1, 3, 4, 5]
    old = u.status("Sent Items")["uidvalidity"]
    new = u.lose_state("Sent Items")
    assert new != old
    assert u.uids("Sent Items") == [1, 2, 3, 4]
    assert u.status("Sent Items")["uidnext"] == 5


def test_bulk_maildir_gives_uids_in_date_order(imap_user: MakeUser) -> None:
    u = imap_user("gmail")
    msgs = list(iter_messages(300))
    assert u.bulk_maildir("[Gmail]/Wszystkie", msgs) == 300
    assert u.status("[Gmail]/Wszystkie")["messages"] == 300
    client = u.imap()
    client.select_folder("[Gmail]/Wszystkie", readonly=True)
    since = client.search(["SINCE", msgs[250][0].date()])
    first = client.fetch([1, 300], ["BODY.PEEK[HEADER.FIELDS (MESSAGE-ID)]", "INTERNALDATE"])
    client.logout()
    assert b"<bulk-0@" in first[1][b"BODY[HEADER.FIELDS (MESSAGE-ID)]"]
    assert b"<bulk-299@" in first[300][b"BODY[HEADER.FIELDS (MESSAGE-ID)]"]
    assert first[300][b"INTERNALDATE"].astimezone(UTC) == msgs[299][0]
    assert min(since) >= 240 and max(since) == 300
    assert set(u.flags("[Gmail]/Wszystkie").values()) == {()}  # nothing marked \Seen


# --- logs: what crossed the wire ------------------------------------------------------


def test_session_bytes_count_bodies_not_envelopes(imap_user: MakeUser) -> None:
    u = imap_user("fastmail")
    raw = message(1, body="x" * 5000)
    uid = u.save("Archive", raw)
    dv = u.dv

    mark = dv.log_mark()
    client = u.imap()
    client.select_folder("Archive", readonly=True)
    client.fetch([uid], ["ENVELOPE", "RFC822.SIZE", "FLAGS"])
    client.logout()
    [envelope_only] = u.sessions_since(mark)
    assert envelope_only.logged_out
    assert envelope_only.body_count == 0 and envelope_only.body_bytes == 0
    assert envelope_only["out"] < 2000

    mark = dv.log_mark()
    client = u.imap()
    client.select_folder("Archive", readonly=True)
    client.fetch([uid], ["BODY.PEEK[]"])
    client.logout()
    [with_body] = u.sessions_since(mark)
    assert (with_body.body_count, with_body.body_bytes) == (1, len(raw))
    assert with_body["out"] > len(raw)
    assert dv.mail_events(mark) == []  # PEEK: no flag changed


def test_mail_log_records_an_implicit_seen(imap_user: MakeUser) -> None:
    u = imap_user("gmail")
    uid = u.save("INBOX", message(7))
    mark = u.dv.log_mark()
    client = u.imap()
    client.select_folder("INBOX")
    client.fetch([uid], ["BODY[]"])  # no PEEK: the server sets \Seen
    client.logout()
    u.sessions_since(mark)
    [event] = u.dv.mail_events(mark)
    assert (event.event, event.box, event.uid, event.msgid) == (
        "flag_change",
        "INBOX",
        uid,
        "<m7@example.org>",
    )
    assert "\\Seen" in event.flags
    assert u.flags("INBOX")[uid] == ("\\Seen",)


def test_pop3_session_counts_retrieved_messages(imap_user: MakeUser) -> None:
    u = imap_user("plain")
    u.save("INBOX", message(1))
    u.save("INBOX", message(2))
    mark = u.dv.log_mark()
    conn = u.pop3()
    conn.retr(2)
    conn.quit()
    [s] = u.sessions_since(mark, protocol="pop3")
    assert s.retr_count == 1 and s.retr_bytes > 0
    assert s["messages"] == 2


def test_rawlog_shows_the_commands_a_client_sent(imap_user: MakeUser) -> None:
    u = imap_user("fastmail")
    mark = u.dv.log_mark()
    client = u.imap()
    client.select_folder("INBOX", readonly=True)
    client.logout()
    u.sessions_since(mark)
    sent = " ".join(u.client_lines())
    assert "EXAMINE" in sent and "SELECT" not in sent
    assert "pw-fastmail" not in sent  # LOGIN happens before the raw log starts


def test_session_bytes_parses_logout_lines() -> None:
    text = (
        "2026-06-01T10:00:00 imap(gmail)<7><abc>: Info: Disconnected: Logged out in=202 "
        "out=1570 deleted=0 expunged=0 trashed=0 hdr_count=0 hdr_bytes=0 body_count=1 "
        "body_bytes=56\n"
        "2026-06-01T10:00:01 imap(fastmail)<8><def>: Info: Disconnected: Connection closed "
        "(SELECT finished 0.005 secs ago) in=41 out=1018 deleted=0 expunged=0 trashed=0 "
        "hdr_count=0 hdr_bytes=0 body_count=0 body_bytes=0\n"
        "2026-06-01T10:00:02 pop3(plain)<9><ghi>: Info: Disconnected: Logged out top=0/0, "
        "retr=1/71, del=0/1, size=56\n"
        "2026-06-01T10:00:03 imap(gmail)<7><abc>: Info: expunge: box=[Gmail]/Kosz, uid=4, "
        "msgid=<x@y>, size=51, vsize=56, flags=(\\Deleted)\n"
    )
    a, b, c = session_bytes(text)
    assert (a.user, a.body_count, a.body_bytes, a["in"], a.logged_out) == (
        "gmail",
        1,
        56,
        202,
        True,
    )
    assert b.reason.startswith("Connection closed") and b["out"] == 1018
    assert (c.protocol, c.retr_count, c.retr_bytes, c["messages"]) == ("pop3", 1, 71, 1)
    [ev] = mail_events(text)
    assert (ev.event, ev.box, ev.uid, ev.flags) == ("expunge", "[Gmail]/Kosz", 4, ("\\Deleted",))


# --- config for the code under test ------------------------------------------------


def test_account_toml_loads_with_pipeline_config(dovecot: Dovecot, tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(
        dovecot.account_toml("gmail", folders=["\\All"])
        + dovecot.account_toml("fastmail", tls="implicit")
        + dovecot.account_toml("plain", name="plain-pop", type="pop3")
    )
    config = load_config(path, dovecot.password_env())
    gmail = config.accounts["gmail"]
    assert (gmail.host, gmail.port, gmail.tls, gmail.folders) == (
        "127.0.0.1",
        dovecot.imap_port,
        "none",
        ("\\All",),
    )
    assert config.accounts["fastmail"].ca_file == dovecot.cafile
    assert config.accounts["plain-pop"].port == dovecot.pop3_port

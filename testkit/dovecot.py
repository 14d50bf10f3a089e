"""A real Dovecot 2.3 on 127.0.0.1 for the IMAP and POP3 tests.

One private server per test session: its config, sockets, state, log, TLS
certificate, raw protocol logs and mail all live in one directory under /tmp;
``/etc/dovecot`` and the system service are never used. Free ports are picked
at start, so parallel sessions do not collide.

    dv = Dovecot()
    dv.start()                       # ~0.1-0.2 s; a directory under /tmp
    uid = dv.save("gmail", "INBOX", raw)          # IMAP APPEND, returns the UID
    mark = dv.log_mark()
    ... the code under test syncs over dv.imap_port ...
    [s] = dv.sessions_since(mark, user="gmail")   # waits for the logout line
    assert s.body_count == 0                      # no body crossed the wire
    assert dv.mail_events(mark) == []             # no flag changed, nothing expunged
    dv.stop()                        # ~1.1 s: the master waits 1 s for its log process

Users (password ``pw-<name>``): ``gmail`` (Gmail-like, Polish names: ``\\All`` is
``[Gmail]/Wszystkie``), ``fastmail`` (INBOX, Archive, Drafts, Sent, Spam, Trash
with SPECIAL-USE) and ``plain`` (INBOX, "Sent Items", "Deleted Items", no
SPECIAL-USE). Folders exist and are subscribed from the first login.

What the log lets a test assert (``mail_log`` is on for IMAP and POP3, off for
doveadm, so only the code under test and :meth:`Dovecot.save` show up):

- per session, on logout: IMAP ``in= out= deleted= expunged= trashed=
  hdr_count= hdr_bytes= body_count= body_bytes=``, POP3 ``top=n/bytes
  retr=n/bytes del=n/messages size=`` (:func:`session_bytes`);
- every save, copy, expunge and flag change, with box, uid and Message-ID
  (:func:`mail_events`), e.g. a fetch without PEEK logs ``flag_change ...
  flags=(\\Seen)``;
- the raw post-login protocol of each session (:meth:`Dovecot.client_lines`);
  the LOGIN command itself is not recorded (it happens in the login process).

Gotchas this module handles (see ``shared/reference/dovecot-loopback.md``):
parents of the directory must be world-searchable (so not pytest's
``tmp_path``); Dovecot keeps the stdio it was started with (never a pipe);
stale sockets slow a start (fresh ``run/``); the auth failure penalty is off;
as root, mail processes run as ``nobody`` and Maildirs written directly must be
chowned to that uid; doveadm always gets ``-c``.
"""

from __future__ import annotations

import contextlib
import ctypes
import email.utils
import os
import poplib
import re
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Literal

from imapclient import IMAPClient, imap_utf7

__all__ = [
    "USERS",
    "Dovecot",
    "DovecotError",
    "MailEvent",
    "MailUser",
    "Ports",
    "RawLog",
    "Session",
    "find_dovecot",
    "iter_messages",
    "mail_events",
    "session_bytes",
]

#: user -> password
USERS: dict[str, str] = {"gmail": "pw-gmail", "fastmail": "pw-fastmail", "plain": "pw-plain"}
HOST = "127.0.0.1"
_SBIN = ("/usr/sbin", "/usr/local/sbin", "/sbin")
Tls = Literal["none", "implicit", "starttls"]


class DovecotError(RuntimeError):
    """The test server could not be started, stopped or driven."""


def find_dovecot() -> str | None:
    """Path of the ``dovecot`` binary (also looked for in sbin, absent from a
    non-root PATH), or None when it is not installed."""
    path = os.environ.get("PATH", "") + os.pathsep + os.pathsep.join(_SBIN)
    return shutil.which("dovecot", path=path)


@dataclass(frozen=True)
class Ports:
    imap: int
    imaps: int
    pop3: int
    pop3s: int

    @classmethod
    def free(cls) -> Ports:
        """Four ports nobody listens on right now (the kernel's choice)."""
        socks = []
        try:
            for _ in range(4):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.bind((HOST, 0))
                socks.append(s)
            return cls(*(s.getsockname()[1] for s in socks))
        finally:
            for s in socks:
                s.close()


# --- the log -------------------------------------------------------------------

_SESSION_END = re.compile(
    r"^(?P<ts>\S+) (?P<proto>imap|pop3)\((?P<user>[^)]*)\)<(?P<pid>\d+)><(?P<session>[^>]*)>: "
    r"Info: (?:Disconnected: )?(?P<reason>.*?) (?P<stats>(?:in=\d+ out=\d+|top=\d+/\d+).*)$"
)
_MAIL_EVENT = re.compile(
    r"^(?P<ts>\S+) (?P<proto>imap|pop3)\((?P<user>[^)]*)\)<(?P<pid>\d+)><(?P<session>[^>]*)>: "
    r"Info: (?P<event>save|copy|delete|undelete|expunge|flag_change|mailbox_create|"
    r"mailbox_delete|mailbox_rename): (?P<fields>.*)$"
)
_LOGIN = re.compile(r"(?:imap|pop3)-login: Info: Login: user=<[^>]*>.*session=<(?P<session>[^>]*)>")
_FIELD = re.compile(r"(\w+)=(\([^)]*\)|[^,]*)(?:, |$)")
_POP3_PAIRS = {
    "top": ("top_count", "top_bytes"),
    "retr": ("retr_count", "retr_bytes"),
    "del": ("del_count", "messages"),
}


@dataclass(frozen=True)
class Session:
    """One IMAP or POP3 session, from the line Dovecot logs when it ends.

    ``counters`` has, for IMAP: in, out, deleted, expunged, trashed, hdr_count,
    hdr_bytes, body_count, body_bytes; for POP3: top_count, top_bytes,
    retr_count, retr_bytes, del_count, messages, size. ``in``/``out`` count the
    bytes after login; ``body_bytes`` the message bytes of BODY[]/RFC822 fetches
    (with or without PEEK); envelopes, flags and sizes are not bodies.
    """

    protocol: Literal["imap", "pop3"]
    user: str
    pid: int
    session: str
    reason: str  # "Logged out", "Connection closed (...)", ...
    counters: dict[str, int]

    def __getitem__(self, key: str) -> int:
        return self.counters.get(key, 0)

    @property
    def logged_out(self) -> bool:
        return self.reason == "Logged out"

    @property
    def body_count(self) -> int:
        return self["body_count"]

    @property
    def body_bytes(self) -> int:
        return self["body_bytes"]

    @property
    def retr_count(self) -> int:
        return self["retr_count"]

    @property
    def retr_bytes(self) -> int:
        return self["retr_bytes"]


def session_bytes(log_text: str) -> list[Session]:
    """Every IMAP/POP3 session that ended in ``log_text`` (e.g. ``log_since(mark)``),
    in log order, with what crossed the wire."""
    out: list[Session] = []
    for line in log_text.splitlines():
        m = _SESSION_END.match(line)
        if not m:
            continue
        counters: dict[str, int] = {}
        for key, a, b in re.findall(r"(\w+)=(\d+)(?:/(\d+))?", m["stats"]):
            if key in _POP3_PAIRS:
                first, second = _POP3_PAIRS[key]
                counters[first] = int(a)
                counters[second] = int(b or 0)
            else:
                counters[key] = int(a)
        out.append(
            Session(
                "pop3" if m["proto"] == "pop3" else "imap",
                m["user"],
                int(m["pid"]),
                m["session"],  # type: ignore[arg-type]
                m["reason"],
                counters,
            )
        )
    return out


@dataclass(frozen=True)
class MailEvent:
    """A ``mail_log`` line: something a client changed (save, copy, expunge,
    flag_change, ...). ``box`` is the UTF-8 folder name; ``flags`` the flags
    after the change."""

    protocol: str
    user: str
    event: str
    box: str
    uid: int | None
    msgid: str | None
    flags: tuple[str, ...]
    fields: dict[str, str]


def mail_events(log_text: str) -> list[MailEvent]:
    """Every change IMAP/POP3 clients made in ``log_text``, in order."""
    out: list[MailEvent] = []
    for line in log_text.splitlines():
        m = _MAIL_EVENT.match(line)
        if not m:
            continue
        fields = {k: v for k, v in _FIELD.findall(m["fields"])}
        flags = tuple(fields.get("flags", "()").strip("()").split())
        uid = fields.get("uid")
        out.append(
            MailEvent(
                m["proto"],
                m["user"],
                m["event"],
                fields.get("box", ""),
                int(uid) if uid and uid.isdigit() else None,
                fields.get("msgid") or None,
                flags,
                fields,
            )
        )
    return out


@dataclass(frozen=True)
class RawLog:
    """The post-login protocol of one session: ``.in`` is what the client sent,
    ``.out`` what the server answered (each line prefixed with a timestamp by
    Dovecot; :meth:`client_lines` strips it). Complete once the session ended."""

    client: Path
    server: Path

    @staticmethod
    def _lines(path: Path) -> list[str]:
        text = path.read_text("utf-8", "replace") if path.exists() else ""
        return [line.split(" ", 1)[1] if " " in line else "" for line in text.splitlines()]

    def client_lines(self) -> list[str]:
        return self._lines(self.client)

    def server_lines(self) -> list[str]:
        return self._lines(self.server)


# --- process helpers -----------------------------------------------------------


def _alive(pid: int) -> bool:
    """True while pid exists and is not a zombie (pid 1 may reap slowly)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _descendants(root: int) -> list[int]:
    kids: dict[int, list[int]] = {}
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            ppid = int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(p.name))
    out, queue = [], [root]
    while queue:
        for c in kids.get(queue.pop(), []):
            out.append(c)
            queue.append(c)
    return out


_TMP_PREFIX = "mailledger-dovecot."


def _sweep_stale(min_age: float = 600.0) -> None:
    """Remove our old server directories left by a killed test run (the master
    itself died with its parent): ours, older than ``min_age`` seconds, and no
    live process started with their config."""
    cmdlines = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            with contextlib.suppress(OSError):
                cmdlines.append((p / "cmdline").read_bytes())
    for d in Path("/tmp").glob(_TMP_PREFIX + "*"):
        try:
            st = d.lstat()
        except OSError:
            continue
        if (
            not d.is_dir()
            or d.is_symlink()
            or st.st_uid != os.geteuid()
            or time.time() - st.st_mtime < min_age
        ):
            continue
        conf = str(d / "etc/dovecot.conf").encode()
        if not any(conf in c for c in cmdlines):
            shutil.rmtree(d, ignore_errors=True)


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM the master if pytest dies (even by SIGKILL)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _maildir_date(raw: bytes) -> float | None:
    head = raw.split(b"\n\n", 1)[0].split(b"\r\n\r\n", 1)[0]
    m = re.search(rb"^Date:[ \t]*(.+)$", head, re.MULTILINE | re.IGNORECASE)
    if not m:
        return None
    try:
        stamp = m[1].decode("ascii", "replace").strip()
        return email.utils.parsedate_to_datetime(stamp).timestamp()
    except (TypeError, ValueError, IndexError):
        return None


# --- the config ----------------------------------------------------------------

_MAIL_LOG_EVENTS = (
    "save copy delete undelete expunge flag_change mailbox_create mailbox_delete mailbox_rename"
)


def _render_config(d: Path, ports: Ports, *, root: bool, rawlog: bool) -> str:
    rawlog_line = f"  rawlog_dir = {d}/rawlog/%u\n" if rawlog else ""
    rootless = ""
    if not root:
        import grp
        import pwd

        me = pwd.getpwuid(os.getuid()).pw_name
        group = grp.getgrgid(os.getgid()).gr_name
        rootless = f"""
# rootless: no setuid, chown or chroot
default_internal_user = {me}
default_internal_group = {group}
default_login_user = {me}
service anvil {{
  chroot =
}}
service imap-login {{
  chroot =
}}
service pop3-login {{
  chroot =
}}
"""
    return f"""# Written by mailledger's testkit/dovecot.py; self-contained, no /etc/dovecot.
instance_name = mailledger-test
# the greeting names this directory, so start() knows it reached this server
login_greeting = mailledger-test {d.name}
base_dir = {d}/run
state_dir = {d}/state
log_path = {d}/log/dovecot.log
log_timestamp = "%Y-%m-%dT%H:%M:%S "
auth_verbose = yes

protocols = imap pop3
listen = {HOST}
shutdown_clients = yes

ssl = yes
ssl_cert = <{d}/ssl/cert.pem
ssl_key = <{d}/ssl/key.pem

# cleartext LOGIN / AUTH PLAIN without TLS (loopback only)
disable_plaintext_auth = no
auth_mechanisms = plain login
auth_failure_delay = 0
login_trusted_networks = 127.0.0.0/8

passdb {{
  driver = passwd-file
  args = scheme=PLAIN {d}/etc/passwd
}}
userdb {{
  driver = passwd-file
  args = {d}/etc/passwd
}}
first_valid_uid = 1
first_valid_gid = 1

mail_location = maildir:~/Maildir
mail_fsync = never
pop3_uidl_format = %08Xu%08Xv
# every save/copy/expunge/flag change of an IMAP or POP3 session is logged
# (not doveadm's: it would print them on stderr)
plugin {{
  mail_log_events = {_MAIL_LOG_EVENTS}
  mail_log_fields = uid box msgid size vsize flags
}}
protocol imap {{
  mail_plugins = $mail_plugins notify mail_log
  mail_max_userip_connections = 50
{rawlog_line}}}
protocol pop3 {{
  mail_plugins = $mail_plugins notify mail_log
  mail_max_userip_connections = 50
{rawlog_line}}}

# user "plain" gets this namespace; gmail/fastmail switch to theirs in passwd
namespace plain {{
  inbox = yes
  prefix =
  separator = /
  mailbox "Sent Items" {{
    auto = subscribe
  }}
  mailbox "Deleted Items" {{
    auto = subscribe
  }}
}}
namespace gmail {{
  disabled = yes
  inbox = yes
  prefix =
  separator = /
  mailbox "[Gmail]/Wszystkie" {{
    auto = subscribe
    special_use = \\All
  }}
  mailbox "[Gmail]/Spam" {{
    auto = subscribe
    special_use = \\Junk
  }}
  mailbox "[Gmail]/Kosz" {{
    auto = subscribe
    special_use = \\Trash
  }}
  mailbox "[Gmail]/Wersje robocze" {{
    auto = subscribe
    special_use = \\Drafts
  }}
  mailbox "[Gmail]/Wysłane" {{
    auto = subscribe
    special_use = \\Sent
  }}
  mailbox "[Gmail]/Oznaczone gwiazdką" {{
    auto = subscribe
    special_use = \\Flagged
  }}
}}
namespace fastmail {{
  disabled = yes
  inbox = yes
  prefix =
  separator = /
  mailbox Archive {{
    auto = subscribe
    special_use = \\Archive
  }}
  mailbox Drafts {{
    auto = subscribe
    special_use = \\Drafts
  }}
  mailbox Sent {{
    auto = subscribe
    special_use = \\Sent
  }}
  mailbox Spam {{
    auto = subscribe
    special_use = \\Junk
  }}
  mailbox Trash {{
    auto = subscribe
    special_use = \\Trash
  }}
}}

# the built-in defaults also listen on 143/993/110/995: override all four
service imap-login {{
  inet_listener imap {{
    address = {HOST}
    port = {ports.imap}
  }}
  inet_listener imaps {{
    address = {HOST}
    port = {ports.imaps}
    ssl = yes
  }}
}}
service pop3-login {{
  inet_listener pop3 {{
    address = {HOST}
    port = {ports.pop3}
  }}
  inet_listener pop3s {{
    address = {HOST}
    port = {ports.pop3s}
    ssl = yes
  }}
}}
# no anvil auth penalty: a wrong password costs 0.5 s, not 4.5 s
service anvil {{
  unix_listener anvil-auth-penalty {{
    mode = 0
  }}
}}
{rootless}"""


def toml_value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str | Path):
        s = str(v)
        return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, list | tuple):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    raise TypeError(f"no TOML for {v!r}")


# --- the server ----------------------------------------------------------------


@dataclass
class Dovecot:
    """A private Dovecot on 127.0.0.1. ``start()``, use, ``stop()``.

    ``ports``: None picks free ones. ``rawlog``: keep each session's post-login
    protocol under ``dir/rawlog/<user>/`` (cheap, but it doubles the bytes
    written when a test moves thousands of messages).
    """

    ports: Ports | None = None
    rawlog: bool = True
    start_timeout: float = 10.0
    extra_users: dict[str, str] = field(default_factory=dict)
    """More users (name -> password) beside ``USERS``, in the plain namespace: a
    simulation of many mailboxes (bench/scale_sim.py)."""
    dir: Path = field(init=False, default=Path())
    mail_uid: int = field(init=False, default=-1)
    mail_gid: int = field(init=False, default=-1)
    startup_ms: int = field(init=False, default=0)
    _proc: subprocess.Popen[bytes] | None = field(init=False, default=None, repr=False)
    _own_dir: bool = field(init=False, default=False, repr=False)

    # -- lifecycle ---------------------------------------------------------------

    def start(self, directory: Path | None = None) -> None:
        """Write the config into ``directory`` (default: a new one under /tmp),
        start the master in the foreground and wait for the IMAP greeting."""
        binary = find_dovecot()
        if binary is None:
            raise DovecotError(
                "dovecot is not installed: apt-get install -y dovecot-imapd dovecot-pop3d openssl"
            )
        version = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, check=False
        ).stdout.strip()
        if not version.startswith("2.3."):
            raise DovecotError(
                f"dovecot {version!r}: this harness is written for 2.3 (2.4 renamed many settings)"
            )
        if directory is None:
            _sweep_stale()
            directory = Path(tempfile.mkdtemp(prefix=_TMP_PREFIX, dir="/tmp"))
            self._own_dir = True
        self.dir = Path(directory).resolve()
        root = os.geteuid() == 0
        self._prepare(root)
        auto_ports = self.ports is None
        for _attempt in range(3 if auto_ports else 1):
            if auto_ports:
                self.ports = Ports.free()
            assert self.ports is not None
            self._write_config(root)
            try:
                self._launch(binary)
                return
            except DovecotError as exc:
                if not (auto_ports and "in use" in str(exc)):
                    raise
        raise DovecotError("no free ports after 3 attempts")

    def _prepare(self, root: bool) -> None:
        d = self.dir
        if root:
            self.mail_uid = self.mail_gid = 65534  # Dovecot never accesses mail as root
            import pwd

            for user in ("dovecot", "dovenull"):
                try:
                    pwd.getpwnam(user)
                except KeyError:
                    msg = f"system user {user} missing (dovecot-core makes it)"
                    raise DovecotError(msg) from None
            # auth (dovecot) and mail (nobody) processes must walk down to d
            for parent in d.parents:
                if not parent.stat().st_mode & 0o001:
                    raise DovecotError(
                        f"{parent} is not world-searchable; use a directory "
                        "under /tmp (not pytest's tmp_path)"
                    )
        else:
            self.mail_uid, self.mail_gid = os.getuid(), os.getgid()
        d.mkdir(parents=True, exist_ok=True)
        for sub in ("etc", "run", "state", "log", "ssl", "mail", "rawlog"):
            (d / sub).mkdir(exist_ok=True)
        for sub in ("", "etc", "run", "state", "log", "mail", "rawlog"):
            (d / sub).chmod(0o755)
        cert, key = d / "ssl/cert.pem", d / "ssl/key.pem"
        if not (cert.exists() and key.exists()):
            done = subprocess.run(
                [
                    "openssl",
                    "req",
                    "-x509",
                    "-newkey",
                    "ec",
                    "-pkeyopt",
                    "ec_paramgen_curve:prime256v1",
                    "-nodes",
                    "-keyout",
                    str(key),
                    "-out",
                    str(cert),
                    "-days",
                    "3650",
                    "-subj",
                    "/CN=localhost",
                    "-addext",
                    "subjectAltName=DNS:localhost,IP:127.0.0.1",
                ],
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode:
                raise DovecotError(f"openssl failed: {done.stderr.strip()}")
            key.chmod(0o600)
        lines = []
        for user, password in self.users.items():
            extra = (
                ""
                if user == "plain"
                else (f"userdb_namespace/plain/disabled=yes userdb_namespace/{user}/disabled=no")
            )
            lines.append(
                f"{user}:{{PLAIN}}{password}:{self.mail_uid}:{self.mail_gid}::"
                f"{d}/mail/{user}::{extra}"
            )
            for home in (d / "mail" / user, d / "rawlog" / user):
                home.mkdir(exist_ok=True)
                self._chown(home)
        (d / "etc/passwd").write_text("\n".join(lines) + "\n")
        (d / "etc/passwd").chmod(0o644)

    def _write_config(self, root: bool) -> None:
        assert self.ports is not None
        (self.dir / "etc/dovecot.conf").write_text(
            _render_config(self.dir, self.ports, root=root, rawlog=self.rawlog)
        )

    def _launch(self, binary: str) -> None:
        # a stale socket (e.g. anvil-auth-penalty) makes auth retry for 5 s
        shutil.rmtree(self.dir / "run", ignore_errors=True)
        (self.dir / "run").mkdir(mode=0o755)
        startup_log = self.dir / "log/startup.log"
        mark = self.log_mark()
        t0 = time.monotonic()
        # Dovecot keeps the stdio it is given: files, never our pipes. -F: it stays
        # our child, so stop() can wait for it.
        with open(startup_log, "ab") as out:
            self._proc = subprocess.Popen(
                [binary, "-F", "-c", str(self.conf)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        deadline = t0 + self.start_timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                break
            if self._greeting():
                self.startup_ms = int((time.monotonic() - t0) * 1000)
                return
            time.sleep(0.02)
        why = (startup_log.read_text(errors="replace") + self.log_since(mark)).strip()
        self._terminate()
        raise DovecotError(f"no IMAP greeting on {HOST}:{self.imap_port}: {why[-2000:]}")

    def _greeting(self) -> bool:
        try:
            with socket.create_connection((HOST, self.imap_port), timeout=2) as s:
                line = s.makefile("rb").readline()
        except OSError:
            return False
        return line.startswith(b"* OK") and f"mailledger-test {self.dir.name}".encode() in line

    def _terminate(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        kids = _descendants(proc.pid)
        proc.terminate()
        try:
            proc.wait(timeout=10)  # ~1.1 s: the master waits 1 s for its log process
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        deadline = time.monotonic() + 3
        while any(_alive(k) for k in kids) and time.monotonic() < deadline:
            time.sleep(0.05)
        for k in kids:
            if _alive(k):
                with contextlib.suppress(OSError):
                    os.kill(k, signal.SIGKILL)

    def stop(self, *, remove: bool | None = None) -> None:
        """Stop the master and every process it started; remove the directory if
        start() made it (or if ``remove``)."""
        self._terminate()
        if remove if remove is not None else self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def __enter__(self) -> Dovecot:
        if not self.running:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- where things are ----------------------------------------------------------

    @property
    def conf(self) -> Path:
        return self.dir / "etc/dovecot.conf"

    @property
    def cafile(self) -> Path:
        """The server's self-signed certificate: the CA a client must trust."""
        return self.dir / "ssl/cert.pem"

    @property
    def log_path(self) -> Path:
        return self.dir / "log/dovecot.log"

    @property
    def host(self) -> str:
        return HOST

    def _port(self, name: str) -> int:
        if self.ports is None:
            raise DovecotError("not started")
        return int(getattr(self.ports, name))

    @property
    def imap_port(self) -> int:
        return self._port("imap")

    @property
    def imaps_port(self) -> int:
        return self._port("imaps")

    @property
    def pop3_port(self) -> int:
        return self._port("pop3")

    @property
    def pop3s_port(self) -> int:
        return self._port("pop3s")

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def env(self) -> dict[str, str]:
        """The same KEY=VALUE facts as the reference script's dovecot.env."""
        return {
            "DOVE_DIR": str(self.dir),
            "DOVE_PID": str(self.pid or ""),
            "DOVE_HOST": HOST,
            "DOVE_IMAP_PORT": str(self.imap_port),
            "DOVE_IMAPS_PORT": str(self.imaps_port),
            "DOVE_POP3_PORT": str(self.pop3_port),
            "DOVE_POP3S_PORT": str(self.pop3s_port),
            "DOVE_CONF": str(self.conf),
            "DOVE_CAFILE": str(self.cafile),
            "DOVE_LOG": str(self.log_path),
            "DOVE_MAIL_UID": str(self.mail_uid),
            "DOVE_MAIL_GID": str(self.mail_gid),
            "DOVE_USERS": ",".join(f"{u}:{p}" for u, p in self.users.items()),
            "DOVE_MAILDIR_TEMPLATE": f"{self.dir}/mail/%u/Maildir",
            "DOVE_DOVEADM": f"doveadm -c {self.conf}",
            "DOVE_STARTUP_MS": str(self.startup_ms),
        }

    @property
    def users(self) -> dict[str, str]:
        """Every user of this server and its password."""
        return {**USERS, **self.extra_users}

    def user(self, name: str) -> MailUser:
        if name not in self.users:
            raise KeyError(f"no test user {name!r} (users: {', '.join(self.users)})")
        return MailUser(self, name, self.users[name])

    def maildir(self, user: str, folder: str = "INBOX") -> Path:
        """The Maildir++ directory of ``folder`` (UTF-8 IMAP name, ``/`` separator)."""
        root = self.dir / "mail" / user / "Maildir"
        if folder.upper() == "INBOX":
            return root
        if "." in folder:
            raise ValueError(f"{folder!r}: Maildir++ cannot hold a '.' in a folder name")
        return root / ("." + str(imap_utf7.encode(folder), "ascii").replace("/", "."))

    # -- clients -------------------------------------------------------------------

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.cafile))

    def imap(self, user: str, tls: Tls = "none") -> IMAPClient:
        """A logged-in IMAPClient (``none``: plain port; ``implicit``: IMAPS;
        ``starttls``: plain port upgraded). The caller logs out."""
        if tls == "implicit":
            client = IMAPClient(
                HOST, self.imaps_port, ssl=True, ssl_context=self.ssl_context(), timeout=10
            )
        else:
            client = IMAPClient(HOST, self.imap_port, ssl=False, timeout=10)
            if tls == "starttls":
                client.starttls(self.ssl_context())
        client.login(user, self.users[user])
        return client

    def pop3(self, user: str, tls: Tls = "none") -> poplib.POP3:
        """A logged-in POP3 connection; the caller sends quit()."""
        conn: poplib.POP3
        if tls == "implicit":
            conn = poplib.POP3_SSL(HOST, self.pop3s_port, context=self.ssl_context(), timeout=10)
        else:
            conn = poplib.POP3(HOST, self.pop3_port, timeout=10)
            if tls == "starttls":
                conn.stls(self.ssl_context())
        conn.user(user)
        conn.pass_(self.users[user])
        return conn

    # -- doveadm -------------------------------------------------------------------

    def doveadm(self, *args: str, input: bytes | None = None, ok: Iterable[int] = (0,)) -> str:
        """Run ``doveadm -c CONF ARGS`` (never the system config); its stdout."""
        done = subprocess.run(
            ["doveadm", "-c", str(self.conf), *args], input=input, capture_output=True, check=False
        )
        if done.returncode not in tuple(ok):
            raise DovecotError(
                f"doveadm {' '.join(args)}: exit {done.returncode}: "
                f"{done.stderr.decode(errors='replace').strip()}"
            )
        return done.stdout.decode("utf-8", "replace")

    def tab(self, *args: str) -> list[dict[str, str]]:
        lines = self.doveadm("-f", "tab", *args).splitlines()
        if not lines:
            return []
        head = lines[0].split("\t")
        return [dict(zip(head, line.split("\t"), strict=False)) for line in lines[1:]]

    def status(self, user: str, folder: str) -> dict[str, int]:
        """messages, uidnext, uidvalidity, highestmodseq, unseen of ``folder``,
        straight from the mail files (no IMAP session, nothing logged)."""
        [row] = self.tab(
            "mailbox",
            "status",
            "-u",
            user,
            "messages uidnext uidvalidity highestmodseq unseen",
            folder,
        )
        return {k: int(v) for k, v in row.items() if k != "mailbox"}

    def flags(self, user: str, folder: str) -> dict[int, tuple[str, ...]]:
        """uid -> stored flags (sorted; ``\\Recent``, a per-session flag, left out),
        e.g. to check that a sync set no ``\\Seen``."""
        rows = self.tab("fetch", "-u", user, "uid flags", "mailbox", folder)
        return {
            int(r["uid"]): tuple(sorted(f for f in r.get("flags", "").split() if f != "\\Recent"))
            for r in rows
        }

    def uids(self, user: str, folder: str) -> list[int]:
        return sorted(self.flags(user, folder))

    def expunge(self, user: str, folder: str, uid: int) -> None:
        """Remove one message as another client would (the UID is gone for good)."""
        self.doveadm("expunge", "-u", user, "mailbox", folder, "uid", str(uid))

    def set_uidvalidity(self, user: str, folder: str, n: int) -> None:
        """Same messages and UIDs, new UIDVALIDITY ``n`` (check over a NEW connection:
        a session with the folder selected gets BYE, an older one may see stale STATUS)."""
        self.doveadm("mailbox", "update", "-u", user, "--uid-validity", str(n), folder)

    def lose_state(self, user: str, folder: str) -> int:
        """Simulate a server that lost its index: delete ``dovecot-uidlist`` and
        ``dovecot.index*``. Dovecot renumbers the messages from 1 under a new
        UIDVALIDITY (always a new value), which is returned."""
        box = self.maildir(user, folder)
        before = self.status(user, folder)["uidvalidity"]
        for p in [box / "dovecot-uidlist", *box.glob("dovecot.index*")]:
            p.unlink(missing_ok=True)
        after = self.status(user, folder)["uidvalidity"]
        if after == before:
            raise DovecotError(f"{user} {folder}: UIDVALIDITY did not change ({after})")
        return after

    # -- seeding -------------------------------------------------------------------

    def save(
        self,
        user: str,
        folder: str,
        raw: bytes,
        *,
        flags: Iterable[str] = (),
        when: datetime | None = None,
    ) -> int:
        """IMAP APPEND ``raw`` (INTERNALDATE ``when``, no flags unless given);
        returns its UID. Its session (and a ``save`` mail event) is in the log
        before this returns: take ``log_mark()`` after seeding."""
        mark = self.log_mark()
        client = self.imap(user)
        try:
            answer = client.append(folder, raw, flags=tuple(flags), msg_time=when)
        finally:
            client.logout()

        # the logout line comes just after the client's LOGOUT returns: wait for it,
        # so that a log_mark() taken after seeding sees only the code under test.
        # For this session's line, not any: the line of a session that ended just
        # before (a sync's) may be logged after ``mark`` too, and waiting for it
        # alone left this one to land after the caller's mark.
        def appended(text: str) -> bool:
            return any(
                s.user == user and s.protocol == "imap" and s["in"] >= len(raw)
                for s in session_bytes(text)
            )

        self.log_since(mark, until=appended)
        m = re.search(rb"APPENDUID \d+ (\d+)", answer if isinstance(answer, bytes) else b"")
        if not m:
            raise DovecotError(f"APPEND answered without APPENDUID: {answer!r}")
        return int(m[1])

    def bulk_maildir(
        self,
        user: str,
        folder: str,
        messages: Iterable[bytes | tuple[datetime, bytes]],
        *,
        flags: str = "",
    ) -> int:
        """Write messages straight into the Maildir (thousands in a second), not
        logged. UIDs follow the order given once Dovecot next looks at the folder;
        INTERNALDATE is the given datetime, else the Date header, else now.
        ``flags``: Maildir letters (``S`` seen, ``F`` flagged, ``R`` replied...).
        Returns how many were written."""
        box = self.maildir(user, folder)
        made = [p for p in (box.parent, box) if not p.exists()]
        for sub in ("cur", "new", "tmp"):
            if not (box / sub).exists():
                made.append(box / sub)
        for p in made:
            p.mkdir(mode=0o700, parents=True, exist_ok=True)
        if folder.upper() != "INBOX" and not (box / "maildirfolder").exists():
            (box / "maildirfolder").touch()
            made.append(box / "maildirfolder")
        for p in made:
            self._chown(p)
        info = ":2," + "".join(sorted(set(flags)))
        n = 0
        for n, item in enumerate(messages, 1):
            when, raw = item if isinstance(item, tuple) else (None, item)
            ts = when.timestamp() if when else (_maildir_date(raw) or time.time())
            # (a random part: two calls with messages of one date and size must not
            # write the same name, the second replacing the first)
            unique = f"M{n:07d}R{os.urandom(4).hex()}P{os.getpid()}"
            name = f"{int(ts):010d}.{unique}.mailledger,S={len(raw)}{info}"
            path = box / "cur" / name
            path.write_bytes(raw)
            os.utime(path, (ts, ts))
            self._chown(path)
        return n

    def _chown(self, path: Path) -> None:
        if os.geteuid() == 0 and self.mail_uid >= 0:
            os.chown(path, self.mail_uid, self.mail_gid)

    def reset_user(self, user: str) -> None:
        """Log out the user's sessions and delete its mail, indexes and raw logs;
        the folders come back empty, with UIDVALIDITYs never used before."""
        kicked = self.doveadm("kick", user, ok=(0, 68))  # 68: nobody to kick
        if "no users kicked" not in kicked.lower():
            deadline = time.monotonic() + 3
            # `who` prints a header line, then one line per user with sessions
            while (
                time.monotonic() < deadline
                and len(self.doveadm("who", user).strip().splitlines()) > 1
            ):
                time.sleep(0.02)
        # Keep dovecot-uidvalidity*: it holds the last UIDVALIDITY given out, so a
        # folder made again within the same second still gets a new one.
        root = self.dir / "mail" / user / "Maildir"
        for p in root.glob("*") if root.is_dir() else ():
            if p.name.startswith("dovecot-uidvalidity"):
                continue
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
        for p in (self.dir / "rawlog" / user).glob("*"):
            p.unlink(missing_ok=True)

    # -- the log -------------------------------------------------------------------

    def log_mark(self) -> int:
        """A position in the log; :meth:`log_since` returns what came after it."""
        try:
            return self.log_path.stat().st_size
        except FileNotFoundError:
            return 0

    def log_since(
        self, mark: int, *, until: Callable[[str], bool] | None = None, timeout: float = 5.0
    ) -> str:
        """Log text written after ``mark``. With ``until``, wait (up to ``timeout``)
        until it holds: Dovecot logs a session's end just after the client has
        seen the logout answer."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                with open(self.log_path, "rb") as f:
                    f.seek(mark)
                    text = f.read().decode("utf-8", "replace")
            except FileNotFoundError:
                text = ""
            if until is None or until(text):
                return text
            if time.monotonic() > deadline:
                raise DovecotError(
                    f"log condition not met within {timeout}s; log since mark:\n{text[-3000:]}"
                )
            time.sleep(0.02)

    def sessions_since(
        self,
        mark: int,
        count: int = 1,
        *,
        user: str | None = None,
        protocol: str | None = None,
        timeout: float = 5.0,
        begun: bool = True,
    ) -> list[Session]:
        """The sessions that began and ended after ``mark`` (of ``user``/``protocol``),
        waiting until at least ``count`` of them have: what the caller's own run
        did. Dovecot may log the end of a session a client already left after a
        mark taken just then (on a loaded machine it does): ``begun=False`` counts
        those too."""

        def pick(text: str) -> list[Session]:
            started = {m["session"] for m in _LOGIN.finditer(text)} if begun else None
            return [
                s
                for s in session_bytes(text)
                if (user is None or s.user == user)
                and (protocol is None or s.protocol == protocol)
                and (started is None or s.session in started)
            ]

        text = self.log_since(mark, until=lambda t: len(pick(t)) >= count, timeout=timeout)
        return pick(text)

    def mail_events(self, mark: int) -> list[MailEvent]:
        """What IMAP/POP3 clients changed since ``mark`` (read it after the
        sessions ended, e.g. after :meth:`sessions_since`)."""
        return mail_events(self.log_since(mark))

    def session_bytes(self, log_text: str) -> list[Session]:
        return session_bytes(log_text)

    def rawlogs(self, user: str) -> list[RawLog]:
        """The user's recorded sessions since its last reset, oldest first."""
        folder = self.dir / "rawlog" / user
        return [
            RawLog(p, p.with_suffix(".out"))
            for p in sorted(folder.glob("*.in"), key=lambda p: p.stat().st_mtime)
        ]

    def client_lines(self, user: str) -> list[str]:
        """Every line the user's clients sent after login (literals included),
        e.g. to assert no ``SELECT``/``STORE``/``BODY[]`` without PEEK was sent."""
        return [line for r in self.rawlogs(user) for line in r.client_lines()]

    # -- config for the code under test --------------------------------------------

    def password_env(self) -> dict[str, str]:
        """Environment for ``password_env`` keys: ``MAILLEDGER_TEST_<USER>_PASSWORD``."""
        return {f"MAILLEDGER_TEST_{u.upper()}_PASSWORD": p for u, p in self.users.items()}

    def account_toml(
        self,
        user: str,
        *,
        name: str | None = None,
        type: Literal["imap", "pop3"] = "imap",
        tls: Tls = "none",
        **extra: object,
    ) -> str:
        """An ``[accounts.NAME]`` table for this server, password from
        :meth:`password_env`; ``extra`` adds keys (``folders=["\\\\All"]``...)."""
        port = {
            ("imap", "none"): self.imap_port,
            ("imap", "starttls"): self.imap_port,
            ("imap", "implicit"): self.imaps_port,
            ("pop3", "none"): self.pop3_port,
            ("pop3", "starttls"): self.pop3_port,
            ("pop3", "implicit"): self.pop3s_port,
        }[(type, tls)]
        keys: dict[str, object] = {
            "type": type,
            "host": HOST,
            "port": port,
            "tls": tls,
            "username": user,
            "password_env": f"MAILLEDGER_TEST_{user.upper()}_PASSWORD",
        }
        if tls != "none":
            keys["ca_file"] = self.cafile
        keys.update(extra)
        body = "\n".join(f"{k} = {toml_value(v)}" for k, v in keys.items())
        return f"[accounts.{name or user}]\n{body}\n"


@dataclass(frozen=True)
class MailUser:
    """One test user of a running :class:`Dovecot`, with the helpers bound to it."""

    dv: Dovecot
    name: str
    password: str

    def imap(self, tls: Tls = "none") -> IMAPClient:
        return self.dv.imap(self.name, tls)

    def pop3(self, tls: Tls = "none") -> poplib.POP3:
        return self.dv.pop3(self.name, tls)

    def save(
        self, folder: str, raw: bytes, *, flags: Iterable[str] = (), when: datetime | None = None
    ) -> int:
        return self.dv.save(self.name, folder, raw, flags=flags, when=when)

    def bulk_maildir(
        self, folder: str, messages: Iterable[bytes | tuple[datetime, bytes]], *, flags: str = ""
    ) -> int:
        return self.dv.bulk_maildir(self.name, folder, messages, flags=flags)

    def status(self, folder: str) -> dict[str, int]:
        return self.dv.status(self.name, folder)

    def flags(self, folder: str) -> dict[int, tuple[str, ...]]:
        return self.dv.flags(self.name, folder)

    def uids(self, folder: str) -> list[int]:
        return self.dv.uids(self.name, folder)

    def expunge(self, folder: str, uid: int) -> None:
        self.dv.expunge(self.name, folder, uid)

    def set_uidvalidity(self, folder: str, n: int) -> None:
        self.dv.set_uidvalidity(self.name, folder, n)

    def lose_state(self, folder: str) -> int:
        return self.dv.lose_state(self.name, folder)

    def reset(self) -> None:
        self.dv.reset_user(self.name)

    def account_toml(self, **kw: object) -> str:
        return self.dv.account_toml(self.name, **kw)  # type: ignore[arg-type]

    def client_lines(self) -> list[str]:
        return self.dv.client_lines(self.name)

    def sessions_since(
        self,
        mark: int,
        count: int = 1,
        *,
        protocol: str | None = None,
        timeout: float = 5.0,
        begun: bool = True,
    ) -> list[Session]:
        """This user's sessions that began and ended after ``mark`` (see
        :meth:`Dovecot.sessions_since`)."""
        return self.dv.sessions_since(
            mark, count, user=self.name, protocol=protocol, timeout=timeout, begun=begun
        )


def iter_messages(
    n: int, *, domain: str = "test.example", start: datetime | None = None
) -> Iterator[tuple[datetime, bytes]]:
    """``n`` small distinct messages one hour apart, for bulk_maildir."""
    from datetime import UTC, timedelta

    t0 = start or datetime(2026, 1, 1, tzinfo=UTC)
    for i in range(n):
        when = t0 + timedelta(hours=i)
        raw = (
            f"From: sender{i % 7}@{domain}\r\nTo: me@{domain}\r\n"
            f"Subject: message {i}\r\nDate: {email.utils.format_datetime(when)}\r\n"
            f"Message-ID: <bulk-{i}@{domain}>\r\n\r\nbody {i}\r\n"
        ).encode()
        yield when, raw

"""Cyrus IMAP 3.6 and Courier-IMAP 5.0 from Debian, unpacked and run from a cache.

Nothing is installed: :func:`unpack` runs ``apt-get download`` (as any user, into
the cache) for the server packages and for each library they need that dpkg does
not already have, and ``dpkg-deb -x`` each .deb into ``<cache>/root``. The
daemons run from there (``LD_LIBRARY_PATH`` for the unpacked libraries) on free
loopback ports, with their config, spool and sockets in a directory under /tmp
that :meth:`Server.stop` removes after killing every process it started.

How each server is made to run without touching /etc, /run or /var:

- **Cyrus**: ``master -C imapd.conf -M cyrus.conf -D`` with one ``imap`` service
  on the chosen port; ``configdirectory`` and ``partition-default`` in the temp
  directory. Authentication: ``sasl_pwcheck_method: alwaystrue`` (built into
  Debian's libsasl2), so LOGIN accepts any password and no sasldb is needed;
  ``admins: cyrus``. The user's mailbox is created by the admin
  (``CREATE user/<name>``). As root, ``cyrus_user: nobody`` (the cache and the
  temp directory are world-readable for that reason); otherwise the current user.
  UIDVALIDITY change: the folder's mail is copied aside, the folder deleted and
  created again and the mail copied back (a restore); ``RENAME`` away and back
  keeps the UIDVALIDITY in 3.6. Checked with STATUS.
- **Courier**: ``couriertcpd`` -> ``imaplogin`` -> ``imapd``, with
  ``authdaemond`` (courier-authlib) and the ``authuserdb`` module. Their paths
  (``/etc/courier``, ``/run/courier``, the module directory
  ``/usr/lib/courier-authlib``) are compiled in and have no option, so the
  binaries are copied into the temp directory, whose name is chosen to be exactly
  12 characters (``/tmp/mlXXXXX``), and those strings are replaced with paths of
  the same length inside it. ``userdb.dat`` / ``userdbshadow.dat`` are written
  with the unpacked ``makedatprog`` (a ``systempw`` crypt hash). The user's mail
  processes run as ``nobody`` when started as root. UIDVALIDITY change: rewrite
  the uidvalidity on the first line of the folder's ``courierimapuiddb``.
- **Read-only folders**: Cyrus: the admin sets ``<user> lr`` (the owner may not
  lower its own rights), with ``implicit_owner_rights: l`` so the owner keeps no
  write right implicitly; Courier: the owner sets the negative right
  ``-owner cdisw`` (``owner`` itself may not be changed). SELECT then answers
  ``[READ-ONLY]``, which :meth:`Server.make_read_only` checks.
"""

from __future__ import annotations

import contextlib
import ctypes
import getpass
import hashlib
import imaplib
import os
import random
import re
import shutil
import signal
import socket
import string
import subprocess
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil

__all__ = [
    "HOST",
    "SERVERS",
    "Courier",
    "Cyrus",
    "InteropError",
    "Server",
    "unpack",
]

HOST = "127.0.0.1"
PASSWORD = "pw-interop"

# What each server needs beyond a Debian 12 with dovecot-imapd installed. A
# package dpkg already has is not downloaded (its library is on the system).
CYRUS_PACKAGES = ("cyrus-imapd", "cyrus-common")
CYRUS_LIBS = ("libpcre3", "libxapian30", "libical3", "libsasl2-2", "libsasl2-modules")
COURIER_PACKAGES = (
    "courier-imap",
    "courier-base",
    "courier-authlib",
    "courier-authdaemon",
    "courier-authlib-userdb",
)
COURIER_LIBS = ("libcourier-unicode4", "libidn12", "libltdl7", "libgamin0")


class InteropError(RuntimeError):
    """A server could not be fetched, started or set up (the run cannot say pass/fail)."""


# --- packages ------------------------------------------------------------------------


def _installed(package: str) -> bool:
    done = subprocess.run(
        ["dpkg-query", "-W", "-f=${Status}", package],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.returncode == 0 and done.stdout.strip().endswith(" installed")


def unpack(cache: Path, packages: tuple[str, ...], libs: tuple[str, ...]) -> Path:
    """``<cache>/root`` with ``packages`` and the missing ``libs`` unpacked in it.

    Downloads only what is not in ``<cache>/debs`` yet; a marker per package list
    makes a second run free. Raises :class:`InteropError` naming what failed.
    """
    for tool in ("apt-get", "dpkg-query", "dpkg-deb"):
        if shutil.which(tool) is None:
            raise InteropError(f"{tool} is missing: the interop servers come from Debian 12")
    root = cache / "root"
    debs = cache / "debs"
    wanted = list(packages) + [lib for lib in libs if not _installed(lib)]
    marker = root / f".unpacked-{hashlib.sha256(' '.join(wanted).encode()).hexdigest()[:16]}"
    if marker.exists():
        return root
    debs.mkdir(parents=True, exist_ok=True)
    root.mkdir(parents=True, exist_ok=True)
    missing = [p for p in wanted if not any(debs.glob(f"{p}_*.deb"))]
    if missing:
        done = subprocess.run(
            ["apt-get", "download", *missing],
            cwd=debs,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise InteropError(
                f"apt-get download {' '.join(missing)} failed (exit {done.returncode}):"
                f" {done.stderr.strip()[-800:]}  (try: apt-get update)"
            )
    for name in wanted:
        found = sorted(debs.glob(f"{name}_*.deb"))
        if not found:
            raise InteropError(f"apt-get download left no {name}_*.deb in {debs}")
        subprocess.run(["dpkg-deb", "-x", str(found[-1]), str(root)], check=True)
    # the daemons drop to ``nobody``: every parent of what they run must be searchable
    subprocess.run(["chmod", "-R", "a+rX", str(cache)], check=True)
    marker.touch()
    return root


def _lib_path(root: Path, *first: Path) -> str:
    dirs = [
        *first,
        root / "usr/lib",
        root / "usr/lib/x86_64-linux-gnu",
        root / "lib/x86_64-linux-gnu",
    ]
    return ":".join(str(d) for d in dirs)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM it if the harness dies (even by SIGKILL)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _kill_tree(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM ``proc`` and everything under it, SIGKILL what is left after 5 s."""
    try:
        tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        tree = []
    for p in tree:
        with contextlib.suppress(psutil.Error):
            p.terminate()
    _, alive = psutil.wait_procs(tree, timeout=5)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)


def _ok(typ: str, data: Any, what: str) -> Any:
    if typ != "OK":
        raise InteropError(f"{what}: {typ} {data!r}")
    return data


# --- the servers ---------------------------------------------------------------------


class Server:
    """One private IMAP server on loopback: ``start()``, seed and bend it, ``stop()``."""

    name = "server"
    user = "interop"
    start_timeout = 20.0

    def __init__(self, cache: Path) -> None:
        self.cache = cache
        self.port = 0
        self.dir: Path | None = None
        self.prefix = ""  # the personal namespace: "" (Cyrus) or "INBOX." (Courier)
        self.sep = "/"
        self._procs: list[subprocess.Popen[bytes]] = []
        self.as_root = os.geteuid() == 0

    # lifecycle
    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        """Kill every process this server started and remove its directory."""
        for proc in reversed(self._procs):
            _kill_tree(proc)
        self._procs = []
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def __enter__(self) -> Server:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _spawn(self, argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        self._procs.append(proc)
        return proc

    def _wait_greeting(self, marker: bytes, logs: list[Path]) -> None:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if any(p.poll() is not None for p in self._procs):
                break
            with contextlib.suppress(OSError), socket.create_connection((HOST, self.port), 2) as s:
                line = s.makefile("rb").readline()
                if line.startswith(b"* OK") and marker in line:
                    return
            time.sleep(0.05)
        why = "\n".join(p.read_text(errors="replace")[-1500:] for p in logs if p.exists())
        self.stop()
        raise InteropError(f"{self.name}: no IMAP greeting on {HOST}:{self.port}: {why}")

    # the user's view
    def folder(self, name: str) -> str:
        """The server's name for ``name`` ("INBOX" stays INBOX)."""
        return name if name == "INBOX" else self.prefix + name.replace("/", self.sep)

    @contextlib.contextmanager
    def imap(self) -> Iterator[imaplib.IMAP4]:
        """A logged-in imaplib connection as the test user (straight to the server)."""
        c = imaplib.IMAP4(HOST, self.port, timeout=30)
        try:
            _ok(*c.login(self.user, PASSWORD), "LOGIN")
            yield c
        finally:
            with contextlib.suppress(Exception):
                c.logout()

    def _namespace(self) -> None:
        with self.imap() as c:
            [line] = _ok(*c.namespace(), "NAMESPACE")
            m = re.match(rb'\(\("([^"]*)" (?:"([^"]*)"|NIL)\)', line)  # type: ignore[arg-type]
            if m is None:
                raise InteropError(f"{self.name}: NAMESPACE answer not understood: {line!r}")
            self.prefix = m.group(1).decode()
            self.sep = (m.group(2) or b"/").decode()

    def create(self, name: str) -> None:
        with self.imap() as c:
            _ok(*c.create(self.folder(name)), f"CREATE {name}")
            with contextlib.suppress(Exception):
                c.subscribe(self.folder(name))

    def append(self, name: str, messages: list[bytes]) -> None:
        with self.imap() as c:
            for raw in messages:
                _ok(*c.append(self.folder(name), "", None, raw), f"APPEND {name}")

    def uids(self, name: str) -> list[int]:
        with self.imap() as c:
            _ok(*c.select(self.folder(name), readonly=True), f"EXAMINE {name}")
            [data] = _ok(*c.uid("SEARCH", "ALL"), f"UID SEARCH {name}")
            return [int(u) for u in (data or b"").split()]  # type: ignore[union-attr]

    def flags(self, name: str) -> dict[int, str]:
        """UID -> the FLAGS text, read with EXAMINE (changes nothing)."""
        out: dict[int, str] = {}
        with self.imap() as c:
            _ok(*c.select(self.folder(name), readonly=True), f"EXAMINE {name}")
            typ, data = c.uid("FETCH", "1:*", "(FLAGS)")
            for item in data if typ == "OK" else []:
                if isinstance(item, bytes):
                    m = re.search(rb"UID (\d+)", item)
                    f = re.search(rb"FLAGS \(([^)]*)\)", item)
                    if m and f:
                        out[int(m.group(1))] = f.group(1).decode()
        return out

    def status(self, name: str) -> dict[str, int]:
        with self.imap() as c:
            [line] = _ok(
                *c.status(self.folder(name), "(MESSAGES UIDVALIDITY UIDNEXT)"), f"STATUS {name}"
            )
            return {
                k.decode().lower(): int(v)
                for k, v in re.findall(rb"(MESSAGES|UIDVALIDITY|UIDNEXT) (\d+)", line)  # type: ignore[arg-type]
            }

    def move(self, src: str, dst: str, uids: list[int]) -> None:
        """COPY then STORE \\Deleted + EXPUNGE: a move the way an old client does it."""
        with self.imap() as c:
            _ok(*c.select(self.folder(src)), f"SELECT {src}")
            seq = ",".join(map(str, uids))
            _ok(*c.uid("COPY", seq, self.folder(dst)), f"UID COPY {src} -> {dst}")
            _ok(*c.uid("STORE", seq, "+FLAGS.SILENT", r"(\Deleted)"), "UID STORE")
            _ok(*c.expunge(), "EXPUNGE")

    def expunge(self, name: str, uids: list[int]) -> None:
        with self.imap() as c:
            _ok(*c.select(self.folder(name)), f"SELECT {name}")
            _ok(*c.uid("STORE", ",".join(map(str, uids)), "+FLAGS.SILENT", r"(\Deleted)"), "STORE")
            _ok(*c.expunge(), "EXPUNGE")

    def selects_read_only(self, name: str) -> bool:
        """True when SELECT (not EXAMINE) answers [READ-ONLY]."""
        with self.imap() as c:
            try:
                c.select(self.folder(name))
            except imaplib.IMAP4.readonly:  # imaplib's word for [READ-ONLY] on SELECT
                return True
            return False

    def make_read_only(self, name: str) -> None:
        """Take every right to change ``name`` away from the user (ACL), keep l and r."""
        raise NotImplementedError

    def change_uidvalidity(self, name: str) -> tuple[int, int]:
        """Give folder ``name`` a new UIDVALIDITY, keeping its mail; (old, new)."""
        raise NotImplementedError


class Cyrus(Server):
    name = "cyrus-3.6"

    def start(self) -> None:
        root = unpack(self.cache, CYRUS_PACKAGES, CYRUS_LIBS)
        self.dir = Path(tempfile.mkdtemp(prefix="mlcyrus.", dir="/tmp"))
        self.dir.chmod(0o755)
        for sub in ("conf", "spool", "run"):
            (self.dir / sub).mkdir()
        self.port = _free_port()
        owner = "nobody" if self.as_root else getpass.getuser()
        conf = self.dir / "imapd.conf"
        conf.write_text(
            f"configdirectory: {self.dir}/conf\n"
            f"defaultpartition: default\npartition-default: {self.dir}/spool\n"
            "admins: cyrus\nsasl_pwcheck_method: alwaystrue\nsasl_mech_list: PLAIN LOGIN\n"
            f"allowplaintext: yes\ncyrus_user: {owner}\nimplicit_owner_rights: l\n"
            f"idlesocket: {self.dir}/run/idle\nnotifysocket: {self.dir}/run/notify\n"
            f"lmtpsocket: {self.dir}/run/lmtp\nstatuscache: no\n"
            f"syslog_prefix: mlcyrus\nservername: mlcyrus-{self.dir.name}\n"
        )
        imapd = root / "usr/lib/cyrus/bin/imapd"
        (self.dir / "cyrus.conf").write_text(
            "START {\n}\nSERVICES {\n"
            f'  imap cmd="{imapd} -C {conf}" listen="{HOST}:{self.port}" prefork=0\n'
            "}\nEVENTS {\n}\n"
        )
        if self.as_root:
            shutil.chown(self.dir, "nobody")
            for p in self.dir.rglob("*"):
                shutil.chown(p, "nobody")
        env = dict(os.environ, LD_LIBRARY_PATH=_lib_path(root))
        log = self.dir / "master.log"
        self._spawn(
            [
                str(root / "usr/lib/cyrus/bin/master"),
                *("-C", str(conf), "-M", str(self.dir / "cyrus.conf")),
                *("-p", str(self.dir / "run/master.pid"), "-D"),
            ],
            env,
            log,
        )
        self._wait_greeting(b"Cyrus IMAP", [log])
        admin = imaplib.IMAP4(HOST, self.port, timeout=30)
        try:
            _ok(*admin.login("cyrus", "admin"), "admin LOGIN")
            typ, data = admin.list('""', '""')
            first = data[0] if typ == "OK" and data else None
            sep = re.search(rb'"(.)"', first) if isinstance(first, bytes) else None
            mailbox = f"user{sep.group(1).decode() if sep else '/'}{self.user}"
            _ok(*admin.create(mailbox), f"CREATE {mailbox}")
        finally:
            with contextlib.suppress(Exception):
                admin.logout()
        self._namespace()
        self._mailbox = mailbox

    def make_read_only(self, name: str) -> None:
        # the owner may not lower its own rights; the admin may
        admin = imaplib.IMAP4(HOST, self.port, timeout=30)
        try:
            _ok(*admin.login("cyrus", "admin"), "admin LOGIN")
            sep = self._mailbox[len("user")]
            full = (
                self._mailbox + sep + self.folder(name)[len(self.prefix) :].replace(self.sep, sep)
            )
            _ok(*admin.setacl(full, self.user, "lr"), f"SETACL {full}")
        finally:
            with contextlib.suppress(Exception):
                admin.logout()
        if not self.selects_read_only(name):
            raise InteropError(f"{self.name}: {name} still selects read-write after SETACL lr")

    def change_uidvalidity(self, name: str) -> tuple[int, int]:
        # RENAME keeps the mailbox's UIDVALIDITY in 3.6; a mailbox deleted and
        # created again with the same mail (a restore) gets a new one
        before = self.status(name)["uidvalidity"]
        here, aside = self.folder(name), self.folder(name + "-aside")
        with self.imap() as c:
            _ok(*c.create(aside), "CREATE aside")
            _ok(*c.select(here), f"SELECT {name}")
            _ok(*c.uid("COPY", "1:*", aside), "COPY aside")
            _ok(*c.close(), "CLOSE")
            _ok(*c.delete(here), f"DELETE {name}")
            _ok(*c.create(here), f"CREATE {name}")
            _ok(*c.select(aside), "SELECT aside")
            _ok(*c.uid("COPY", "1:*", here), "COPY back")
            _ok(*c.close(), "CLOSE")
            _ok(*c.delete(aside), "DELETE aside")
        after = self.status(name)["uidvalidity"]
        if after == before:
            raise InteropError(f"{self.name}: {name} deleted and created kept UIDVALIDITY {before}")
        return before, after


_COURIER_ENV = {
    # the Debian defaults of /etc/courier/imapd, minus TLS, IDLE (needs a FAM daemon)
    "IMAP_CAPABILITY": "IMAP4rev1 UIDPLUS CHILDREN NAMESPACE THREAD=ORDEREDSUBJECT"
    " THREAD=REFERENCES SORT QUOTA",
    "IMAP_TLS_REQUIRED": "0",
    "IMAP_KEYWORDS": "1",
    "IMAP_ACL": "1",
    "IMAP_UMASK": "022",
    "IMAP_USELOCKS": "1",
    "IMAP_MOVE_EXPUNGE_TO_TRASH": "0",
    "IMAP_EMPTYTRASH": "",
    "IMAP_TRASHFOLDERNAME": "Trash",
    "IMAP_MAILBOX_SANITY_CHECK": "1",
    "IMAP_ENHANCEDIDLE": "0",
    "MAILDIRPATH": "Maildir",
}


class Courier(Server):
    name = "courier-5.0"

    def _short_dir(self) -> Path:
        # the compiled-in paths are 12 characters ("/etc/courier", "/run/courier"):
        # their stand-in must be as long
        while True:
            name = "ml" + "".join(random.choices(string.ascii_lowercase + string.digits, k=5))
            d = Path("/tmp") / name
            try:
                d.mkdir(mode=0o755)
            except FileExistsError:
                continue
            d.chmod(0o755)
            return d

    def _patch(self, src: Path, dst: Path) -> None:
        assert self.dir is not None
        data = src.read_bytes()
        here = str(self.dir).encode()
        assert len(here) == len(b"/etc/courier")
        for old in (b"/etc/courier", b"/run/courier"):
            data = data.replace(old, here)
        data = data.replace(b"/usr/lib/courier-authlib", here + b"/authlib_mod")
        dst.write_bytes(data)
        dst.chmod(0o755)

    def start(self) -> None:
        root = unpack(self.cache, COURIER_PACKAGES, COURIER_LIBS)
        self.dir = d = self._short_dir()
        bindir, mods = d / "bin", d / "authlib_mod"
        bindir.mkdir()
        mods.mkdir()
        self._patch(root / "usr/lib/courier/courier-authlib/authdaemond", bindir / "authdaemond")
        self._patch(root / "usr/lib/libcourierauth.so.0.0.0", bindir / "libcourierauth.so.0")
        self._patch(root / "usr/lib/courier/courier/imaplogin", bindir / "imaplogin")
        self._patch(root / "usr/bin/imapd", bindir / "imapd")
        self._patch(
            root / "usr/lib/courier-authlib/libauthuserdb.so.0.0.0", mods / "libauthuserdb.so.0"
        )
        (mods / "libauthuserdb.so").symlink_to("libauthuserdb.so.0")
        (d / "authdaemon").mkdir(mode=0o755)
        (d / "authdaemonrc").write_text(
            f'authmodulelist="authuserdb"\ndaemons=2\nauthdaemonvar={d}/authdaemon\n'
            'DEBUG_LOGIN=0\nDEFAULTOPTIONS=""\nLOGGEROPTS=""\n'
        )
        home = d / "home" / self.user
        for sub in ("cur", "new", "tmp"):
            (home / "Maildir" / sub).mkdir(parents=True)
        uid = gid = 65534 if self.as_root else os.getuid()
        if not self.as_root:
            gid = os.getgid()
        for p in [d / "home", *(d / "home").rglob("*")]:
            os.chown(p, uid, gid)
        env = dict(os.environ, LD_LIBRARY_PATH=_lib_path(root, bindir))
        makedat = str(root / "usr/lib/courier/courier-authlib/makedatprog")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            import crypt  # the only crypt(3) at hand; removed in 3.13

            hashed = crypt.crypt(PASSWORD, crypt.mksalt(crypt.METHOD_SHA512))
        for dat, line in (
            ("userdb", f"uid={uid}|gid={gid}|home={home}|mail={home}/Maildir"),
            ("userdbshadow", f"systempw={hashed}"),
        ):
            subprocess.run(
                [makedat, "-", str(d / f"{dat}.tmp"), str(d / f"{dat}.dat")],
                input=f"{self.user}\t{line}\n.\n".encode(),
                env=env,
                check=True,
            )
        self._spawn([str(bindir / "authdaemond")], env, d / "authdaemond.log")
        deadline = time.monotonic() + self.start_timeout
        while not (d / "authdaemon/socket").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        self.port = _free_port()
        self._spawn(
            [
                str(root / "usr/sbin/couriertcpd"),
                f"-address={HOST}",
                "-nodnslookup",
                "-noidentlookup",
                "-maxprocs=40",
                str(self.port),
                str(bindir / "imaplogin"),
                str(bindir / "imapd"),
                "Maildir",
            ],
            dict(env, **_COURIER_ENV),
            d / "couriertcpd.log",
        )
        self._wait_greeting(b"Courier-IMAP", [d / "authdaemond.log", d / "couriertcpd.log"])
        self._namespace()

    def make_read_only(self, name: str) -> None:
        # "owner" itself may not be changed; a negative right for it may
        with self.imap() as c:
            _ok(*c.setacl(self.folder(name), "-owner", "cdisw"), f"SETACL {name}")
        if not self.selects_read_only(name):
            raise InteropError(f"{self.name}: {name} still selects read-write after SETACL")

    def _maildir(self, name: str) -> Path:
        assert self.dir is not None
        base = self.dir / "home" / self.user / "Maildir"
        return base if name == "INBOX" else base / ("." + self.folder(name)[len("INBOX.") :])

    def change_uidvalidity(self, name: str) -> tuple[int, int]:
        before = self.status(name)["uidvalidity"]
        db = self._maildir(name) / "courierimapuiddb"
        lines = db.read_text().splitlines(keepends=True)
        version, uidv, rest = lines[0].split(" ", 2)
        lines[0] = f"{version} {int(uidv) + 1000} {rest}"
        db.write_text("".join(lines))
        after = self.status(name)["uidvalidity"]
        if after == before:
            raise InteropError(f"{self.name}: rewriting {db} kept UIDVALIDITY {before}")
        return before, after


SERVERS: dict[str, type[Server]] = {"cyrus": Cyrus, "courier": Courier}

"""The configuration file, read once at the edge into typed, frozen objects.

``load_config(path, env)`` parses the TOML file, checks every value and returns a
:class:`Config`. Nothing deeper in mailledger reads the file or ``os.environ``:
the fetchers get an :class:`Account`, and its password through
:func:`resolve_secret` at the moment they log in.

Every problem is a :class:`~stores.errors.ConfigError` (exit 2) whose message
names the file and the key, for example::

    config.toml: accounts.fastmail.port: must be an integer 1-65535, got "x"

All problems found in one file are reported together, one per line. Values
that may hold a secret (unknown keys such as ``password``, ``password_command``,
the output of that command, environment values) never appear in a message or a
repr.

File shape (keys may be added, never renamed)::

    [accounts.fastmail]
    type = "imap"                  # "imap" | "pop3"
    host = "imap.fastmail.com"
    port = 993                     # default from type and tls
    tls = "implicit"               # "implicit" | "starttls" | "none"
    insecure = false               # true: allow tls = "none" to a non-loopback host
    ca_file = "/path/ca.pem"       # optional extra CA
    username = "me@fastmail.com"
    password_env = "MAIL_FASTMAIL_PASSWORD"   # or password_command = "pass show fastmail"
    auth = "password"              # "password" | "xoauth2"
    folders = ["INBOX", '\\Archive']          # a leading backslash: a SPECIAL-USE attribute
    exclude = []
    initial = "full"               # "full" | "new-only" | "since:2026-06-01"
    delete_after = "never"         # pop3: "never" | "stored"
    timeout = 60                   # seconds an IMAP connect or read may take; a server
                                   # stalling longer fails the folder cleanly (exit 1)
    [store]                        # read by every command, not only sync
    path = "/var/lib/mailledger"   # relative: to this file's directory
    memory = "1GiB"                # what a replay or verify may use (default: a
                                   # quarter of the machine, at most 1 GiB)
    [metrics]
    file = "/var/lib/node-exporter/mailledger.prom"
    [dispatch]                     # kept as a raw table for the dispatcher
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

from stores.errors import ConfigError

if TYPE_CHECKING:
    import ssl
    import subprocess

# ssl, subprocess, difflib, ipaddress and shlex are imported where used: every
# command reads this module for the store's path, and most (stats, find, show)
# never make a TLS context, run a password command or mistype a key

__all__ = [
    "DEFAULT_EXCLUDE",
    "SPECIAL_USE",
    "Account",
    "Config",
    "InitialMode",
    "StoreSettings",
    "default_config_path",
    "is_loopback",
    "load_config",
    "load_store_settings",
    "resolve_secret",
    "show_value",
    "tls_context",
]

AccountType = Literal["imap", "pop3"]
TlsMode = Literal["implicit", "starttls", "none"]
AuthMode = Literal["password", "xoauth2"]
DeleteAfter = Literal["never", "stored"]

#: SPECIAL-USE attributes a folder entry may name (RFC 6154, plus \Important of RFC 8457).
SPECIAL_USE: tuple[str, ...] = (
    "\\All",
    "\\Archive",
    "\\Drafts",
    "\\Flagged",
    "\\Important",
    "\\Junk",
    "\\Sent",
    "\\Trash",
)
#: Excluded when an IMAP account has no ``exclude`` key, minus what ``folders`` names.
DEFAULT_EXCLUDE: tuple[str, ...] = ("\\Junk", "\\Trash", "\\Drafts")

_DEFAULT_PORTS: dict[tuple[str, str], int] = {
    ("imap", "implicit"): 993,
    ("imap", "starttls"): 143,
    ("imap", "none"): 143,
    ("pop3", "implicit"): 995,
    ("pop3", "starttls"): 110,
    ("pop3", "none"): 110,
}
_TOP_KEYS = ("accounts", "store", "metrics", "dispatch")
_ACCOUNT_KEYS = (
    "type",
    "host",
    "port",
    "tls",
    "insecure",
    "ca_file",
    "username",
    "password_env",
    "password_command",
    "auth",
    "folders",
    "exclude",
    "initial",
    "delete_after",
    "timeout",
)
_IMAP_ONLY = ("folders", "exclude")
_ACCOUNT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*\Z")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@dataclass(frozen=True)
class InitialMode:
    """What the first sync of a folder (no cursor yet) takes.

    ``full``: every message; ``new-only``: nothing now, only what arrives later
    (the cursor starts at UIDNEXT-1); ``since``: messages whose server
    INTERNALDATE is on or after ``since``.
    """

    kind: Literal["full", "new-only", "since"]
    since: date | None = None

    def __str__(self) -> str:
        return f"since:{self.since.isoformat()}" if self.since else self.kind

    @classmethod
    def parse(cls, text: str) -> InitialMode:
        """``"full"``, ``"new-only"`` or ``"since:YYYY-MM-DD"``; ValueError otherwise."""
        if text in ("full", "new-only"):
            return cls(cast(Literal["full", "new-only"], text))
        if text.startswith("since:"):
            return cls("since", date.fromisoformat(text.removeprefix("since:").strip()))
        raise ValueError(text)


@dataclass(frozen=True)
class Account:
    """One mail account, checked and with its defaults filled in.

    ``folders`` and ``exclude`` hold folder names and SPECIAL-USE attributes
    (``\\All``, canonical capitalisation); ``("*",)`` means every selectable
    folder. ``exclude`` is already effective: when the file has no ``exclude``
    key it is :data:`DEFAULT_EXCLUDE` minus the attributes ``folders`` asks for,
    so a fetcher takes what matches ``folders`` and does not match ``exclude``
    (a folder named by its name is taken whatever its attributes; see
    ``pipeline.imap.select_folders``).
    A POP3 account has ``folders == ("INBOX",)`` and no exclusions.

    ``insecure`` only permits ``tls = "none"`` to a host that is not loopback;
    certificates are always checked (add a CA with ``ca_file``).

    No secret is held here: ``password_command`` is left out of the repr all the
    same, as a command line may carry one by mistake.
    """

    name: str
    type: AccountType
    host: str
    port: int
    tls: TlsMode
    insecure: bool
    ca_file: Path | None
    username: str
    password_env: str | None
    password_command: str | None = field(repr=False)
    auth: AuthMode
    folders: tuple[str, ...]
    exclude: tuple[str, ...]
    initial: InitialMode
    delete_after: DeleteAfter
    config_file: Path | None = field(default=None, repr=False, compare=False)
    timeout: float = 60.0
    """Seconds a connect or a single read may take; a stalled server then fails
    the folder (exit 1) instead of hanging the run."""

    def _where(self, key: str) -> str:
        prefix = f"{self.config_file}: " if self.config_file else ""
        return f"{prefix}accounts.{self.name}.{key}"


@dataclass(frozen=True)
class Config:
    """The whole file. ``store_path`` is ``$MAILLEDGER_STORE`` if set, else ``[store] path``;
    ``--store`` on the command line overrides both (``dataclasses.replace``), and
    ``None`` means the CLI's default. ``dispatch`` is the raw ``[dispatch]`` table."""

    accounts: dict[str, Account]
    store_path: Path | None
    metrics_file: Path | None
    dispatch: dict[str, Any]
    path: Path | None = field(default=None, compare=False)
    store_memory: int | None = None  # bytes a rebuild may use ([store] memory)


@dataclass(frozen=True)
class StoreSettings:
    """The ``[store]`` table alone, for the commands that only open a store.

    ``path`` is ``$MAILLEDGER_STORE`` if set, else ``[store] path`` (a relative
    one is relative to the config file's directory), else None; ``memory`` is
    ``[store] memory`` in bytes, or None."""

    path: Path | None
    memory: int | None
    config_file: Path


def default_config_path(env: Mapping[str, str]) -> Path:
    """``$XDG_CONFIG_HOME/mailledger/config.toml``, else ``~/.config/mailledger/config.toml``."""
    if env.get("XDG_CONFIG_HOME"):
        return Path(env["XDG_CONFIG_HOME"]) / "mailledger" / "config.toml"
    home = Path(env["HOME"]) if env.get("HOME") else Path.home()
    return home / ".config" / "mailledger" / "config.toml"


def is_loopback(host: str) -> bool:
    """True for ``localhost``, 127.0.0.0/8 and ``::1``: where plaintext is allowed."""
    name = host.strip().rstrip(".").lower()
    if name == "localhost":
        return True
    import ipaddress

    try:
        return ipaddress.ip_address(name.strip("[]")).is_loopback
    except ValueError:
        return False


def tls_context(account: Account) -> ssl.SSLContext | None:
    """The client TLS context for ``account`` (system CAs plus ``ca_file``, hostname
    checked), or ``None`` when the account uses ``tls = "none"``."""
    if account.tls == "none":
        return None
    import ssl

    return ssl.create_default_context(cafile=str(account.ca_file) if account.ca_file else None)


def show_value(value: Any) -> str:
    """A value as the user wrote it in TOML, for messages about non-secret keys."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float | list):
        return json.dumps(value, ensure_ascii=False, default=str)
    if isinstance(value, dict):
        return "a table"
    return str(value)


class _Problems:
    """Collects every problem of one file, so the user fixes them in one go."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lines: list[str] = []

    def add(self, key: str, message: str) -> None:
        self.lines.append(f"{self.path}: {key}: {message}" if key else f"{self.path}: {message}")

    def raise_if_any(self) -> None:
        if self.lines:
            raise ConfigError("\n".join(self.lines))

    def unknown_keys(self, table: Mapping[str, Any], known: Sequence[str], where: str) -> None:
        for key in table:
            if key in known:
                continue
            full = f"{where}.{key}" if where else key
            if key == "password":
                self.add(
                    full, "passwords do not go in the file; use password_env or password_command"
                )
                continue
            import difflib

            close = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            # the value is never shown: a mistyped key may hold a secret
            self.add(full, f"unknown key{hint}; known keys: {', '.join(known)}")


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        msg = f"{path}: no such file (create it, or name another with --config)"
        raise ConfigError(msg) from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, not a config file") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except tomllib.TOMLDecodeError as exc:
        hint = ""
        if "escape" in str(exc).lower():
            hint = " (a SPECIAL-USE name is written '\\All' or \"\\\\All\")"
        raise ConfigError(f"{path}: TOML syntax error: {exc}{hint}") from None


def _resolve_path(raw: str, base: Path, env: Mapping[str, str]) -> Path:
    """``~`` from ``env["HOME"]``; a relative path is relative to the config file."""
    if raw == "~" or raw.startswith("~/"):
        home = env.get("HOME") or str(Path.home())
        raw = home + raw[1:]
    p = Path(raw)
    return p if p.is_absolute() else base / p


class _AccountReader:
    """Checks one ``[accounts.NAME]`` table; ``build`` returns None if anything failed."""

    def __init__(
        self,
        name: str,
        table: dict[str, Any],
        problems: _Problems,
        base: Path,
        env: Mapping[str, str],
    ) -> None:
        self.name, self.t, self.p, self.base, self.env = name, table, problems, base, env
        self.ok = True

    def key(self, k: str) -> str:
        return f"accounts.{self.name}.{k}"

    def fail(self, k: str, message: str) -> None:
        self.ok = False
        self.p.add(self.key(k), message)

    def choice(self, k: str, options: Sequence[str], default: str | None) -> str | None:
        if k not in self.t:
            if default is None:
                self.fail(k, f"missing (one of {', '.join(options)})")
            return default
        v = self.t[k]
        if not isinstance(v, str) or v not in options:
            self.fail(k, f"must be one of {', '.join(options)}, got {show_value(v)}")
            return None
        return v

    def text(self, k: str, *, required: bool, secret: bool = False) -> str | None:
        if k not in self.t:
            if required:
                self.fail(k, "missing")
            return None
        v = self.t[k]
        if not isinstance(v, str) or not v.strip():
            shown = "" if secret else f", got {show_value(v)}"
            self.fail(k, f"must be a non-empty string{shown}")
            return None
        return v

    def flag(self, k: str) -> bool:
        v = self.t.get(k, False)
        if not isinstance(v, bool):
            self.fail(k, f"must be true or false, got {show_value(v)}")
            return False
        return v

    def folder_list(self, k: str, default: tuple[str, ...]) -> tuple[str, ...]:
        if k not in self.t:
            return default
        v = self.t[k]
        if not isinstance(v, list) or not all(isinstance(x, str) and x for x in v):
            self.fail(k, f"must be a list of folder names or \\Attributes, got {show_value(v)}")
            return default
        out: list[str] = []
        for item in v:
            if item.startswith("\\"):
                canon = {a.lower(): a for a in SPECIAL_USE}.get(item.lower())
                if canon is None:
                    self.fail(
                        k,
                        f"unknown SPECIAL-USE attribute {show_value(item)} "
                        f"(known: {' '.join(SPECIAL_USE)})",
                    )
                    continue
                item = canon
            if item not in out:
                out.append(item)
        return tuple(out)

    def build(self, config_file: Path) -> Account | None:
        t = self.t
        self.p.unknown_keys(t, _ACCOUNT_KEYS, f"accounts.{self.name}")
        if any(k not in _ACCOUNT_KEYS for k in t):
            self.ok = False
        type_ = self.choice("type", ("imap", "pop3"), None)
        tls = self.choice("tls", ("implicit", "starttls", "none"), "implicit")
        host = self.text("host", required=True)
        if host is not None and any(c.isspace() for c in host):
            self.fail("host", f"must be a host name or address, got {show_value(host)}")
        username = self.text("username", required=True)
        insecure = self.flag("insecure")
        auth = self.choice("auth", ("password", "xoauth2"), "password")

        port = t.get("port")
        if port is None:
            port = _DEFAULT_PORTS.get((type_ or "", tls or ""), 0)
        elif isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            self.fail("port", f"must be an integer 1-65535, got {show_value(port)}")

        ca_file: Path | None = None
        raw_ca = self.text("ca_file", required=False)
        if raw_ca is not None:
            ca_file = _resolve_path(raw_ca, self.base, self.env)
            if not ca_file.is_file():
                self.fail("ca_file", f"no such file: {ca_file}")

        password_env = self.text("password_env", required=False)
        password_command = self.text("password_command", required=False, secret=True)
        if "password_env" in t and "password_command" in t:
            self.fail("password_env", "set password_env or password_command, not both")
        elif "password_env" not in t and "password_command" not in t:
            self.fail(
                "password_env",
                "missing: set password_env (an environment variable) or password_command",
            )
        if password_env is not None and not _ENV_NAME.match(password_env):
            self.fail(
                "password_env", f"must name an environment variable, got {show_value(password_env)}"
            )
        if password_command is not None:
            import shlex

            try:
                argv = shlex.split(password_command)
            except ValueError as exc:  # unbalanced quotes; the command itself is not shown
                self.fail("password_command", f"cannot be split into words: {exc}")
            else:
                if not argv:
                    self.fail("password_command", "must name a program")

        if tls == "none" and host is not None and not insecure and not is_loopback(host):
            self.fail(
                "tls",
                f'"none" sends the password in clear to {host}; allowed only '
                "to loopback (localhost, 127.0.0.0/8, ::1) unless insecure = true",
            )

        initial = InitialMode("full")
        if "initial" in t:
            raw = t["initial"]
            try:
                if not isinstance(raw, str):
                    raise ValueError(raw)
                initial = InitialMode.parse(raw)
            except ValueError:
                self.fail(
                    "initial",
                    f'must be "full", "new-only" or "since:YYYY-MM-DD", got {show_value(raw)}',
                )

        delete_after = self.choice("delete_after", ("never", "stored"), "never")
        timeout = t.get("timeout", 60.0)
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not (0 < timeout <= 3600)
        ):
            self.fail("timeout", f"must be seconds, 0 < timeout <= 3600, got {show_value(timeout)}")
            timeout = 60.0
        folders: tuple[str, ...] = ("INBOX",)
        exclude: tuple[str, ...] = ()
        if type_ == "pop3":
            for k in _IMAP_ONLY:
                if k in t:
                    self.fail(k, "only for imap accounts (POP3 has one mailbox)")
            if initial.kind == "since":
                self.fail("initial", 'POP3 has no server dates: use "full" or "new-only"')
        elif type_ == "imap":
            if delete_after == "stored":
                self.fail("delete_after", '"stored" is for pop3 accounts; IMAP sync is read-only')
            folders = self.folder_list("folders", ("*",))
            if "exclude" in t:
                exclude = self.folder_list("exclude", ())
            else:
                exclude = tuple(a for a in DEFAULT_EXCLUDE if a not in folders)

        if not self.ok:
            return None
        return Account(
            name=self.name,
            type=cast(AccountType, type_),
            host=cast(str, host),
            port=cast(int, port),
            tls=cast(TlsMode, tls),
            insecure=insecure,
            ca_file=ca_file,
            username=cast(str, username),
            password_env=password_env,
            password_command=password_command,
            auth=cast(AuthMode, auth),
            folders=folders,
            exclude=exclude,
            initial=initial,
            delete_after=cast(DeleteAfter, delete_after),
            config_file=config_file,
            timeout=float(timeout),
        )


def _optional_path(
    problems: _Problems, table: Any, section: str, key: str, base: Path, env: Mapping[str, str]
) -> Path | None:
    if table is None:
        return None
    if not isinstance(table, dict):
        problems.add(section, f"must be a table ([{section}]), got {show_value(table)}")
        return None
    problems.unknown_keys(table, (key, *_ALSO_KEYS.get(section, ())), section)
    if key not in table:
        return None
    raw = table[key]
    if not isinstance(raw, str) or not raw.strip():
        problems.add(f"{section}.{key}", f"must be a non-empty path, got {show_value(raw)}")
        return None
    return _resolve_path(raw, base, env)


# keys a section may hold besides the path ``_optional_path`` reads
_ALSO_KEYS = {"store": ("memory",)}


def _store_memory(problems: _Problems, table: Any) -> int | None:
    """``[store] memory``: the bytes a rebuild may use (a size such as "1GiB")."""
    if not isinstance(table, dict) or "memory" not in table:
        return None
    from stores.db import parse_size

    raw = table["memory"]
    try:
        if not isinstance(raw, str | int) or isinstance(raw, bool):
            raise ValueError(f'must be a size such as "1GiB", got {show_value(raw)}')
        return parse_size(str(raw))
    except ValueError as exc:
        problems.add("store.memory", str(exc))
        return None


def load_config(path: Path, env: Mapping[str, str]) -> Config:
    """Read, check and resolve the config file at ``path``.

    ``env`` supplies ``HOME`` (for ``~`` in paths) and ``MAILLEDGER_STORE``
    (which overrides ``[store] path``); secrets are not read here but when an
    account logs in, through :func:`resolve_secret`. Relative paths in the file
    are relative to the file's directory. Raises ConfigError listing every
    problem, each with the file name and the key.
    """
    path = Path(path)
    doc = _read_toml(path)
    problems = _Problems(path)
    base = path.resolve().parent
    problems.unknown_keys(doc, _TOP_KEYS, "")

    accounts: dict[str, Account] = {}
    raw_accounts = doc.get("accounts")
    if raw_accounts is None or raw_accounts == {}:
        problems.add("accounts", "no accounts configured (add an [accounts.NAME] table)")
    elif not isinstance(raw_accounts, dict):
        problems.add("accounts", "must be a table of [accounts.NAME] tables")
    else:
        for name, table in raw_accounts.items():
            if not _ACCOUNT_NAME.match(name):
                problems.add(
                    f"accounts.{name}", "an account name is letters, digits, '.', '_' and '-'"
                )
                continue
            if not isinstance(table, dict):
                problems.add(f"accounts.{name}", f"must be a table, got {show_value(table)}")
                continue
            account = _AccountReader(name, table, problems, base, env).build(path)
            if account is not None:
                accounts[name] = account

    store_path = _optional_path(problems, doc.get("store"), "store", "path", base, env)
    store_memory = _store_memory(problems, doc.get("store"))
    if env.get("MAILLEDGER_STORE"):
        store_path = Path(env["MAILLEDGER_STORE"])
    metrics_file = _optional_path(problems, doc.get("metrics"), "metrics", "file", base, env)
    dispatch = doc.get("dispatch", {})
    if not isinstance(dispatch, dict):
        problems.add("dispatch", f"must be a table ([dispatch]), got {show_value(dispatch)}")
        dispatch = {}

    problems.raise_if_any()
    return Config(
        accounts=accounts,
        store_path=store_path,
        metrics_file=metrics_file,
        dispatch=dispatch,
        path=path,
        store_memory=store_memory,
    )


def load_store_settings(path: Path, env: Mapping[str, str]) -> StoreSettings:
    """Read only the ``[store]`` table of the config file at ``path``.

    For ``find``, ``replay`` and the other commands that open a store and talk to
    no server: the accounts are not checked (a file that holds only ``[store]``
    is fine), the ``[store]`` table is, as strictly as by :func:`load_config`.
    Raises ConfigError naming the file and the key.
    """
    path = Path(path)
    doc = _read_toml(path)
    problems = _Problems(path)
    base = path.resolve().parent
    store_path = _optional_path(problems, doc.get("store"), "store", "path", base, env)
    memory = _store_memory(problems, doc.get("store"))
    problems.raise_if_any()
    if env.get("MAILLEDGER_STORE"):
        store_path = Path(env["MAILLEDGER_STORE"])
    return StoreSettings(path=store_path, memory=memory, config_file=path)


def _one_line(secret: str, where: str) -> str:
    if secret.endswith("\r\n"):
        secret = secret[:-2]
    elif secret.endswith("\n"):
        secret = secret[:-1]
    if not secret:
        raise ConfigError(f"{where}: gave an empty secret")
    if "\n" in secret or "\r" in secret:
        raise ConfigError(f"{where}: gave more than one line; it must print only the secret")
    return secret


def resolve_secret(
    account: Account,
    env: Mapping[str, str],
    run: Callable[..., subprocess.CompletedProcess[bytes]] | None = None,
    *,
    timeout: float = 120.0,
) -> str:
    """The password (or XOAUTH2 token) of ``account``.

    From the environment variable ``password_env``, or from the standard output
    of ``password_command`` run without a shell (``shlex.split``; its stderr goes
    to ours, e.g. a gpg prompt; one trailing newline is stripped). Raises
    ConfigError naming the account and the variable or the failure, never the
    secret, the command's output or the variable's value.
    """
    if account.password_env:
        value = env.get(account.password_env, "")
        if not value:
            raise ConfigError(
                f"{account._where('password_env')}: environment variable "
                f"{account.password_env} is not set or empty"
            )
        return _one_line(value, f"{account._where('password_env')}: {account.password_env}")
    if not account.password_command:
        raise ConfigError(f"{account._where('password_env')}: no password_env or password_command")
    import shlex
    import subprocess

    run = run or subprocess.run
    where = account._where("password_command")
    try:
        argv = shlex.split(account.password_command)
    except ValueError:
        raise ConfigError(f"{where}: cannot be split into words") from None
    if not argv:
        raise ConfigError(f"{where}: must name a program")
    try:
        done = run(argv, stdout=subprocess.PIPE, check=False, timeout=timeout)
    except FileNotFoundError:
        raise ConfigError(f"{where}: program {argv[0]!r} not found") from None
    except PermissionError:
        raise ConfigError(f"{where}: program {argv[0]!r} is not executable") from None
    except subprocess.TimeoutExpired:
        raise ConfigError(f"{where}: no answer within {timeout:g}s") from None
    except OSError as exc:
        raise ConfigError(f"{where}: could not run {argv[0]!r}: {exc.strerror}") from None
    if done.returncode != 0:
        raise ConfigError(f"{where}: exited with status {done.returncode}")
    try:
        text = (done.stdout or b"").decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{where}: output is not UTF-8") from None
    return _one_line(text, where)

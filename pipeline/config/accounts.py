"""One ``[accounts.NAME]`` table checked into an ``Account``: every key's type and
range, the defaults from the account's type, and the rules (no password in the
file; plaintext only to loopback; IMAP-only and POP3-only keys)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from pipeline.config.credentials import is_loopback
from pipeline.config.model import (
    DEFAULT_EXCLUDE,
    SPECIAL_USE,
    Account,
    AccountType,
    AuthMode,
    DeleteAfter,
    InitialMode,
    TlsMode,
)
from pipeline.config.reading import Problems, resolve_path, show_value

__all__ = ["AccountReader"]

_DEFAULT_PORTS: dict[tuple[str, str], int] = {
    ("imap", "implicit"): 993,
    ("imap", "starttls"): 143,
    ("imap", "none"): 143,
    ("pop3", "implicit"): 995,
    ("pop3", "starttls"): 110,
    ("pop3", "none"): 110,
}
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
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class AccountReader:
    """Checks one ``[accounts.NAME]`` table; ``build`` returns None if anything failed."""

    def __init__(
        self,
        name: str,
        table: dict[str, Any],
        problems: Problems,
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
            ca_file = resolve_path(raw_ca, self.base, self.env)
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

"""The configuration as mailledger uses it: typed, frozen objects, checked and
with their defaults filled in (the file is read into them by
``pipeline.config.loading``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any, Literal, cast

__all__ = [
    "DEFAULT_EXCLUDE",
    "SPECIAL_USE",
    "Account",
    "AccountType",
    "AuthMode",
    "Config",
    "DeleteAfter",
    "InitialMode",
    "StoreSettings",
    "TlsMode",
    "default_config_path",
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

    def where(self, key: str) -> str:
        """``key`` of this account as an error message names it (with the file)."""
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

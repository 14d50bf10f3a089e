"""How an account reaches its server safely: the password (from the environment
or a command, never from the file) and the TLS context; plaintext only to
loopback."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from pipeline.config.model import Account
from stores.errors import ConfigError

if TYPE_CHECKING:
    import ssl
    import subprocess

# ssl, subprocess, ipaddress and shlex are imported where used: every command
# reads the config package for the store's path, and most (stats, find, show)
# never make a TLS context or run a password command

__all__ = ["is_loopback", "resolve_secret", "tls_context"]


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
                f"{account.where('password_env')}: environment variable "
                f"{account.password_env} is not set or empty"
            )
        return _one_line(value, f"{account.where('password_env')}: {account.password_env}")
    if not account.password_command:
        raise ConfigError(f"{account.where('password_env')}: no password_env or password_command")
    import shlex
    import subprocess

    run = run or subprocess.run
    where = account.where("password_command")
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

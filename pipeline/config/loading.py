"""The config file read, checked and resolved: ``load_config`` (the whole file,
for sync and dispatch) and ``load_store_settings`` (only ``[store]``, for the
commands that open a store and talk to no server)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pipeline.config.accounts import AccountReader
from pipeline.config.model import Account, Config, StoreSettings
from pipeline.config.reading import Problems, read_toml, resolve_path, show_value

__all__ = ["load_config", "load_store_settings"]

_TOP_KEYS = ("accounts", "store", "metrics", "dispatch")
_ACCOUNT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*\Z")


def _optional_path(
    problems: Problems, table: Any, section: str, key: str, base: Path, env: Mapping[str, str]
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
    return resolve_path(raw, base, env)


# keys a section may hold besides the path ``_optional_path`` reads
_ALSO_KEYS = {"store": ("memory",)}


def _store_memory(problems: Problems, table: Any) -> int | None:
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
    doc = read_toml(path)
    problems = Problems(path)
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
            account = AccountReader(name, table, problems, base, env).build(path)
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
    is fine), the ``[store]`` table is, as strictly as by :func:`load_config`, and
    so are the names of the tables (``[stor]`` is an error with a did-you-mean).
    Raises ConfigError naming the file and the key.
    """
    path = Path(path)
    doc = read_toml(path)
    problems = Problems(path)
    base = path.resolve().parent
    problems.unknown_keys(doc, _TOP_KEYS, "")  # ([stor] is a typo, not a table to skip)
    store_path = _optional_path(problems, doc.get("store"), "store", "path", base, env)
    memory = _store_memory(problems, doc.get("store"))
    problems.raise_if_any()
    if env.get("MAILLEDGER_STORE"):
        store_path = Path(env["MAILLEDGER_STORE"])
    return StoreSettings(path=store_path, memory=memory, config_file=path)

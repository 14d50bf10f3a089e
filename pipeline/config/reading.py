"""The parts every reader of the file uses: the TOML read with its errors named,
problems collected so all of one file are reported together, paths resolved
against the file, values shown as the user wrote them (never a secret)."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from stores.errors import ConfigError

__all__ = ["Problems", "read_toml", "resolve_path", "show_value"]


def show_value(value: Any) -> str:
    """A value as the user wrote it in TOML, for messages about non-secret keys."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float | list):
        return json.dumps(value, ensure_ascii=False, default=str)
    if isinstance(value, dict):
        return "a table"
    return str(value)


class Problems:
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
        """A problem for each key of ``table`` not in ``known``, with the nearest
        known one when there is one; at the top of the file (``where`` empty) a
        table is named as a table: ``stor: unknown table (did you mean [store]?)``."""
        for key in table:
            if key in known:
                continue
            full = f"{where}.{key}" if where else key
            if not where and isinstance(table[key], dict):
                self._unknown_table(key, known)
                continue
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

    def _unknown_table(self, name: str, known: Sequence[str]) -> None:
        import difflib

        close = difflib.get_close_matches(name, known, n=1)
        hint = f" (did you mean [{close[0]}]?)" if close else ""
        tables = ", ".join(f"[{k}]" for k in known)
        self.add(name, f"unknown table{hint}; known tables: {tables}")


def read_toml(path: Path) -> dict[str, Any]:
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


def resolve_path(raw: str, base: Path, env: Mapping[str, str]) -> Path:
    """``~`` from ``env["HOME"]``; a relative path is relative to the config file."""
    if raw == "~" or raw.startswith("~/"):
        home = env.get("HOME") or str(Path.home())
        raw = home + raw[1:]
    p = Path(raw)
    return p if p.is_absolute() else base / p

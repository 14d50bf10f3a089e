"""The ``[dispatch]`` table checked into a ``DispatchConfig``: its routes (To/Cc
globs to a handler), the default handler and the directories handlers are
imported from (see ``pipeline.dispatch`` for what a dispatch does with them)."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.config.reading import show_value
from stores.errors import ConfigError

__all__ = ["DispatchConfig", "Route", "parse_dispatch"]

_HANDLER_SPEC = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*\Z")
_KEYS = ("default", "routes", "import_path")
_ROUTE_KEYS = ("to", "handler")


@dataclass(frozen=True)
class Route:
    """Messages to or Cc ``patterns`` (lowercase globs) go to ``handler``."""

    patterns: tuple[str, ...]
    handler: str
    key: str  # where it is in the file, for messages: dispatch.routes[0]

    def matches(self, addresses: Iterable[str]) -> bool:
        return any(fnmatch.fnmatchcase(a.lower(), p) for a in addresses for p in self.patterns)


@dataclass(frozen=True)
class DispatchConfig:
    routes: tuple[Route, ...]
    default: str | None
    import_path: tuple[Path, ...]
    config_file: Path | None = None

    def handler_for(self, addresses: Sequence[str]) -> str | None:
        """The handler of the first route matching one of ``addresses``, else the default."""
        for route in self.routes:
            if route.matches(addresses):
                return route.handler
        return self.default

    def handlers(self) -> list[str]:
        """Every handler named, in the order of the file (each once)."""
        names = [r.handler for r in self.routes]
        if self.default:
            names.append(self.default)
        return list(dict.fromkeys(names))

    def where(self, handler: str) -> str:
        """The key naming ``handler`` first, for error messages."""
        for r in self.routes:
            if r.handler == handler:
                return f"{r.key}.handler"
        return "dispatch.default"


def parse_dispatch(
    raw: Mapping[str, Any], config_file: Path | None, env: Mapping[str, str] | None = None
) -> DispatchConfig:
    """Check the raw ``[dispatch]`` table; ConfigError naming the file and key otherwise."""
    prefix = f"{config_file}: " if config_file else ""
    problems: list[str] = []

    def bad(key: str, message: str) -> None:
        problems.append(f"{prefix}{key}: {message}")

    def spec(key: str, value: Any) -> str | None:
        if not isinstance(value, str) or not _HANDLER_SPEC.match(value.strip()):
            example = '"handlers.jobs:process"'
            bad(key, f"must be module:function (e.g. {example}), got {show_value(value)}")
            return None
        return value.strip()

    for k in raw:
        if k not in _KEYS:
            bad(f"dispatch.{k}", f"unknown key; known keys: {', '.join(_KEYS)}")

    default = spec("dispatch.default", raw["default"]) if "default" in raw else None

    routes: list[Route] = []
    raw_routes = raw.get("routes", [])
    if not isinstance(raw_routes, list):
        bad("dispatch.routes", "must be an array of tables ([[dispatch.routes]])")
        raw_routes = []
    for i, r in enumerate(raw_routes):
        key = f"dispatch.routes[{i}]"
        if not isinstance(r, dict):
            bad(key, f"must be a table with to and handler, got {show_value(r)}")
            continue
        for k in r:
            if k not in _ROUTE_KEYS:
                bad(f"{key}.{k}", f"unknown key; known keys: {', '.join(_ROUTE_KEYS)}")
        if "to" not in r:
            bad(f"{key}.to", "missing (an address or a glob such as *@lists.example.org)")
        if "handler" not in r:
            bad(f"{key}.handler", 'missing ("module:function")')
        to = r.get("to")
        items = to if isinstance(to, list) else [to]
        patterns: list[str] = []
        for item in items if "to" in r else []:
            if not isinstance(item, str) or not item.strip() or any(c.isspace() for c in item):
                bad(
                    f"{key}.to",
                    f"must be an address or glob (or a list of them), got {show_value(to)}",
                )
                break
            patterns.append(item.strip().lower())
        if isinstance(to, list) and not to:
            bad(f"{key}.to", "must not be an empty list")
        handler = spec(f"{key}.handler", r["handler"]) if "handler" in r else None
        if patterns and handler:
            routes.append(Route(tuple(patterns), handler, key))

    base = config_file.resolve().parent if config_file else Path.cwd()
    paths: list[Path] = [base]
    raw_paths = raw.get("import_path", [])
    if isinstance(raw_paths, str):
        raw_paths = [raw_paths]
    if not isinstance(raw_paths, list) or not all(isinstance(p, str) and p for p in raw_paths):
        bad("dispatch.import_path", f"must be a list of directories, got {show_value(raw_paths)}")
        raw_paths = []
    home = (env or {}).get("HOME") or str(Path.home())
    for p in raw_paths:
        if p == "~" or p.startswith("~/"):
            p = home + p[1:]
        path = Path(p) if Path(p).is_absolute() else base / p
        if not path.is_dir():
            bad("dispatch.import_path", f"no such directory: {path}")
        paths.append(path)

    if not problems and not routes and default is None:
        bad("dispatch", "no routes and no default: add [[dispatch.routes]] or dispatch.default")
    if problems:
        raise ConfigError("\n".join(problems))
    return DispatchConfig(tuple(routes), default, tuple(paths), config_file)

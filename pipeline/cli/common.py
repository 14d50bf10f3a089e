"""What the commands share: where the store is, how it is opened (with its memory
budget), the progress display and the version."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.progress import Progress, progress_for
from pipeline.verbosity import progress_wanted
from stores.errors import UsageError

if TYPE_CHECKING:
    from pipeline.store import MessageStore

__all__ = [
    "command_progress",
    "default_store_path",
    "memory_budget",
    "open_store",
    "resolve_store",
    "version",
]

log = logging.getLogger("mailledger.cli")


def default_store_path(env: Mapping[str, str]) -> Path:
    """The store directory when ``--store`` is not given.

    ``$MAILLEDGER_STORE``, else ``$XDG_DATA_HOME/mailledger``, else
    ``~/.local/share/mailledger``.
    """
    if env.get("MAILLEDGER_STORE"):
        return Path(env["MAILLEDGER_STORE"])
    base = env.get("XDG_DATA_HOME") or str(Path(env.get("HOME", "~")).expanduser() / ".local/share")
    return Path(base) / "mailledger"


def version() -> str:
    """The installed mailledger's version (package metadata)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("mailledger")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "0+unknown"


def command_progress(*, delay: float = 0.0) -> Progress:
    """The progress display of a long command: a bar on stderr when it is a terminal,
    unless the run is quiet (``-q``: see ``pipeline.verbosity``); nothing under cron
    or in a pipe. ``delay``: seconds before a bar shows."""
    return progress_for(progress_wanted(sys.stderr), delay=delay)


def memory_budget(args: argparse.Namespace) -> int | None:
    """The rebuild memory budget asked for: ``--memory``, else ``$MAILLEDGER_MEMORY``
    (None: the config's ``[store] memory`` or the default)."""
    from stores.db import parse_size

    raw = getattr(args, "memory", None) or args.env.get("MAILLEDGER_MEMORY")
    if not raw:
        return None
    try:
        return parse_size(raw)
    except ValueError as exc:
        where = "--memory" if getattr(args, "memory", None) else "MAILLEDGER_MEMORY"
        raise UsageError(f"{where}: {exc}") from None


def resolve_store(args: argparse.Namespace) -> None:
    """Settle ``args.store`` for a command that opens a store: ``--store``, else
    ``$MAILLEDGER_STORE``, else ``[store] path`` of the config file (``--config``, or
    the default file where it exists), else ``$XDG_DATA_HOME/mailledger``. The
    config's ``[store] memory`` goes to ``args.config_memory``."""
    from pipeline.config import default_config_path, load_store_settings

    env = args.env
    args.config_memory = None
    config = args.config
    if config is None:
        default = default_config_path(env)
        config = default if default.is_file() else None
    settings = load_store_settings(config, env) if config is not None else None
    if settings is not None:
        args.config_memory = settings.memory
    if args.store is not None:
        why = "--store"
    elif env.get("MAILLEDGER_STORE"):
        args.store, why = Path(env["MAILLEDGER_STORE"]), "$MAILLEDGER_STORE"
    elif settings is not None and settings.path is not None:
        args.store, why = settings.path, f"[store] path in {settings.config_file}"
    else:
        args.store, why = default_store_path(env), "the default"
    log.info("store %s (from %s)", args.store, why)


def open_store(args: argparse.Namespace, *, create: bool = False) -> MessageStore:
    """The store ``resolve_store`` settled, with the memory budget asked for."""
    budget = memory_budget(args)  # (a bad size is a usage error before anything is opened)
    if budget is None:
        budget = getattr(args, "config_memory", None)  # [store] memory
    store: MessageStore = args.app.open_store(args.store, create=create, memory=budget)
    return store

"""What the commands share: where the store is, how it is opened (with its memory
budget), the progress display and the version."""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.progress import Progress, progress_for
from pipeline.verbosity import progress_wanted
from stores.errors import UsageError

if TYPE_CHECKING:
    from pipeline.cluster.reads import ClusterReads
    from pipeline.store import MessageStore, PastStore

__all__ = [
    "add_as_of",
    "as_of",
    "command_progress",
    "default_store_path",
    "memory_budget",
    "open_reads",
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


def open_reads(args: argparse.Namespace) -> MessageStore | ClusterReads:
    """What a read command asks: the cluster of ``--cluster DIR`` read as one store
    (``pipeline.cluster.reads``: imported only then), else the store."""
    if args.cluster is None:
        return open_store(args)
    if getattr(args, "as_of", None) is not None:
        raise UsageError("--as-of: not supported with --cluster yet")
    from pipeline.cluster.reads import open_reads as open_cluster

    return open_cluster(args.cluster)


def add_as_of(p: argparse.ArgumentParser) -> None:
    """``--as-of SEQ|DATETIME`` on a command that reads the projections."""
    p.add_argument(
        "--as-of",
        metavar="SEQ|DATETIME",
        help="answer from the store as it stood after event SEQ, or after the last event"
        " recorded at or before DATETIME (ISO 8601, UTC unless it names an offset):"
        " replayed into STORE/cache, the live projections untouched",
    )


@contextlib.contextmanager
def as_of(
    args: argparse.Namespace, store: MessageStore | ClusterReads
) -> Iterator[MessageStore | PastStore | ClusterReads]:
    """``store`` itself, or with ``--as-of`` the store as it stood then."""
    if args.as_of is None:
        yield store
        return
    from pipeline.store import MessageStore

    if not isinstance(store, MessageStore):  # (refused by ``open_reads`` already)
        raise UsageError("--as-of: not supported with --cluster yet")
    text: str = args.as_of.strip()
    if text.isdigit():
        seq = int(text)
    else:
        try:
            when = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise UsageError(
                f"--as-of: neither an event seq nor an ISO 8601 date or time: {text!r}"
            ) from None
        when = when if when.tzinfo is not None else when.replace(tzinfo=UTC)
        seq = store.seq_at(when)
        log.info("--as-of %s: event %d, the last recorded at or before it", text, seq)
    with store.as_of(seq) as past:
        yield past

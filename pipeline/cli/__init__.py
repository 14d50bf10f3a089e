"""The ``mailledger`` command: thin commands over the library.

Each command parses its arguments, calls one library function and formats the
answer. ``entry`` builds the parser and, in ``main``, maps what ends a command
to its exit code; ``exits`` holds the codes and turns a run's report into one;
``parsing`` and ``common`` hold what every command shares; ``reading``,
``admin``, ``syncing``, ``dispatching``, ``serving`` and ``docs`` the commands, by
group; ``output`` how they print.

The names below are loaded when first used: the thin client of ``mailledger
serve`` (``pipeline.serve.client``) imports ``common`` and ``output`` without
the parser of every command and what it imports.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pipeline.cli.common import default_store_path, version
    from pipeline.cli.entry import build_parser, main

__all__ = ["build_parser", "default_store_path", "main", "version"]


def __getattr__(name: str) -> object:
    if name in ("build_parser", "main"):
        from pipeline.cli import entry

        return getattr(entry, name)
    if name in ("default_store_path", "version"):
        from pipeline.cli import common

        return getattr(common, name)
    raise AttributeError(name)

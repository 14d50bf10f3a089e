"""The ``mailledger`` command: thin commands over the library.

Each command parses its arguments, calls one library function and formats the
answer. ``entry`` builds the parser and, in ``main``, maps what ends a command
to its exit code; ``exits`` holds the codes and turns a run's report into one;
``parsing`` and ``common`` hold what every command shares; ``reading``,
``admin``, ``syncing``, ``dispatching`` and ``docs`` the commands, by group;
``output`` how they print.
"""

from pipeline.cli.common import default_store_path, version
from pipeline.cli.entry import build_parser, main

__all__ = ["build_parser", "default_store_path", "main", "version"]

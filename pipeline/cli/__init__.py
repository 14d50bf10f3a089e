"""The ``mailledger`` command: thin commands over the library.

Each command parses its arguments, calls one library function and formats the
answer. ``main`` (``pipeline.cli.main``) builds the parser and maps what ends a
command to its exit code; ``exits`` holds the codes and turns a run's report
into one; ``parsing`` the parts every command shares; ``reading``, ``admin``,
``syncing``, ``dispatching`` and ``docs`` the commands, by group; ``output``
how they print.
"""

from pipeline.cli.common import default_store_path, version
from pipeline.cli.main import build_parser, main
from pipeline.verbosity import progress_wanted

__all__ = ["build_parser", "default_store_path", "main", "progress_wanted", "version"]

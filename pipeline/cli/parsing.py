"""The parser's parts every command shares: usage errors that exit 2, ``--version``,
the global options (before or after the command), and one call that adds a
command with its help and its example."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from pipeline.cli.common import version
from pipeline.cli.output import echo
from stores.errors import UsageError

__all__ = ["GLOBAL_OPTIONS", "Command", "Parser", "Version", "add_command", "global_options"]

Command = Callable[[argparse.Namespace], int]
GLOBAL_OPTIONS = "global options (before or after the command)"


class Version(argparse.Action):
    """``--version``: the package metadata is read only when asked (its import
    costs every command 30 ms otherwise)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        echo(f"mailledger {version()}")
        parser.exit()


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # usage errors exit 2 with the reason
        self.print_usage(sys.stderr)
        raise UsageError(message)


def global_options(parser: argparse.ArgumentParser, *, after_command: bool) -> None:
    """The options every command takes, before the command or after it.

    Before it they carry the defaults; after it (``after_command``) they have none
    (SUPPRESS), so a subcommand sets only what was given there and never
    overwrites a value given before the command with a default."""

    def default(value: Any) -> Any:
        return argparse.SUPPRESS if after_command else value

    g = parser.add_argument_group(GLOBAL_OPTIONS)
    g.add_argument(  # type: ignore[attr-defined]
        "--store",
        type=Path,
        metavar="DIR",
        default=default(None),
        help="store directory (default: $MAILLEDGER_STORE, else [store] path in the config"
        " file, else $XDG_DATA_HOME/mailledger)",
    ).complete_kind = "DIRECTORY"  # (for shtab, read by the completion command)
    g.add_argument(  # type: ignore[attr-defined]
        "--config",
        type=Path,
        metavar="FILE",
        default=default(None),
        help="TOML config file (default: $XDG_CONFIG_HOME/mailledger/config.toml, read"
        " where it exists)",
    ).complete_kind = "FILE"
    g.add_argument(
        "--memory",
        metavar="SIZE",
        default=default(None),
        help="memory a replay or verify may use, e.g. 1GiB (default: $MAILLEDGER_MEMORY, else"
        " the config's [store] memory, else a quarter of the machine, at most 1 GiB);"
        " past it they spill to disk",
    )
    g.add_argument(
        "--no-serve",
        action="store_true",
        default=default(False),
        help="run the command in this process even when `mailledger serve` holds the store",
    )
    v = g.add_mutually_exclusive_group()
    for flags, level, what in (
        (("-v", "--verbose"), logging.INFO, "say more on stderr (each step, each file skipped)"),
        (("-q", "--quiet"), logging.ERROR, "errors only: no progress, no warnings, no notes"),
        (("--debug",), logging.DEBUG, "debug log, with the IMAP conversation (secrets masked)"),
    ):
        v.add_argument(
            *flags,
            dest="log_level",
            action="store_const",
            const=level,
            default=default(logging.WARNING),
            help=what,
        )


def add_command(
    subs: Any,
    name: str,
    fn: Command,
    help: str,
    example: str,
    *,
    opens_store: bool = True,
) -> argparse.ArgumentParser:
    """A command ``name`` that runs ``fn``, its ``--help`` ending in ``example``.

    ``opens_store`` False: ``main`` does not settle ``--store`` before it (sync and
    dispatch read the whole config file; completion and man open nothing)."""
    p: argparse.ArgumentParser = subs.add_parser(
        name,
        help=help,
        description=help,
        epilog=f"example:\n  {example}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    global_options(p, after_command=True)
    p.set_defaults(fn=fn, opens_store=opens_store)
    return p

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

__all__ = [
    "GLOBAL_OPTIONS",
    "Command",
    "Parser",
    "Version",
    "add_command",
    "global_options",
    "query_words_last",
]

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
    query_commands: dict[str, argparse.ArgumentParser]
    """The commands whose positional arguments are query words (``query_words_last``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.query_commands = {}

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
    g.add_argument(  # type: ignore[attr-defined]
        "--cluster",
        type=Path,
        metavar="DIR",
        default=default(None),
        help="a cluster of shards rather than one store: sync into it, read it as one"
        " store (search, thread, show, query, stats, verify: through each shard's newest"
        " snapshot, `cluster snapshot DIR`)",
    ).complete_kind = "DIRECTORY"
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


def _takes_value(parser: argparse.ArgumentParser, token: str) -> bool | None:
    """Whether the option ``token`` of ``parser`` is followed by its value; None
    when ``token`` is no option of it (an abbreviation counts when it names one)."""
    name, equals, _ = token.partition("=")
    actions = {
        option: action
        for action in parser._actions  # (argparse has no public list of them)
        for option in action.option_strings
    }
    found = actions.get(name)
    if found is None and name.startswith("--"):
        matches = {a for option, a in actions.items() if option.startswith(name)}
        found = matches.pop() if len(matches) == 1 else None
        if found is None and matches:
            return False  # (ambiguous: argparse names the candidates)
    if found is None:
        return None
    return not equals and found.nargs != 0


def query_words_last(
    argv: Sequence[str], top: argparse.ArgumentParser, commands: dict[str, argparse.ArgumentParser]
) -> list[str]:
    """``argv`` with the query words of a command of ``commands`` (its positional
    arguments) moved after a ``--``, in their order, its options before.

    notmuch reads ``notmuch search -from:carl subject:x`` as a query: argparse would
    take ``-from:carl`` for an unknown option. After the command, a token is an
    option when it is one of the command's (``--limit 5``, ``--sort=oldest``,
    ``-q``, a unique abbreviation); every other token, a leading ``-`` or not, is a
    query word. A ``--`` already there ends the options as usual."""
    words = list(argv)
    at = 0
    while at < len(words):  # the command: the first token that is no global option's
        token = words[at]
        if token in commands:
            break
        if not token.startswith("-") or token == "--":
            return words
        at += 2 if _takes_value(top, token) else 1
    else:
        return words
    command = commands[words[at]]
    options: list[str] = []
    query: list[str] = []
    rest = iter(words[at + 1 :])
    for token in rest:
        if token == "--":
            query.extend(rest)
            break
        takes = _takes_value(command, token) if token.startswith("-") else None
        if takes is None:
            query.append(token)
            continue
        options.append(token)
        value = next(rest, None) if takes else None
        if value is not None:
            options.append(value)
    return [*words[: at + 1], *options, "--", *query] if query else words

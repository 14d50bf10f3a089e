"""The ``mailledger`` entry point: the parser of every command, and ``main()``,
where every exception that ends a command becomes its exit code."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import textwrap
from collections.abc import Mapping, Sequence

from pipeline.bootstrap import App
from pipeline.cli import (
    admin,
    clustering,
    dispatching,
    docs,
    output,
    publishing,
    reading,
    searching,
    syncing,
)
from pipeline.cli.common import resolve_store
from pipeline.cli.exits import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from pipeline.cli.parsing import Parser, Version, global_options
from pipeline.held_code import held_code, install_changed
from pipeline.verbosity import LogSetup
from stores.errors import ConfigError, MailledgerError, NotFoundError, UsageError

__all__ = ["build_parser", "main"]

# the commands, in the order ``--help``, the completion script and the manual list them
_COMMANDS = (
    admin.add_import,
    admin.add_replay,
    reading.add_find,
    searching.add_search,
    searching.add_export,
    reading.add_show,
    reading.add_thread,
    admin.add_delete,
    reading.add_query,
    admin.add_verify,
    admin.add_compact,
    reading.add_stats,
    syncing.add_sync,
    dispatching.add_dispatch,
    reading.add_cursor,
    clustering.add_cluster,
    publishing.add_publish,
    docs.add_completion,
    docs.add_man,
)

# the commands that write a store: each holds the code it started with (held_code), so
# an upgrade under it (`pip install -U` during a cron sync) cannot mix two versions
_RUNS = frozenset({"sync", "import", "replay", "compact", "dispatch", "delete"})


def build_parser(env: Mapping[str, str]) -> argparse.ArgumentParser:
    """The parser of the whole command line (``env``: the environment it runs in)."""
    parser = Parser(
        prog="mailledger",
        description="Keep mail safe and findable: an event log of every message seen.",
        epilog=textwrap.dedent(
            """\
            examples:
              mailledger import maildir ~/Maildir
              mailledger find subject 'Re: budget'
              mailledger search 'from:alice subject:budget date:2025-06..'
              mailledger thread '<id@example.com>'
              mailledger query "select * from thread('<id@example.com>')"
            """
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action=Version)
    global_options(parser, after_command=False)
    subs = parser.add_subparsers(
        dest="command", metavar="COMMAND", required=True, parser_class=Parser
    )
    for add in _COMMANDS:
        add(subs)
    return parser


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    env = os.environ if env is None else env
    # What a command creates in a store (the DuckDB file and its WAL included) is
    # the owner's alone: 0700 directories, 0600 files. Restored on return (the
    # metrics textfile, written under the caller's umask, must stay readable).
    umask = os.umask(0o077)
    logs: LogSetup | None = None
    held = contextlib.ExitStack()
    try:
        parser = build_parser(env)
        args = parser.parse_args(argv)
        if args.command in _RUNS:
            held.enter_context(held_code())
        args.parser = parser  # (completion and man describe it)
        args.env = env
        args.app = App(env)  # the run: its clock, run id, stores and sources
        args.umask = umask
        logs = LogSetup(args.log_level)  # the verbosity contract: pipeline/verbosity.py
        if args.opens_store:
            resolve_store(args)  # (sync and dispatch read the whole config file)
        code = int(args.fn(args))
        sys.stdout.flush()  # (here, where a reader gone is caught, not at exit)
        return code
    except (UsageError, ConfigError) as exc:
        output.echo(f"mailledger: {exc}", file=sys.stderr, newlines=True)
        return EXIT_USAGE
    except NotFoundError as exc:
        output.echo(f"mailledger: {exc}", file=sys.stderr, newlines=True)
        return EXIT_ERROR
    except MailledgerError as exc:  # LogIntegrityError, LockTimeout, SourceError...
        output.echo(f"mailledger: error: {exc}", file=sys.stderr, newlines=True)
        return EXIT_ERROR
    except OSError as exc:  # a full disk, a read-only store: say which file, no traceback
        if isinstance(exc, BrokenPipeError) and output.stdout_closed():
            # `mailledger query ... | head -1`: the reader has what it wanted. Quiet and
            # successful, as `grep` or `ls` are; the rest of the output goes nowhere.
            # (A broken pipe elsewhere, a server's socket, is an error as any.)
            output.silence(sys.stdout)
            return EXIT_OK
        where = f"{exc.filename}: " if exc.filename else ""
        output.echo(f"mailledger: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        output.echo("mailledger: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except ImportError as exc:
        # an import late in a run failed: when the install changed under the run (an
        # upgrade), that is the error to name; otherwise it is a bug, traceback shown
        changed = install_changed()
        if changed is None:
            raise
        output.echo(f"mailledger: error: {changed} ({exc})", file=sys.stderr)
        return EXIT_ERROR
    except Exception as exc:
        import duckdb

        if not isinstance(exc, duckdb.Error):
            raise
        # the projection database failed (a full disk, say); the log is not affected
        output.echo(f"mailledger: error: {exc}", file=sys.stderr, newlines=True)
        return EXIT_ERROR
    finally:
        held.close()
        if logs is not None:
            logs.undo()
        os.umask(umask)

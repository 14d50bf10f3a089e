"""The ``mailledger`` entry point: the parser of every command, and ``main()``,
where every exception that ends a command becomes its exit code."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import textwrap
from collections.abc import Callable, Mapping, Sequence

from pipeline.bootstrap import App, KeptStores
from pipeline.cli import (
    admin,
    clustering,
    dispatching,
    docs,
    output,
    publishing,
    reading,
    searching,
    serving,
    syncing,
    web,
)
from pipeline.cli.common import resolve_store
from pipeline.cli.exits import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from pipeline.cli.parsing import Parser, Version, global_options, query_words_last
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
    web.add_web,
    clustering.add_cluster,
    serving.add_serve,
    publishing.add_publish,
    docs.add_completion,
    docs.add_man,
)

# the commands that write a store: each holds the code it started with (held_code), so
# an upgrade under it (`pip install -U` during a cron sync) cannot mix two versions
# (`serve` too: the commands it forks run the code it started with)
_RUNS = frozenset({"sync", "import", "replay", "compact", "dispatch", "delete", "serve"})
# what cannot run beside the readers of a store's server
_NOT_BESIDE_A_SERVER = frozenset({"replay"})
# what --cluster DIR runs over a cluster: its reads, its sync (and cluster itself,
# which names its DIR)
_CLUSTER_COMMANDS = frozenset(
    {"search", "thread", "show", "query", "stats", "verify", "sync", "cluster", "publish"}
)


# the commands whose arguments are the words of a query, as notmuch reads them
# (`search -from:carl subject:x`: a leading "-" is NOT, not an option)
_QUERY_COMMANDS = ("search",)


def build_parser(env: Mapping[str, str]) -> Parser:
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
    parser.query_commands = {name: subs.choices[name] for name in _QUERY_COMMANDS}
    return parser


def _one_shard_is_a_store(args: argparse.Namespace) -> None:
    """``--cluster DIR``: refused for a command that cannot run over a cluster yet.
    A cluster of one shard is read and synced as the store it is (issue 34: one
    shard costs nothing): no snapshot, no Dask, the plain commands' fast paths;
    its sync still puts the config's new accounts in the catalog
    (``args.one_shard_cluster``). A sync given ``--scheduler`` or
    ``--local-workers`` runs as a cluster's does."""
    if args.command not in _CLUSTER_COMMANDS:
        raise UsageError(f"{args.command}: not supported with --cluster yet")
    if args.command in ("cluster", "publish") or (
        args.command == "sync" and (args.scheduler is not None or args.local_workers is not None)
    ):
        return
    from pipeline.cluster.catalog import open_catalog

    catalog = open_catalog(args.cluster)
    if len(catalog.shards) == 1:
        args.one_shard_cluster = args.cluster
        args.store, args.cluster = catalog.shard_path(catalog.shards[0]), None


def main(
    argv: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    *,
    before: Callable[[argparse.Namespace], None] | None = None,
    parser: Parser | None = None,
    kept: KeptStores | None = None,
) -> int:
    """Run the command line; returns the exit code. ``before``: called with the parsed
    arguments before the command runs (``mailledger serve`` checks that a forwarded
    command is for its store). ``parser``: ``build_parser``'s, built ahead (a served
    command's worker inherits the server's: 15-20 ms a command does not spend);
    ``kept``: stores kept open from an earlier command of this process (``App``;
    a served command's worker)."""
    env = os.environ if env is None else env
    # What a command creates in a store (the DuckDB file and its WAL included) is
    # the owner's alone: 0700 directories, 0600 files. Restored on return (the
    # metrics textfile, written under the caller's umask, must stay readable).
    umask = os.umask(0o077)
    logs: LogSetup | None = None
    held = contextlib.ExitStack()
    try:
        if parser is None:
            parser = build_parser(env)
        words = sys.argv[1:] if argv is None else argv
        args = parser.parse_args(query_words_last(words, parser, parser.query_commands))
        if args.cluster is not None:
            _one_shard_is_a_store(args)
        if args.command in _RUNS:
            held.enter_context(held_code())
        args.parser = parser  # (completion and man describe it)
        args.env = env
        args.app = App(env, kept=kept)  # the run: its clock, run id, stores and sources
        args.umask = umask
        logs = LogSetup(args.log_level)  # the verbosity contract: pipeline/verbosity.py
        if args.opens_store:
            resolve_store(args)  # (sync and dispatch read the whole config file)
            if args.command in _NOT_BESIDE_A_SERVER:
                serving.refuse_when_served(args)
        if before is not None:
            before(args)
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

        if isinstance(exc, duckdb.InterruptException) or str(exc) == "Query interrupted":
            # Ctrl-C during a query: DuckDB took the signal and raised its own error
            output.echo("mailledger: interrupted", file=sys.stderr)
            return EXIT_INTERRUPTED
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

"""The ``mailledger`` command: thin commands over the library.

Each command parses its arguments, calls one library function and formats the
answer. Exit codes are mapped here and only here: 0 success, 1 an
error of any message/folder/account or an unbalanced run, 2 a usage or
configuration error, 3 completed but an ALARM was raised.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import textwrap
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pipeline import output
from pipeline.bootstrap import App
from pipeline.progress import Progress, progress_for
from pipeline.verbosity import LogSetup, progress_wanted
from stores.errors import (
    ConfigError,
    LockTimeout,
    LogIntegrityError,
    MailledgerError,
    NotFoundError,
    UsageError,
)

__all__ = ["build_parser", "default_store_path", "main", "progress_wanted", "version"]

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_ALARM = 0, 1, 2, 3


def _with_exit(report: dict[str, Any], code: int) -> dict[str, Any]:
    """A report's JSON with the exit code this command gives it, after the run's
    identity (``run_id`` and the mode: ``applied`` / ``dry_run``)."""
    head = [k for k in ("run_id", "applied", "dry_run") if k in report]
    return {**{k: report[k] for k in head}, "exit_code": code, **report}


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


class _Version(argparse.Action):
    """``--version``: the package metadata is read only when asked (its import
    costs every command 30 ms otherwise)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        print(f"mailledger {version()}")
        parser.exit()


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # usage errors exit 2 with the reason
        self.print_usage(sys.stderr)
        raise UsageError(message)


def _progress(args: argparse.Namespace, *, delay: float = 0.0) -> Progress:
    """The progress display of a long command: a bar on stderr when it is a terminal,
    unless the run is quiet (``-q``: see ``pipeline.verbosity``); nothing under cron
    or in a pipe. ``delay``: seconds before a bar shows."""
    return progress_for(progress_wanted(sys.stderr), delay=delay)


def _memory(args: argparse.Namespace) -> int | None:
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


def _resolve_store(args: argparse.Namespace) -> None:
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


def _open(args: argparse.Namespace, *, create: bool = False) -> Any:
    budget = _memory(args)  # (a bad size is a usage error before anything is opened)
    if budget is None:
        budget = getattr(args, "config_memory", None)  # [store] memory
    return args.app.open_store(args.store, create=create, memory=budget)


# -- commands ------------------------------------------------------------------


def cmd_import(args: argparse.Namespace) -> int:
    from pipeline.sources.gdbm import import_gdbm
    from pipeline.sources.maildir import check_maildir, import_maildir
    from pipeline.sources.mbox import import_mbox

    if args.kind == "maildir":
        check_maildir(Path(args.path).resolve())  # (refused before a store is made for it)
    progress = _progress(args)
    try:
        with _open(args, create=True) as store:
            fn = {"maildir": import_maildir, "mbox": import_mbox, "gdbm": import_gdbm}[args.kind]
            workers = args.workers if args.workers is not None else min(4, os.cpu_count() or 1)
            counts = fn(
                store,
                Path(args.path),
                batch_size=args.batch_size,
                progress=progress,
                workers=workers,
            )
    finally:
        progress.close()
    if args.json:
        output.print_json(counts.as_dict())
    else:
        print(
            f"import {args.kind} {args.path}: seen={counts.uids_seen} new={counts.new_messages}"
            f" duplicates={counts.duplicates} other_source={counts.conflicts_other_source}"
            f" bodies={counts.bodies_fetched} known={counts.known_skipped}"
            f" malformed={counts.malformed} errors={counts.errors} events={counts.events}"
            + (f" not_mail={counts.not_mail}" if args.kind == "maildir" else "")
        )
        for line in counts.error_details:
            print(f"error: {line}", file=sys.stderr)
    if not counts.balanced:
        print("error: run counts do not balance", file=sys.stderr)
        return EXIT_ERROR
    return EXIT_ERROR if counts.errors else EXIT_OK


def cmd_replay(args: argparse.Namespace) -> int:
    import time

    progress = _progress(args)
    with _open(args) as store:
        t0 = time.perf_counter()
        try:  # (bulk SQL: each phase is shown, with the time it has taken)
            last = store.reindex(progress=progress)
        finally:
            progress.close()
        took = time.perf_counter() - t0
    msg = {"events": last, "seconds": round(took, 3)}
    if args.json:
        output.print_json(msg)
    else:
        print(f"replayed {last} events in {took:.2f}s into {store.db_path}")
    return EXIT_OK


def cmd_find(args: argparse.Namespace) -> int:
    with _open(args) as store:
        if args.json:
            output.print_json(store.find(args.header, args.value))
            return EXIT_OK
        # one query for every hit, never one per hit; printed as DuckDB spelled it
        output.write_column(store.find_listing(args.header, args.value))
    return EXIT_OK


def cmd_show(args: argparse.Namespace) -> int:
    from pipeline.render import message_text, render_text

    with _open(args) as store:
        if args.raw:
            sys.stdout.buffer.write(store.raw(args.id))
            return EXIT_OK
        rec = store.get(args.id)
        if rec is None:
            raise NotFoundError(f"no message {args.id!r} in the store")
        raw = store.raw(rec["message_id"])
    if args.json:
        text = message_text(raw)
        rec["headers"] = [{"name": n, "value": v} for n, v in rec["headers"]]
        rec["body"] = text.body
        rec["body_type"] = text.body_type or None
        rec["attachments"] = [
            {"filename": a.filename, "content_type": a.content_type, "size": a.size}
            for a in text.attachments
        ]
        output.print_json(rec)
        return EXIT_OK
    sys.stdout.write(render_text(rec["headers"], raw))
    return EXIT_OK


def cmd_thread(args: argparse.Namespace) -> int:
    with _open(args) as store:
        ids = store.walk_thread(args.id)
        if args.json:
            output.print_json(ids)
            return EXIT_OK
        rows = store.summaries(ids)  # one query for every message, never one per message
        for mid in ids:
            rec = rows.get(mid) or {}
            print(
                f"{rec.get('date_iso') or '(undated)':20}  {rec.get('from_addr') or '-':30}"
                f"  {rec.get('subject') or ''}  <{mid}>"
            )
    return EXIT_OK


def cmd_delete(args: argparse.Namespace) -> int:
    with _open(args) as store:
        if not store.delete(args.id, reason=args.reason, actor=args.actor):
            raise NotFoundError(f"no message {args.id!r} in the store")
    print(f"deleted {args.id}")
    return EXIT_OK


def cmd_query(args: argparse.Namespace) -> int:
    import duckdb

    with _open(args) as store:
        try:
            table = store.query(args.sql)
        except duckdb.Error as exc:
            raise UsageError(f"query failed: {exc}") from exc
    if args.json:
        output.print_json(table.to_pylist())
    else:
        rows = [tuple(r.values()) for r in table.to_pylist()]
        width = shutil.get_terminal_size().columns if sys.stdout.isatty() else None
        print(output.format_table(table.column_names, rows, width))
        print(f"({table.num_rows} rows)")
    return EXIT_OK


def cmd_verify(args: argparse.Namespace) -> int:

    progress = _progress(args)
    with args.app.open_store(args.store, check=False) as store:  # lists every problem
        try:
            problems = store.verify(blobs=not args.no_blobs, progress=progress)
        finally:
            progress.close()
        events = store.log.last_seq()
    if args.json:
        output.print_json({"ok": not problems, "events": events, "problems": problems})
    elif problems:
        for p in problems:
            print(f"problem: {p}")
    else:
        print(f"ok: {events} events, log intact, projections equal a fresh replay")
    return EXIT_ERROR if problems else EXIT_OK


def cmd_compact(args: argparse.Namespace) -> int:
    with _open(args) as store:
        before, after = store.compact(target_rows=args.target_rows)
        purged = store.purge().as_dict() if args.purge else None
    if args.json:
        output.print_json({"files_before": before, "files_after": after, "purge": purged})
        return EXIT_OK
    print(f"compacted the log: {before} files -> {after}")
    if purged is not None:
        print(
            f"purged: messages={purged['messages']} events_rewritten={purged['events_rewritten']}"
            f" files_rewritten={purged['files_rewritten']} blobs_erased={purged['blobs_erased']}"
            + (" (finished an interrupted purge)" if purged["resumed"] else "")
        )
    return EXIT_OK


def cmd_stats(args: argparse.Namespace) -> int:
    with _open(args) as store:
        stats = store.stats()
    if args.json:
        output.print_json(stats)
    else:
        for key, value in stats.items():
            print(f"{key}: {output.plain(value)}")
    return EXIT_OK


def _interval(text: str) -> float:
    """``300``, ``30s``, ``5m``, ``1h`` -> seconds."""
    units = {"s": 1, "m": 60, "h": 3600}
    try:
        value = float(text[:-1]) * units[text[-1]] if text and text[-1] in units else float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an interval: {text!r} (try 30s, 5m, 1h)") from None
    if value <= 0:
        raise argparse.ArgumentTypeError("the interval must be positive")
    return value


def cmd_sync(args: argparse.Namespace) -> int:
    import signal
    import tempfile
    import threading

    from pipeline.config import default_config_path, load_config
    from pipeline.reports import SyncOptions
    from pipeline.sync import sync_accounts, wait_for_change

    env = args.env
    config = load_config(args.config or default_config_path(env), env)
    store_path = args.store or config.store_path or default_store_path(env)
    log.info("config %s, store %s", config.path, store_path)
    metrics_file = args.metrics_file or config.metrics_file
    only = set(args.account) if args.account else None
    if only and not only <= set(config.accounts):
        unknown = ", ".join(sorted(only - set(config.accounts)))
        raise UsageError(f"no account named {unknown} in {config.path}")
    opts = SyncOptions(
        apply=args.apply,
        limit=args.limit,
        reconcile=args.reconcile,
        measure=args.measure,
        mode_label="watch" if args.watch else None,
        workers=args.workers if args.workers is not None else min(2, os.cpu_count() or 1),
    )
    out = sys.stderr if args.json else sys.stdout
    quiet = not logging.getLogger("mailledger").isEnabledFor(logging.WARNING)

    def emit(line: str, *, failed: bool = False) -> None:
        if quiet and not failed and not line.startswith(("error", "ALARM")):
            return  # -q: errors, alarms and the summary of a failed run only
        try:
            print(line, file=out, flush=True)
        except BrokenPipeError:  # (`sync | head -1`): the run goes on, unheard
            output.silence(out)

    progress = _progress(args, delay=0.5)  # (a folder of a few new messages: no bar)
    stop = threading.Event()
    if args.watch:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())

    code = EXIT_OK
    first = True
    while True:
        if not first:
            args.app = args.app.next_run()  # (a watch cycle is a run of its own)
        first = False
        if opts.measure:
            report = sync_accounts(
                None, config, env, opts, emit=emit, only=only, sources=args.app.sources
            )
        elif opts.apply:
            budget = _memory(args) or config.store_memory
            with args.app.open_store(store_path, create=True, memory=budget) as store:
                report = sync_accounts(
                    store, config, env, opts, emit=emit, only=only, progress=progress,
                    sources=args.app.sources,
                )  # fmt: skip
        else:  # dry run: read the cursors if a store exists, write nothing anywhere
            with tempfile.TemporaryDirectory(prefix="mailledger-dry-") as tmp:
                exists = (Path(store_path) / "store.json").exists()
                where = Path(store_path) if exists else Path(tmp) / "store"
                with args.app.open_store(where, create=not exists) as store:
                    report = sync_accounts(
                        store, config, env, opts, emit=emit, only=only, sources=args.app.sources
                    )
        code = EXIT_ERROR if report.failed else EXIT_ALARM if report.alarms else EXIT_OK
        result = _with_exit(report.as_dict(), code)
        # each ALARM was printed once, where it was raised: the summary counts them
        emit(
            f"{'sync' if opts.apply else 'dry-run' if not opts.measure else 'measure'}"
            f" run={report.run_id} accounts={len(report.accounts)} errors={report.errors}"
            f" alarms={len(report.alarms)} balanced={report.balanced} exit={code}",
            failed=code != EXIT_OK,
        )
        if metrics_file and opts.apply:
            from pipeline.metrics import write_metrics  # (prometheus-client: 50 ms of imports)

            private = os.umask(getattr(args, "umask", 0o022))  # node_exporter must read it
            try:
                write_metrics(Path(metrics_file), result, args.app.now())
            finally:
                os.umask(private)
        if args.json:
            output.print_json(result)
        if not args.watch or stop.is_set():
            break
        why = wait_for_change(config, env, args.interval, stop, only=only, sources=args.app.sources)
        emit(f"watch: woke up ({why})")
        if stop.is_set():
            break
    return code


def cmd_dispatch(args: argparse.Namespace) -> int:
    from pipeline.config import default_config_path, load_config
    from pipeline.dispatch import dispatch, parse_dispatch

    env = args.env
    config = load_config(args.config or default_config_path(env), env)
    dcfg = parse_dispatch(config.dispatch, config.path, env)
    store_path = args.store or config.store_path or default_store_path(env)
    with args.app.open_store(store_path) as store:
        report = dispatch(store, dcfg, dry_run=args.dry_run, consumer=args.consumer)
    code = EXIT_ERROR if report.failed else EXIT_OK
    out = sys.stderr if args.json else sys.stdout
    for line in report.lines():
        print(line, file=out)
    given = sum(len(h.given) for h in report.handlers.values())
    finished = sum(len(h.finished) for h in report.handlers.values())
    failed = sum(1 for h in report.handlers.values() if h.error)
    print(
        f"{'dry-run' if args.dry_run else 'dispatch'} run={report.run_id}"
        f" handlers={len(report.handlers)} given={given} finished={finished}"
        f" unrouted={len(report.unrouted)} failed={failed} exit={code}",
        file=out,
    )
    if args.json:
        output.print_json(_with_exit(report.as_dict(), code))
    return code


def cmd_cursor_log(args: argparse.Namespace) -> int:
    with _open(args) as store:
        moves = store.cursor_log(args.account, args.folder)
    if args.json:
        output.print_json(moves)
        return EXIT_OK
    if not moves:
        print(f"no cursor events for {args.account} {args.folder}")
    for move in moves:
        m = {k: output.plain(v) for k, v in move.items()}
        when = m["recorded_at"]
        if m["type"] == "uidvalidity-changed":
            print(
                f"seq={m['seq']} {when} run={m['run_id']} ALARM uidvalidity"
                f" {m['old_uidvalidity']}->{m['new_uidvalidity']} action={m['action']}"
            )
        else:
            print(
                f"seq={m['seq']} {when} run={m['run_id']} mode={m['mode']}"
                f" uidvalidity={m['uidvalidity']} cursor={m['cursor_from']}->{m['cursor_to']}"
                f" uidnext={m['uidnext']} reason={m['reason']}"
            )
    return EXIT_OK


def cmd_completion(args: argparse.Namespace) -> int:
    import shtab

    parser = build_parser(args.env)
    todo = [parser]
    while todo:  # every parser's paths: shtab's completers (imported here only: 20 ms)
        for action in todo.pop()._actions:
            kind = getattr(action, "complete_kind", None)
            if kind is not None:
                action.complete = getattr(shtab, kind)  # type: ignore[attr-defined]
            if isinstance(action, argparse._SubParsersAction):
                todo.extend(action.choices.values())
    print(shtab.complete(parser, shell=args.shell), end="")
    return EXIT_OK


def cmd_man(args: argparse.Namespace) -> int:
    from argparse_manpage.manpage import Manpage

    parser = build_parser(args.env)
    # the global options once, at the top, not again under every command
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                sub._action_groups = [g for g in sub._action_groups if g.title != _GLOBAL_OPTIONS]
    page = Manpage(parser)
    page.source = f"mailledger {version()}"
    page.manual = "mailledger manual"
    page.description = "keep mail safe and findable: an event log of every message seen"
    print(page, end="")
    return EXIT_OK


# -- parser --------------------------------------------------------------------


_GLOBAL_OPTIONS = "global options (before or after the command)"


def _global_options(parser: argparse.ArgumentParser, *, after_command: bool) -> None:
    """The options every command takes, before the command or after it.

    Before it they carry the defaults; after it (``after_command``) they have none
    (SUPPRESS), so a subcommand sets only what was given there and never
    overwrites a value given before the command with a default."""

    def default(value: Any) -> Any:
        return argparse.SUPPRESS if after_command else value

    g = parser.add_argument_group(_GLOBAL_OPTIONS)
    g.add_argument(  # type: ignore[attr-defined]
        "--store",
        type=Path,
        metavar="DIR",
        default=default(None),
        help="store directory (default: $MAILLEDGER_STORE, else [store] path in the config"
        " file, else $XDG_DATA_HOME/mailledger)",
    ).complete_kind = "DIRECTORY"  # (for shtab, read by cmd_completion)
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


def _sub(
    subs: Any, name: str, fn: Callable[[argparse.Namespace], int], help: str, example: str
) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = subs.add_parser(
        name,
        help=help,
        description=help,
        epilog=f"example:\n  {example}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _global_options(p, after_command=True)
    p.set_defaults(fn=fn)
    return p


def build_parser(env: Mapping[str, str]) -> argparse.ArgumentParser:
    parser = _Parser(
        prog="mailledger",
        description="Keep mail safe and findable: an event log of every message seen.",
        epilog=textwrap.dedent(
            """\
            examples:
              mailledger import maildir ~/Maildir
              mailledger find subject 'Re: budget'
              mailledger thread '<id@example.com>'
              mailledger query "select * from thread('<id@example.com>')"
            """
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action=_Version)
    _global_options(parser, after_command=False)
    subs = parser.add_subparsers(
        dest="command", metavar="COMMAND", required=True, parser_class=_Parser
    )

    p = _sub(
        subs,
        "import",
        cmd_import,
        "import mail from a Maildir tree, an mbox file or the legacy GDBM UIDL store",
        "mailledger import maildir ~/Maildir",
    )
    p.add_argument("kind", choices=["maildir", "mbox", "gdbm"])
    p.add_argument("path")
    p.add_argument("--batch-size", type=int, default=1000)
    p.add_argument(
        "--workers", type=int, help="parser processes (default: one per core, at most 4; 0: none)"
    )
    p.add_argument("--json", action="store_true")

    p = _sub(
        subs,
        "replay",
        cmd_replay,
        "rebuild every projection from the event log",
        "mailledger replay",
    )
    p.add_argument("--json", action="store_true")

    p = _sub(
        subs,
        "find",
        cmd_find,
        "find messages by a normalized header value",
        "mailledger find from joe@example.com",
    )
    p.add_argument(
        "header", help="subject, from, to, cc, date, in-reply-to, references, list-id or message-id"
    )
    p.add_argument("value")
    p.add_argument("--json", action="store_true", help="a JSON array of Message-IDs")

    p = _sub(
        subs,
        "show",
        cmd_show,
        "show a message: decoded headers, attachments, the text body (--raw: the exact bytes)",
        "mailledger show '<id@example.com>'",
    )
    p.add_argument("id")
    p.add_argument("--json", action="store_true")
    p.add_argument("--raw", action="store_true", help="print the raw message bytes")

    p = _sub(
        subs,
        "thread",
        cmd_thread,
        "list every stored message of a thread, oldest first",
        "mailledger thread '<id@example.com>' --json",
    )
    p.add_argument("id")
    p.add_argument("--json", action="store_true", help="a JSON array of Message-IDs")

    p = _sub(
        subs,
        "delete",
        cmd_delete,
        "delete a message from the store (recorded in the log)",
        "mailledger delete '<id@example.com>' --reason 'handled'",
    )
    p.add_argument("id")
    p.add_argument("--reason", default="deleted from the command line")
    p.add_argument("--actor", default="cli")

    p = _sub(
        subs,
        "query",
        cmd_query,
        "ask DuckDB anything: views events, messages, "
        "header_index, thread_edges, thread_nodes, locations, cursors; macro thread(id)",
        'mailledger query "select list_id, count(*) from messages group by 1"',
    )
    p.add_argument("sql")
    p.add_argument("--json", action="store_true")

    p = _sub(
        subs,
        "verify",
        cmd_verify,
        "check the log, the blobs, and that the projections equal a fresh replay",
        "mailledger verify",
    )
    p.add_argument("--no-blobs", action="store_true", help="skip reading every blob")
    p.add_argument("--json", action="store_true")

    p = _sub(
        subs,
        "compact",
        cmd_compact,
        "merge small log files (no event changes); --purge also erases deleted messages",
        "mailledger compact --purge",
    )
    p.add_argument("--target-rows", type=int, default=100_000)
    p.add_argument(
        "--purge",
        action="store_true",
        help="erase the blobs of deleted messages no stored message holds, and rewrite the"
        " log so their headers are gone (the event skeleton stays: cursors and audits survive)",
    )
    p.add_argument("--json", action="store_true")

    p = _sub(subs, "stats", cmd_stats, "counts and sizes of the store", "mailledger stats --json")
    p.add_argument("--json", action="store_true")

    p = _sub(
        subs,
        "sync",
        cmd_sync,
        "sync IMAP and POP3 accounts (dry run unless --apply): only new mail, never a body twice",
        "mailledger sync --apply --config ~/.config/mailledger/config.toml",
    )
    p.add_argument("--apply", action="store_true", help="write to the store (default: dry run)")
    p.add_argument("--measure", action="store_true", help="STATUS per folder only; no store")
    p.add_argument("--limit", type=int, help="at most N messages per folder per run")
    p.add_argument(
        "--reconcile",
        action="store_true",
        help="compare each folder in full: record vanished messages, fetch what is missing",
    )
    p.add_argument("--watch", action="store_true", help="repeat until SIGINT/SIGTERM")
    p.add_argument("--interval", type=_interval, default=300.0, help="watch interval (5m)")
    p.add_argument("--account", action="append", help="only this account (repeatable)")
    p.add_argument(
        "--workers",
        type=int,
        help="processes that fetch (a folder with 300+ bodies to fetch: each on its own"
        " connection), parse and store bodies (default 2; 0: none, one connection)",
    )
    p.add_argument("--metrics-file", type=Path, help="Prometheus textfile to write")
    p.add_argument("--json", action="store_true", help="print the run report as JSON")

    p = _sub(
        subs,
        "dispatch",
        cmd_dispatch,
        "hand stored messages to the [dispatch] handlers by To/Cc address; delete what they"
        " finish (or, with --consumer, only advance that consumer's checkpoint)",
        "mailledger dispatch --dry-run",
    )
    p.add_argument("--dry-run", action="store_true", help="show the routing; call no handler")
    p.add_argument(
        "--consumer",
        metavar="NAME",
        help="non-destructive: only messages stored since NAME's checkpoint; nothing deleted",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")

    p = _sub(
        subs,
        "cursor",
        cmd_cursor_log,
        "explain a folder's cursor, move by move",
        "mailledger cursor log gmail '[Gmail]/All Mail'",
    )
    p.add_argument("action", choices=["log"])
    p.add_argument("account")
    p.add_argument("folder")
    p.add_argument("--json", action="store_true")

    p = _sub(
        subs,
        "completion",
        cmd_completion,
        "print the shell completion script (generated from this parser by shtab)",
        "mailledger completion bash > ~/.local/share/bash-completion/completions/mailledger",
    )
    p.add_argument("shell", choices=["bash", "zsh", "tcsh"])

    p = _sub(
        subs,
        "man",
        cmd_man,
        "print the manual page (roff, generated from this parser)",
        "mailledger man > mailledger.1 && man -l mailledger.1",
    )
    return parser


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    env = os.environ if env is None else env
    # What a command creates in a store (the DuckDB file and its WAL included) is
    # the owner's alone: 0700 directories, 0600 files. Restored on return (the
    # metrics textfile, written under the caller's umask, must stay readable).
    umask = os.umask(0o077)
    logs: LogSetup | None = None
    try:
        args = build_parser(env).parse_args(argv)
        args.env = env
        args.app = App(env)  # the run: its clock, run id, stores and sources
        args.umask = umask
        logs = LogSetup(args.log_level)  # the verbosity contract: pipeline/verbosity.py
        if args.fn not in (cmd_sync, cmd_dispatch, cmd_completion, cmd_man):
            _resolve_store(args)  # (sync and dispatch read the whole config file)
        code = int(args.fn(args))
        sys.stdout.flush()  # (here, where a reader gone is caught, not at exit)
        return code
    except (UsageError, ConfigError) as exc:
        print(f"mailledger: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except NotFoundError as exc:
        print(f"mailledger: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except (LogIntegrityError, LockTimeout, MailledgerError) as exc:
        print(f"mailledger: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except OSError as exc:  # a full disk, a read-only store: say which file, no traceback
        if isinstance(exc, BrokenPipeError) and output.stdout_closed():
            # `mailledger query ... | head -1`: the reader has what it wanted. Quiet and
            # successful, as `grep` or `ls` are; the rest of the output goes nowhere.
            # (A broken pipe elsewhere, a server's socket, is an error as any.)
            output.silence(sys.stdout)
            return EXIT_OK
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"mailledger: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("mailledger: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        import duckdb

        if not isinstance(exc, duckdb.Error):
            raise
        # the projection database failed (a full disk, say); the log is not affected
        print(f"mailledger: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    finally:
        if logs is not None:
            logs.undo()
        os.umask(umask)


if __name__ == "__main__":
    sys.exit(main())

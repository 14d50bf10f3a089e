"""``mailledger sync``: the configured accounts, once or (``--watch``) until stopped.

The command reads the config file, runs ``pipeline.sync.sync_accounts`` against
a store (a real one under ``--apply``; a scratch copy for a dry run; none for
``--measure``), prints its lines and its summary, writes the metrics textfile
and, watching, waits for the next change between runs."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.cli import output
from pipeline.cli.common import command_progress, default_store_path, memory_budget
from pipeline.cli.exits import EXIT_OK, exit_code, with_exit
from pipeline.cli.parsing import add_command
from stores.errors import UsageError

if TYPE_CHECKING:
    from pipeline.config import Config
    from pipeline.progress import Progress
    from pipeline.reports import RunReport, SyncOptions

__all__ = ["add_sync"]

log = logging.getLogger("mailledger.cli")


def interval(text: str) -> float:
    """``300``, ``30s``, ``5m``, ``1h`` -> seconds."""
    units = {"s": 1, "m": 60, "h": 3600}
    try:
        value = float(text[:-1]) * units[text[-1]] if text and text[-1] in units else float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an interval: {text!r} (try 30s, 5m, 1h)") from None
    if value <= 0:
        raise argparse.ArgumentTypeError("the interval must be positive")
    return value


def _emitter(json_report: bool) -> Callable[..., None]:
    """How the run's lines are printed: on stdout (stderr when the report goes to
    stdout as JSON); under ``-q`` only errors, alarms and a failed run's summary."""
    out = sys.stderr if json_report else sys.stdout
    quiet = not logging.getLogger("mailledger").isEnabledFor(logging.WARNING)

    def emit(line: str, *, failed: bool = False) -> None:
        if quiet and not failed and not line.startswith(("error", "ALARM")):
            return  # -q: errors, alarms and the summary of a failed run only
        try:
            output.echo(line, file=out, flush=True)
        except BrokenPipeError:  # (`sync | head -1`): the run goes on, unheard
            output.silence(out)

    return emit


def _run_once(
    args: argparse.Namespace,
    config: Config,
    store_path: Path,
    opts: SyncOptions,
    emit: Callable[..., None],
    only: set[str] | None,
    progress: Progress,
) -> RunReport:
    """One sync of every account asked for, against the store its mode wants."""
    import tempfile

    env, sources = args.env, args.app.sources
    if opts.apply:
        from pipeline.sync.idle import try_idle  # (nothing new: no store opened)

        run_id = args.app.run_id
        idle = try_idle(store_path, config, env, opts, only=only, sources=sources, run_id=run_id)
        if idle.report is not None:
            for line in idle.lines:
                emit(line)
            return idle.report
        try:
            from pipeline.sync.accounts import sync_accounts

            budget = memory_budget(args) or config.store_memory
            with args.app.open_store(store_path, create=True, memory=budget) as store:
                return sync_accounts(
                    store,
                    config,
                    env,
                    opts,
                    emit=emit,
                    only=only,
                    progress=progress,
                    sources=idle.sources(sources),
                    secrets=idle.secrets,
                )
        finally:
            idle.close()
    from pipeline.sync.accounts import sync_accounts

    if opts.measure:
        return sync_accounts(None, config, env, opts, emit=emit, only=only, sources=sources)
    # dry run: read the cursors if a store exists, write nothing anywhere
    with tempfile.TemporaryDirectory(prefix="mailledger-dry-") as tmp:
        exists = (Path(store_path) / "store.json").exists()
        where = Path(store_path) if exists else Path(tmp) / "store"
        with args.app.open_store(where, create=not exists) as store:
            return sync_accounts(store, config, env, opts, emit=emit, only=only, sources=sources)


def _write_metrics(
    args: argparse.Namespace, path: Path, result: dict[str, Any], *, succeeded: bool
) -> None:
    from pipeline.metrics import write_metrics  # (prometheus-client: 50 ms of imports)

    private = os.umask(getattr(args, "umask", 0o022))  # node_exporter must read it
    try:
        write_metrics(Path(path), result, args.app.now(), succeeded=succeeded)
    finally:
        os.umask(private)


def cmd_sync(args: argparse.Namespace) -> int:
    import signal
    import threading

    from pipeline.config import default_config_path, load_config
    from pipeline.reports import SyncOptions

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
    emit = _emitter(args.json)
    progress = command_progress(delay=0.5)  # (a folder of a few new messages: no bar)
    stop = threading.Event()
    wake = threading.Event()  # a stop, or SIGUSR1 ("sync now": `serve --sync`): run at once
    if args.watch:

        def stopped(*_: object) -> None:
            stop.set()
            wake.set()

        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, stopped)
        signal.signal(signal.SIGUSR1, lambda *_: wake.set())

    if args.cluster is not None:
        return _cluster_sync(args, config, opts, emit, only, metrics_file)
    root = getattr(args, "one_shard_cluster", None)  # (its shard is synced as a store)
    if root is not None:
        _catalog_learns(root, config, emit)
    code = EXIT_OK
    first = True
    while True:
        if not first:
            args.app = args.app.next_run()  # (a watch cycle is a run of its own)
        first = False
        report = _run_once(args, config, store_path, opts, emit, only, progress)
        code = exit_code(report)
        result = with_exit(report.as_dict(), code)
        # each ALARM was printed once, where it was raised: the summary counts them
        emit(
            f"{'sync' if opts.apply else 'dry-run' if not opts.measure else 'measure'}"
            f" run={report.run_id} accounts={len(report.accounts)} errors={report.errors}"
            f" alarms={len(report.alarms)} balanced={report.balanced} exit={code}",
            failed=code != EXIT_OK,
        )
        if metrics_file and opts.apply:
            _write_metrics(args, metrics_file, result, succeeded=not report.failed)
        if args.json:
            output.print_json(result)
        if not args.watch or stop.is_set():
            break
        from pipeline.sync.watch import wait_for_change  # (the sync's sources: not idle's)

        why = wait_for_change(config, env, args.interval, wake, only=only, sources=args.app.sources)
        if stop.is_set():
            break
        if wake.is_set():  # (asked during the run or the wait: this run is the one asked for)
            why = "asked to sync now"
            wake.clear()
        emit(f"watch: woke up ({why})")
    return code


def _catalog_learns(root: Path, config: Config, emit: Callable[..., None]) -> None:
    """The accounts of ``config`` a one-shard cluster's catalog has not seen, added."""
    from pipeline.cluster.catalog import init_cluster, open_catalog

    if set(config.accounts) - set(open_catalog(root).accounts):
        catalog, added = init_cluster(root, None, config.accounts)
        for account in added:
            emit(f"cluster: new account {account} -> {catalog.shard_of(account)}")


def _cluster_sync(
    args: argparse.Namespace,
    config: Config,
    opts: SyncOptions,
    emit: Callable[..., None],
    only: set[str] | None,
    metrics_file: Path | None,
) -> int:
    """``--cluster DIR sync``: one Dask task per account (``pipeline.cluster.sync``)."""
    if args.watch or opts.measure:
        raise UsageError("--watch and --measure are not supported with --cluster yet")
    from pipeline.cluster.sync import sync_cluster

    report = sync_cluster(
        args.cluster,
        config,
        opts,
        run_id=args.app.run_id,
        env=args.env,
        emit=emit,
        only=only,
        scheduler=args.scheduler,
        local_workers=args.local_workers,
        connections_per_host=args.connections_per_host,
    )
    code = exit_code(report)
    emit(
        f"{'sync' if opts.apply else 'dry-run'} cluster={args.cluster} run={report.run_id}"
        f" accounts={len(report.accounts)} errors={report.errors} alarms={len(report.alarms)}"
        f" balanced={report.balanced} exit={code}",
        failed=code != EXIT_OK,
    )
    result = with_exit(report.as_dict(), code)
    if metrics_file and opts.apply:
        _write_metrics(args, metrics_file, result, succeeded=not report.failed)
    if args.json:
        output.print_json(result)
    return code


def add_sync(subs: Any) -> None:
    p = add_command(
        subs,
        "sync",
        cmd_sync,
        "sync IMAP and POP3 accounts (dry run unless --apply): only new mail, never a body twice",
        "mailledger sync --apply --config ~/.config/mailledger/config.toml",
        opens_store=False,
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
    p.add_argument("--interval", type=interval, default=300.0, help="watch interval (5m)")
    p.add_argument("--account", action="append", help="only this account (repeatable)")
    p.add_argument(
        "--workers",
        type=int,
        help="processes that fetch (a folder with 300+ bodies to fetch: each on its own"
        " connection), parse and store bodies (default 2; 0: none, one connection)",
    )
    p.add_argument("--metrics-file", type=Path, help="Prometheus textfile to write")
    p.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="--cluster: the Dask scheduler (tcp://HOST:8786; default: an embedded one)",
    )
    p.add_argument(
        "--local-workers",
        type=int,
        metavar="N",
        help="--cluster: worker processes of the embedded Dask cluster (default: 4 at most)",
    )
    p.add_argument(
        "--connections-per-host",
        type=int,
        metavar="N",
        help="--cluster: at most N accounts syncing from one server at once",
    )
    p.add_argument("--json", action="store_true", help="print the run report as JSON")

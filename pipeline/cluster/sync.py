"""``mailledger --cluster DIR sync``: one Dask task per account, each syncing into
its account's shard.

What runs where: the driver (the command) reads the config and the catalog, puts
accounts it has not seen on the lightest shard, and submits ``sync_account_task``
for each account to a Dask scheduler (an embedded ``LocalCluster`` unless
``--scheduler`` names one). A task opens its shard, takes its account's writer
epoch (``stores.fence``: a second attempt at the same account, from a Dask retry
or a second ``sync`` run, fences the first), then syncs the account as a plain
``sync`` does: fetching outside the writer lock, committing each batch (events
and, at the end of a folder, its cursor) in one short critical section. Tasks of
different accounts on one shard commit side by side, serialized by the shard's
lock. Dask only spreads the work and (``--connections-per-host``) caps the
connections to one server through a ``distributed.Semaphore``, whose leases only
spread load: a paused holder overbooking it costs a connection, never a write.

The task's worker process resolves the account's secret from its own
environment (``password_env``, ``password_command``) and reads the config file at
the same path: on several machines both must be there (a shared mount).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pipeline.cluster.catalog import Catalog
from pipeline.config import Config
from pipeline.reports import AccountReport, RunReport, SyncOptions

__all__ = ["TaskResult", "sync_account_task", "sync_cluster"]

log = logging.getLogger("mailledger.cluster")


@dataclasses.dataclass
class TaskResult:
    """What a task sends back to the driver: its lines, its account's report, alarms."""

    account: str
    shard: str
    lines: list[str]
    report: AccountReport
    alarms: list[str]
    pid: int
    wall_s: float = 0.0  # the task from start to end
    cpu_s: float = 0.0  # of which this process computed (the rest: waiting on the server, the lock)


def sync_account_task(
    shard_path: str,
    shard: str,
    account: str,
    config_path: str,
    opts: SyncOptions,
    run_id: str,
    connections_per_host: int | None = None,
    env: Mapping[str, str] | None = None,
) -> TaskResult:
    """Sync ``account`` into the store at ``shard_path`` (run in a Dask worker).

    The worker's environment is the edge here: the config and the secrets are
    resolved from it, as a plain ``sync`` resolves them from its own (``env``: the
    driver's, when the task runs in the driver's process)."""
    from pipeline.bootstrap import App
    from pipeline.config import load_config
    from pipeline.sync.accounts import sync_accounts
    from stores.fence import holder_name

    started, cpu = time.perf_counter(), time.process_time()
    env = dict(os.environ if env is None else env)
    config = load_config(Path(config_path), env)
    app = App(env)
    app.run_id = run_id  # (one run: the driver's id on every task's events)
    lines: list[str] = []
    # a worker process is a daemon: it starts no process pool of its own
    opts = dataclasses.replace(opts, workers=0)
    with (
        _host_lease(config, account, connections_per_host),
        app.open_store(shard_path, create=True) as store,
    ):
        store.take_epoch(holder_name(f"sync {run_id} of {account}"), producer=account)
        report = sync_accounts(
            store, config, env, opts, emit=lines.append, only={account}, sources=app.sources
        )
    return TaskResult(
        account=account,
        shard=shard,
        lines=lines,
        report=report.accounts.get(account) or AccountReport(name=account),
        alarms=report.alarms,
        pid=os.getpid(),
        wall_s=time.perf_counter() - started,
        cpu_s=time.process_time() - cpu,
    )


@contextmanager
def _host_lease(config: Config, account: str, limit: int | None) -> Iterator[None]:
    """At most ``limit`` tasks connected to the account's server at once (a lease:
    it spreads load and caps connections, it guards no write)."""
    if not limit:
        yield
        return
    from distributed import Semaphore

    host = config.accounts[account].host
    with Semaphore(max_leases=limit, name=f"mailledger-host-{host}"):
        yield


@contextmanager
def _dask_quiet() -> Iterator[None]:
    """Dask's own chatter (its scheduler and nannies log in this process) only under
    --debug: a cron run prints what a plain sync prints."""
    chatty = logging.getLogger("distributed")
    level = chatty.level
    if not logging.getLogger("mailledger").isEnabledFor(logging.DEBUG):
        chatty.setLevel(logging.ERROR)
    try:
        yield
    finally:
        chatty.setLevel(level)


@contextmanager
def _client(scheduler: str | None, local_workers: int | None) -> Iterator[Any]:
    """A Dask client: of the scheduler at ``scheduler``, else of an embedded
    ``LocalCluster`` of ``local_workers`` single-threaded worker processes."""
    from distributed import Client, LocalCluster

    if scheduler is not None:
        with _dask_quiet(), Client(scheduler) as client:
            yield client
        return
    workers = local_workers or min(4, os.cpu_count() or 1)
    with (
        _dask_quiet(),
        LocalCluster(
            n_workers=workers,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            silence_logs=logging.ERROR,
        ) as cluster,
        Client(cluster) as client,
    ):
        yield client


def sync_cluster(
    root: Path,
    config: Config,
    opts: SyncOptions,
    *,
    run_id: str,
    env: Mapping[str, str],
    emit: Callable[[str], None],
    only: set[str] | None = None,
    scheduler: str | None = None,
    local_workers: int | None = None,
    connections_per_host: int | None = None,
    retries: int = 2,
) -> RunReport:
    """Sync the configured accounts of the cluster at ``root``, one task each; the
    run's report as a plain sync's (its counts balance per account)."""
    from pipeline.cluster.catalog import init_cluster

    if config.path is None:
        raise ValueError("a cluster sync reads its config from a file")
    catalog, added = init_cluster(root, None, config.accounts)
    for account in added:
        emit(f"cluster: new account {account} -> {catalog.shard_of(account)}")
    names = [n for n in config.accounts if only is None or n in only]
    report = RunReport(run_id=run_id, applied=opts.apply)
    args = {
        n: _task_args(catalog, n, config.path, opts, run_id, connections_per_host) for n in names
    }
    if scheduler is None and (
        local_workers == 0 or (local_workers is None and len(catalog.shards) == 1)
    ):
        # one shard and no scheduler named (one person's store as a cluster of one), or
        # --local-workers 0: the tasks run here, one after another, as a plain sync
        # runs its accounts; no Dask started, nothing it costs paid
        for name in names:
            task = functools.partial(sync_account_task, **args[name], env=env)
            _collect(report, name, task, emit)
        _publish(catalog, {catalog.shard_of(n) for n in names}, report, emit)
        return report
    from distributed import as_completed

    with _client(scheduler, local_workers) as client:
        futures = {
            client.submit(
                sync_account_task,
                **args[n],
                key=f"sync-{run_id}-{n}",
                pure=False,
                retries=retries,
            ): n
            for n in names
        }
        for fut in as_completed(futures):
            _collect(report, futures[fut], fut.result, emit)
    _publish(catalog, {catalog.shard_of(n) for n in names}, report, emit)
    return report


def _publish(
    catalog: Catalog, shards: set[str], report: RunReport, emit: Callable[[str], None]
) -> None:
    """A snapshot of each shard the run synced into (what ``--cluster`` reads see;
    nothing is copied where the newest one holds the log's end already). A failed
    publish is the run's error, its commits stand."""
    if not report.applied:
        return
    from pipeline.cluster.snapshots import publish_snapshot
    from pipeline.store import MessageStore

    for shard in sorted(shards):
        try:
            with MessageStore.open(catalog.shard_path(shard), create=False) as store:
                snap = publish_snapshot(store)
        except Exception as exc:  # (a full disk, say): the reads stay on the older one
            report.snapshots[shard] = {"error": f"snapshot not published: {exc}"}
            emit(f"error {shard}: snapshot not published: {exc}")
            continue
        report.snapshots[shard] = {"epoch": snap.epoch, "seq": snap.seq}


def _task_args(
    catalog: Catalog,
    name: str,
    config_path: Path,
    opts: SyncOptions,
    run_id: str,
    connections_per_host: int | None,
) -> dict[str, Any]:
    """``sync_account_task``'s arguments for account ``name``."""
    shard = catalog.shard_of(name)
    return {
        "shard_path": str(catalog.shard_path(shard).resolve()),
        "shard": shard,
        "account": name,
        "config_path": str(Path(config_path).resolve()),
        "opts": opts,
        "run_id": run_id,
        "connections_per_host": connections_per_host,
    }


def _collect(
    report: RunReport, name: str, result: Callable[[], TaskResult], emit: Callable[[str], None]
) -> None:
    """One account's task result into the run's report (a task that failed after
    its retries: that account's error, as a plain sync isolates failures)."""
    try:
        done = result()
    except Exception as exc:
        ar = AccountReport(name=name, error=f"task failed: {type(exc).__name__}: {exc}")
        report.accounts[name] = ar
        emit(f"error {name}: {ar.error}")
        return
    for line in done.lines:  # (as a plain sync prints them: -q keys on their start)
        emit(line)
    report.accounts[name] = done.report
    report.alarms.extend(done.alarms)
    report.tasks[name] = {"shard": done.shard, "wall_s": done.wall_s, "cpu_s": done.cpu_s}

"""``mailledger publish delta DEST``: a store's (or, with ``--cluster DIR``, every
shard's) new events appended to a Delta table for Spark, Trino and DuckDB users
(``pipeline.cluster.publish``; it and deltalake are imported only when this runs)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import logging
from pathlib import Path
from typing import Any

from pipeline.cli import output
from pipeline.cli.exits import EXIT_OK
from pipeline.cli.parsing import add_command

__all__ = ["add_publish"]

log = logging.getLogger("mailledger.cli")


def cmd_publish(args: argparse.Namespace) -> int:
    from pipeline.cluster.publish import publish_delta, require_deltalake

    require_deltalake()  # (exit 2 naming the extra, before anything is read)
    cluster = getattr(args, "cluster", None)
    if cluster is not None:
        from pipeline.cluster import open_catalog

        catalog = open_catalog(Path(cluster))
        shards = [(s, catalog.shard_path(s)) for s in catalog.shards]
    else:
        shards = [(args.shard, Path(args.store))]

    def progress(shard: str, seq: int) -> None:
        log.info("publish %s: up to seq %d", shard, seq)

    report = publish_delta(
        shards,
        Path(args.dest),
        chunk_rows=args.chunk_rows,
        optimize=args.optimize,
        retention_hours=args.retention_hours,
        progress=progress,
    )
    if args.json:
        output.print_json(
            {
                "dest": report.dest,
                "version": report.version,
                "rows": report.rows,
                "shards": [dataclasses.asdict(s) for s in report.shards],
                "maintenance": report.maintenance,
            }
        )
        return EXIT_OK
    for s in report.shards:
        output.echo(
            f"{s.shard}: seq {s.before} -> {s.after}, {s.rows} rows in {s.commits} commits"
            + (f" ({s.retries} retried)" if s.retries else "")
            + (f"; {s.purged} rows rewritten after a purge" if s.purged else "")
        )
    if report.maintenance:
        m = report.maintenance
        output.echo(
            f"optimized: {m['files_removed']} files compacted into {m['files_added']},"
            f" checkpoint at version {m['checkpoint_version']}, {m['vacuumed']} files vacuumed"
        )
    output.echo(f"{report.dest}: version {report.version}, {report.rows} rows added")
    return EXIT_OK


def add_publish(subs: Any) -> None:
    p = add_command(
        subs,
        "publish",
        cmd_publish,
        "append the events not yet published to a Delta table (partitioned by shard) that"
        " Spark, Trino, DuckDB and deltalake read; needs the cluster extra"
        " (pip install 'mailledger[cluster]')",
        "mailledger --cluster /srv/mail-cluster publish delta /srv/mail-delta --optimize",
    )
    p.add_argument("format", choices=["delta"], help="the table format (Delta Lake)")
    p.add_argument("dest", metavar="DEST", help="the table's directory (created if absent)")
    # (the global --cluster, where the parser has one, is the same option)
    with contextlib.suppress(argparse.ArgumentError):
        p.add_argument("--cluster", metavar="DIR", help="publish every shard of the cluster at DIR")
    p.add_argument(
        "--shard",
        default="store",
        help="without --cluster: the store's partition name in the table (default: store)",
    )
    p.add_argument(
        "--optimize",
        action="store_true",
        help="then compact small files, write a checkpoint and vacuum removed files",
    )
    p.add_argument(
        "--retention-hours",
        type=int,
        default=168,
        metavar="H",
        help="--optimize: vacuum files removed more than H hours ago (default 168, Delta's"
        " 7 days; time travel to versions older than that stops working)",
    )
    p.add_argument(
        "--chunk-rows",
        type=int,
        default=50_000,
        metavar="N",
        help="events per Delta commit, and at most held in memory (default 50000)",
    )
    p.add_argument("--json", action="store_true", help="the report as JSON")

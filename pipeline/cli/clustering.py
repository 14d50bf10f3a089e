"""``mailledger cluster init|status``: a cluster's catalog and its shards
(``pipeline.cluster``; imported only when one of these runs)."""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.cli import output
from pipeline.cli.exits import EXIT_OK
from pipeline.cli.parsing import add_command
from stores.errors import UsageError

if TYPE_CHECKING:
    from pipeline.cluster import Catalog, Snapshot

__all__ = ["add_cluster"]


def cmd_cluster(args: argparse.Namespace) -> int:
    from pipeline import cluster

    root = Path(args.dir)
    if args.action == "init":
        if args.shards is None and not (root / "cluster.json").exists():
            raise UsageError(f"{root}: no cluster here yet: --shards N creates one")
        catalog, added = cluster.init_cluster(root, args.shards, _configured_accounts(args))
        for account in added:
            output.echo(f"{account} -> {catalog.shard_of(account)}")
        output.echo(
            f"cluster {root}: {len(catalog.shards)} shards, {len(catalog.accounts)} accounts"
            f" ({len(added)} added), catalog generation {catalog.generation}"
        )
        return EXIT_OK
    if args.shards is not None:
        raise UsageError("--shards is for `cluster init`")
    catalog = cluster.open_catalog(root)
    if args.action == "snapshot":
        return _snapshot(args, catalog)
    shards = cluster.status(catalog)
    # each shard's newest snapshot: its seq beside the log's tells how stale reads are
    snaps = {s: cluster.newest_snapshot(catalog.shard_path(s)) for s in catalog.shards}
    if args.json:
        output.print_json(
            {
                "cluster": str(root),
                "generation": catalog.generation,
                "accounts": catalog.accounts,
                "shards": [
                    {**dataclasses.asdict(s), "snapshot": _snapshot_json(snaps[s.shard])}
                    for s in shards
                ],
            }
        )
        return EXIT_OK
    rows = [
        [s.shard, s.accounts, s.messages, s.seq, _seq(snaps[s.shard]), s.epoch, s.holder or None]
        for s in shards
    ]
    cols = ["shard", "accounts", "messages", "events", "snapshot", "epoch", "epoch taken by"]
    width = shutil.get_terminal_size().columns if sys.stdout.isatty() else None
    output.echo(output.format_table(cols, rows, width), newlines=True)
    return EXIT_OK


def _seq(snap: Snapshot | None) -> int | None:
    return None if snap is None else snap.seq


def _snapshot_json(snap: Snapshot | None) -> dict[str, Any] | None:
    if snap is None:
        return None
    return {"epoch": snap.epoch, "seq": snap.seq, "published_at": snap.published_at}


def _snapshot(args: argparse.Namespace, catalog: Catalog) -> int:
    """Publish a snapshot of every shard (``cluster.publish_snapshot``)."""
    from pipeline import cluster

    made = []
    for shard in catalog.shards:
        with args.app.open_store(catalog.shard_path(shard), create=False) as store:
            snap = cluster.publish_snapshot(store)
        made.append({"shard": shard, "epoch": snap.epoch, "seq": snap.seq,
                     "seconds": snap.seconds, "bytes": snap.bytes})  # fmt: skip
        if not args.json:
            output.echo(
                f"{shard}: snapshot {snap.epoch}-{snap.seq}"
                f" ({snap.bytes} bytes, {snap.seconds:.2f} s)"
            )
    if args.json:
        output.print_json(made)
    return EXIT_OK


def _configured_accounts(args: argparse.Namespace) -> list[str]:
    """The accounts of ``--config`` (else of the default config file, where it exists)."""
    from pipeline.config import default_config_path, load_config

    path = args.config or default_config_path(args.env)
    if args.config is None and not Path(path).exists():
        return []
    return list(load_config(Path(path), args.env).accounts)


def add_cluster(subs: Any) -> None:
    p = add_command(
        subs,
        "cluster",
        cmd_cluster,
        "a cluster of shards: create it and assign the configured accounts (init),"
        " show each shard's accounts, events, snapshot and writer epoch (status), or"
        " publish a snapshot of each shard for `--cluster` reads (snapshot)",
        "mailledger cluster init /srv/mail-cluster --shards 8 --config accounts.toml",
        opens_store=False,
    )
    p.add_argument("action", choices=["init", "status", "snapshot"])
    p.add_argument("dir", metavar="DIR", help="the cluster's directory")
    p.add_argument(
        "--shards", type=int, help="init: how many shards a new cluster has (fixed after)"
    )
    p.add_argument("--json", action="store_true", help="status, snapshot: as JSON")

"""``mailledger --cluster DIR verify``: each shard's own verify."""

from __future__ import annotations

from pathlib import Path

from pipeline.cluster.catalog import open_catalog

__all__ = ["verify_cluster"]


def verify_cluster(root: Path, *, blobs: bool = True) -> tuple[int, list[str]]:
    """Each shard's ``verify`` (its live store: a verify compares the projections a
    shard keeps with a fresh replay), each problem prefixed by its shard; returns
    the events of every shard and the problems."""
    from pipeline.store import MessageStore

    catalog = open_catalog(Path(root))
    problems: list[str] = []
    events = 0
    for name in catalog.shards:
        with MessageStore.open(catalog.shard_path(name), create=False, check=False) as store:
            problems.extend(f"{name}: {p}" for p in store.verify(blobs=blobs))
            events += store.log.last_seq()
    return events, problems

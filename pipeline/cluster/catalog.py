"""``DIR/cluster.json``: which shard holds which account.

A cluster directory holds the catalog and ``shards/shard-NNN/``, each a complete
store of today's format. The assignment is static: an account stays on its shard
(no migration between shards yet); an account the catalog has not seen goes to the
lightest shard, the one with the fewest accounts (ties: the lowest number). The
catalog is versioned (``generation``, one more at each change) and replaced whole
(``stores.atomic``) under ``DIR/.catalog.lock``, so two processes adding accounts
at once both land.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stores.atomic import replace_file
from stores.errors import NotFoundError, UsageError

__all__ = ["Catalog", "ShardStatus", "init_cluster", "open_catalog", "status"]

_FORMAT = "mailledger-cluster"
_VERSION = 1
CATALOG = "cluster.json"


@dataclass(frozen=True)
class Catalog:
    """The catalog as read: the shards in order, and each account's shard."""

    root: Path
    generation: int
    shards: tuple[str, ...]
    accounts: dict[str, str]

    def shard_path(self, shard: str) -> Path:
        return self.root / "shards" / shard

    def shard_of(self, account: str) -> str:
        try:
            return self.accounts[account]
        except KeyError:
            raise NotFoundError(f"{self.root}: no account named {account} in the catalog") from None

    def accounts_of(self, shard: str) -> list[str]:
        return sorted(a for a, s in self.accounts.items() if s == shard)

    def _to_json(self) -> bytes:
        meta = {
            "format": _FORMAT,
            "version": _VERSION,
            "generation": self.generation,
            "shards": list(self.shards),
            "accounts": dict(sorted(self.accounts.items())),
        }
        return (json.dumps(meta, indent=1) + "\n").encode()


def open_catalog(root: Path) -> Catalog:
    """The catalog of the cluster at ``root``; NotFoundError when it is none."""
    path = Path(root) / CATALOG
    try:
        meta: dict[str, Any] = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise NotFoundError(f"{root}: no mailledger cluster here (no {CATALOG})") from None
    except ValueError as exc:
        raise UsageError(f"{path}: not a cluster catalog: {exc}") from None
    if meta.get("format") != _FORMAT or meta.get("version") != _VERSION:
        raise UsageError(
            f"{path}: unknown cluster format {meta.get('format')!r} {meta.get('version')!r}"
        )
    shards = tuple(str(s) for s in meta["shards"])
    accounts = {str(a): str(s) for a, s in meta["accounts"].items()}
    unknown = sorted({s for s in accounts.values() if s not in shards})
    if unknown:
        raise UsageError(f"{path}: accounts assigned to shards it does not list: {unknown}")
    return Catalog(Path(root), int(meta["generation"]), shards, accounts)


@contextlib.contextmanager
def _catalog_lock(root: Path) -> Iterator[None]:
    fd = os.open(root / ".catalog.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # held for the read-modify-write only
        yield
    finally:
        os.close(fd)


def _lightest(shards: Iterable[str], accounts: dict[str, str]) -> str:
    load = {s: 0 for s in shards}
    for shard in accounts.values():
        load[shard] += 1
    return min(load, key=lambda s: (load[s], s))


def init_cluster(
    root: Path, shards: int | None, accounts: Iterable[str]
) -> tuple[Catalog, list[str]]:
    """Create the cluster at ``root`` with ``shards`` shards, or (it exists) add to
    it the accounts it has not seen; returns the catalog and the accounts added.
    ``shards`` None: the existing cluster's count. A different count for an
    existing cluster is refused: shards are not split or merged."""
    from pipeline.store import MessageStore  # (the shards' stores: only here)

    root = Path(root)
    if shards is not None and not 1 <= shards <= 4096:
        raise UsageError(f"--shards {shards}: from 1 to 4096")
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    with _catalog_lock(root):
        if (root / CATALOG).exists():
            catalog = open_catalog(root)
            if shards is not None and shards != len(catalog.shards):
                raise UsageError(
                    f"{root}: a cluster of {len(catalog.shards)} shards already;"
                    f" its shards are not split or merged (--shards {shards})"
                )
        else:
            if shards is None:
                raise UsageError(f"{root}: no cluster here yet: --shards N creates one")
            if any(p.name != ".catalog.lock" for p in root.iterdir()):
                raise UsageError(f"{root}: exists, is not empty and is not a mailledger cluster")
            names = tuple(f"shard-{i:03d}" for i in range(shards))
            catalog = Catalog(root, 0, names, {})
        for shard in catalog.shards:  # (each a complete store, created if absent)
            path = catalog.shard_path(shard)
            path.parent.mkdir(mode=0o700, exist_ok=True)
            MessageStore.open(path, create=True, check=False).close()
        assigned = dict(catalog.accounts)
        added = [a for a in sorted(set(accounts)) if a not in assigned]
        for account in added:
            assigned[account] = _lightest(catalog.shards, assigned)
        if added or catalog.generation == 0:
            catalog = Catalog(root, catalog.generation + 1, catalog.shards, assigned)
            replace_file(root / CATALOG, catalog._to_json())
    return catalog, added


@dataclass(frozen=True)
class ShardStatus:
    """One shard as ``cluster status`` shows it."""

    shard: str
    accounts: int
    epoch: int
    holder: str
    seq: int
    messages: int | None  # (None: the shard's counts are not at rest: a commit is folding)


def status(catalog: Catalog) -> list[ShardStatus]:
    """Each shard's accounts, writer epoch and log position, read at rest: no
    store is opened, no lock taken (a running sync is not held up)."""
    from pipeline.at_rest import quick_stats
    from stores.fence import Fence
    from stores.log.files import LogDirectory

    out: list[ShardStatus] = []
    for shard in catalog.shards:
        path = catalog.shard_path(shard)
        files = LogDirectory(path / "log").files()
        holder = Fence(path / "fence").current()
        stats = quick_stats(path) if files else {"messages": 0}
        messages = stats.get("messages") if stats is not None else None
        out.append(
            ShardStatus(
                shard=shard,
                accounts=len(catalog.accounts_of(shard)),
                epoch=holder.epoch,
                holder=holder.holder,
                seq=files[-1].last if files else 0,
                messages=int(messages) if messages is not None else None,
            )
        )
    return out

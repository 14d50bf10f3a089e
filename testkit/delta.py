"""Reading back a table that ``publish delta`` wrote, and comparing it with the
shards' logs: every event once, every column equal, nothing else.

deltalake is imported inside the functions (testkit is imported by tests that
never publish)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from stores.events import SCHEMA
from stores.log import EventLog

__all__ = ["duplicates", "log_rows", "problems", "published_rows"]

_BARE = SCHEMA.remove_metadata()


def published_rows(dest: Path, version: int | None = None) -> dict[str, pa.Table]:
    """The table at ``dest`` (at ``version``), per shard, in the log's schema, by seq."""
    from deltalake import DeltaTable

    table = DeltaTable(str(dest), version=version).to_pyarrow_table()
    out: dict[str, pa.Table] = {}
    for shard in sorted(set(table.column("shard").to_pylist())):
        rows = table.filter(pc.equal(table.column("shard"), shard))
        rows = rows.select(_BARE.names).cast(_BARE)
        out[shard] = rows.sort_by("seq")
    return out


def log_rows(store: Path, upto: int | None = None) -> pa.Table:
    """The events of the store's log (seq <= ``upto``), in the log's schema."""
    table = EventLog(Path(store) / "log", durable=False).read().replace_schema_metadata(None)
    if upto is not None:
        table = table.filter(pc.less_equal(table.column("seq"), upto))
    return table.cast(_BARE)


def duplicates(dest: Path) -> int:
    """Rows of the table whose (shard, seq) another row has too."""
    from deltalake import DeltaTable

    table = DeltaTable(str(dest)).to_pyarrow_table(columns=["shard", "seq"])
    return table.num_rows - table.group_by(["shard", "seq"]).aggregate([]).num_rows


def problems(
    dest: Path, shards: Sequence[tuple[str, Path]], upto: dict[str, int] | None = None
) -> list[str]:
    """How the table at ``dest`` differs from the shards' logs (empty: it holds each
    shard's events, seq <= ``upto[shard]`` where given, each once, equal in every
    column, and no shard it was not given)."""
    found: list[str] = []
    dup = duplicates(dest)
    if dup:
        found.append(f"{dup} duplicate (shard, seq) rows")
    published = published_rows(dest)
    extra = sorted(set(published) - {s for s, _ in shards})
    if extra:
        found.append(f"rows of shards not published: {extra}")
    for shard, store in shards:
        want = log_rows(store, None if upto is None else upto.get(shard))
        have = published.get(shard, _BARE.empty_table())
        if have.num_rows != want.num_rows:
            found.append(f"{shard}: {have.num_rows} rows, the log has {want.num_rows} events")
        elif not have.equals(want):
            for name in _BARE.names:
                if not have.column(name).equals(want.column(name)):
                    found.append(f"{shard}: column {name} differs from the log")
    return found

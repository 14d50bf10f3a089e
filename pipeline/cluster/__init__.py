"""A cluster: a directory of shards (each a complete store) and a catalog that
assigns every account to one shard (SPEC section 9, ``docs/scale-out.md``).

Imported only when a cluster is asked for (``mailledger cluster ...``): the
embedded single store never loads it, nor Dask or deltalake.
"""

from pipeline.cluster.catalog import Catalog, ShardStatus, init_cluster, open_catalog, status
from pipeline.cluster.snapshots import Snapshot, newest_snapshot, publish_snapshot

__all__ = [
    "Catalog",
    "ShardStatus",
    "Snapshot",
    "init_cluster",
    "newest_snapshot",
    "open_catalog",
    "publish_snapshot",
    "status",
]

# (the cross-shard reads, ``pipeline.cluster.reads``, import DuckDB: imported where used)

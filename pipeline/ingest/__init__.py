"""Recording messages from any source in batches, with the run accounting: every
message offered is new, a duplicate, skipped or an error (``RunCounts.balanced``).

Sources (importers, fetchers) hand ``Ingest`` raw messages (or the paths of
files holding them) with their location; it decides per message whether the
Message-ID is new, a duplicate, or already held from another source, and
commits ``message-seen`` events in batches. Decisions for a whole batch cost a
few queries, never one per message. Reading, parsing, compressing and writing
the blobs is ``prepare``'s work, done by worker processes when there is a pool.
"""

from pipeline.ingest.batches import Ingest
from pipeline.ingest.records import Incoming, RunCounts
from pipeline.ingest.workers import WorkerPool, worker_pool
from pipeline.prepare import Prepared, prepare

__all__ = [
    "Incoming", "Ingest", "Prepared", "RunCounts", "WorkerPool", "prepare", "worker_pool",
]  # fmt: skip

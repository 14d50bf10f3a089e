"""A store's upkeep: its statistics, ``verify`` and ``compact --purge``.

Each is a function of a ``MessageStore`` that drives its parts (the log, the
blobs, the projector) and the queries; the store offers them as methods.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pipeline.at_rest import stats_of
from pipeline.progress import NO_PROGRESS, Progress
from projections import queries
from projections.fold import applied_seq
from projections.tables import fingerprint

if TYPE_CHECKING:
    from pipeline.store import MessageStore
    from stores.purge import PurgeReport

__all__ = ["compact", "purge", "stats", "verify"]

# verify compares the full-text index with one built afresh (every blob read and
# extracted again: about 5 minutes at 1,000,000) up to this many messages; above,
# FTS5's integrity check and the seq it holds
_TEXT_COMPARED_UP_TO = 200_000


def compact(store: MessageStore, target_rows: int) -> tuple[int, int]:
    """Merge small log files, and the rows the folds appended to the projection
    tables into their bases (a rebuild, when there are any:
    ``projections.fold.deltas``); returns (log files before, log files after)."""
    files = store.log.compact(target_rows=target_rows)
    store.projector.merge_deltas()
    return files


def stats(store: MessageStore) -> dict[str, Any]:
    """What ``mailledger stats`` prints: counts of events, messages, threads,
    locations and blobs, and the bytes each part of the store takes."""
    counts = store.projector.read(queries.counts)
    return stats_of(counts, store.blobs, store.log.files(), store.projector.db_path)


def verify(
    store: MessageStore, *, blobs: bool = True, progress: Progress = NO_PROGRESS
) -> list[str]:
    """Problems found: log damage, missing or corrupt blobs, projections that drifted.

    ``progress``: told of each step (the log, each blob, the fresh replay)."""
    progress.start(None, "verify: the log", unit=None)
    problems = store.log.verify()
    if problems:
        return problems
    projector = store.projector
    with projector.hold():
        con = projector.reader()
        last = store.log.last_seq()
        seq = applied_seq(con)
        if seq != last:
            problems.append(f"projections are at seq {seq}, the log at {last}")
        have = fingerprint(con)
        fulltext = projector.fulltext
        if fulltext is not None:
            progress.start(None, "verify: the full-text index", unit=None)
            fulltext.sync(con)  # (a lag is caught up, as any fold would)
            small = queries.count_stored_shas(con) <= _TEXT_COMPARED_UP_TO
            problems.extend(fulltext.problems(con, compare=small))
        if blobs:
            if progress is not NO_PROGRESS:  # (one scan more, before reading every blob)
                progress.start(queries.count_stored_shas(con), "verify: blobs", unit="blob")
            # streamed: a million hashes are never a Python list
            for batch in queries.stored_shas(con):
                for sha in batch.column(0).to_pylist():
                    try:
                        store.blobs.get(sha)
                    except Exception as exc:
                        problems.append(str(exc))
                    progress.advance()
            # a pack whose index is damaged, even when every blob it still holds reads
            store.blobs.check_packs()
            problems.extend(sorted(store.blobs.damaged.values()))
        # The projections are let go before the fresh replay: what DuckDB cached of
        # them would otherwise sit beside the replay's budget (1.4 GB at 1,000,000).
        projector.close()
        progress.start(None, f"verify: a fresh replay of {last:,} events", unit=None)
        want = projector.fresh_fingerprint()
    for table, digest in want.items():
        if have.get(table) != digest:
            problems.append(f"projection table {table!r} differs from a fresh replay of the log")
    return problems


def purge(store: MessageStore) -> PurgeReport:
    """Erase deleted messages for good (``compact --purge``; see ``stores.purge``).

    Blobs no stored message holds are erased, the personal columns of their
    events are rewritten away, and the projections are rebuilt into a fresh
    file (an old DuckDB file may keep a deleted subject in a free page).
    Safe to kill at any point: a re-run finishes the purge.
    """
    from stores.purge import finish_purge, purge_log

    store.projector.close()
    report = purge_log(
        store.log,
        store.blobs,
        store.purge_journal,
        run_id=store.run_id,
        now=store.clock.now,
        drop_projections=store.projector.drop,
    )
    if report.changed:
        store.projector.forget_pending()  # pre-purge rows: never fold again
        store.projector.reindex()
        finish_purge(store.purge_journal)
    return report

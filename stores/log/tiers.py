"""Which small log files an append merges, so that the log's file count stays
bounded by the events it holds, not by the commits ever made.

Every commit writes a file. A store synced every five minutes makes 105,000 a
year, and each command pays for every file: a listing of the directory at each
read, a ``stat`` per file when the store is opened, a Parquet file opened per
commit a catch-up folds. Measured on a 100,000-message store after 5,000
one-event commits (5,104 files), then after ``compact`` (2 files): ``stats``
0.51 -> 0.24 s, a query over ``events`` 2.9 -> 0.64 s, open + one commit +
fold 0.62 -> 0.32 s; the 5,000 commits themselves cost 57 ms each, and folding
them 56 s.

So after each append one run of small files is merged (``EventLog.append``):
the first run, in seq order, of ``FANOUT`` consecutive files each holding fewer
than ``limit`` events, for ``limit`` = 10, 100, 1,000, 10,000 in turn (the
cheapest merge first). Like the levels of a log-structured merge tree: ten
one-event files make one of ten events, ten of those one of a hundred, and so
on; an event is rewritten at most once per level (four times), and a merge
holds fewer than ``FANOUT`` x 10,000 = 100,000 events in memory. One merge per
append bounds the work each commit asks for (a store with thousands of small
files catches up over later commits, or at once with ``mailledger compact``). The
merge is made on a thread, outside the writer lock (``stores.log.merging``): no
commit waits for one.

What stays: files of 10,000 events or more are never merged here (an import of
1,000,000 messages, committed 1,000 at a time, ends as 100 files of 10,000),
and between two of them fewer than ``FANOUT`` smaller ones.
"""

from __future__ import annotations

from collections.abc import Sequence

from stores.log.files import LogFile

__all__ = ["FANOUT", "LIMITS", "next_merge"]

FANOUT = 10
"""Consecutive small files merged into one."""

LIMITS = (10, 100, 1_000, 10_000)
"""A file is small for a level when it holds fewer events than the level's limit."""


def next_merge(files: Sequence[LogFile]) -> list[LogFile] | None:
    """The files (``FANOUT`` of them, consecutive in seq order) the next merge of
    the log whose files are ``files`` takes; None when no run is long enough."""
    for limit in LIMITS:
        run: list[LogFile] = []
        for f in files:
            if f.rows >= limit:
                run = []
                continue
            run.append(f)
            if len(run) == FANOUT:
                return run
    return None

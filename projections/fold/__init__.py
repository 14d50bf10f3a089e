"""The projections as one fold: ``apply(con, batch)`` folds committed events into tables.

Two paths, one set of rules:

- ``apply`` (``fold.incremental``) folds a batch of committed events into the
  tables as they stand (an incremental update after a commit). Its cost follows
  the batch: it reads the rows the batch touches through ART indexes with
  literal keys (``fold.probes``), never a scan of a table whose size follows
  the store, unless the batch is itself so large that one scan is cheaper than
  its probes.
- ``rebuild`` (``fold.bulk``) drops every projection and builds them from the
  whole log on empty tables: the same SQL and the same normalization, run by
  builders at once, with the events staged in a scratch DuckDB file so that
  memory is bounded by DuckDB's ``memory_limit`` (it spills to disk), whatever
  the size of the log.

One module per projection holds its rules for both paths: ``messages``,
``headers`` (the header index), ``threads``, ``locations``, ``cursors``;
``meta`` is what the tables keep about themselves.

A batch is applied in one transaction together with the last seq it contains;
events at or below that seq are skipped, so applying a batch twice changes
nothing. No clock, network or file other than the DuckDB connection given (and
the scratch database a rebuild attaches; its caller makes room for it and
removes it) is touched here.

The fold runs as SQL over the events registered in DuckDB (the wide columns,
such as the addresses and references, never pass through Python); Python computes
only what the normalization rules of ``projections.normalize`` define (subject and
date keys) and the connected components of the thread graph.
"""

from __future__ import annotations

from projections.fold.batch import FOLD_SCHEMA
from projections.fold.bulk import REBUILD_PHASES, rebuild
from projections.fold.headers import KEY_SEP, key_hash
from projections.fold.incremental import apply, apply_chunks
from projections.fold.locations import location_key
from projections.fold.messages import date_columns, kept_defect_counts, subject_keys
from projections.fold.meta import (
    applied_seq,
    hash_matches,
    hash_probe,
    meta_values,
    projection_version,
)
from projections.fold.threads import components, thread_counts

__all__ = [
    "FOLD_SCHEMA",
    "KEY_SEP",
    "REBUILD_PHASES",
    "applied_seq",
    "apply",
    "apply_chunks",
    "components",
    "date_columns",
    "hash_matches",
    "hash_probe",
    "kept_defect_counts",
    "key_hash",
    "location_key",
    "meta_values",
    "projection_version",
    "rebuild",
    "subject_keys",
    "thread_counts",
]

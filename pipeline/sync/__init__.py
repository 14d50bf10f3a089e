"""The sync run: plan each folder from its cursor, take what is new, account for it.

``plan`` decides a folder's mode from its cursor; ``reassigned`` checks that held
UIDs still name the same messages; ``folder`` takes one folder through its plan,
with its bodies fetched by ``fetch``; ``accounts`` runs every configured account;
``watch`` waits between the runs of ``sync --watch``. What a run is asked and
what it did are in ``pipeline.reports``; one reconcile, for every source, in
``pipeline.reconcile``. ``idle`` answers a run in which nothing changed on the
servers from the store's cursor snapshot, without opening the store.

This ``__init__`` imports nothing: a sync that finds nothing new (``idle``) must
load neither pyarrow nor DuckDB, which ``accounts`` and ``folder`` need.
"""

__all__ = ["accounts", "fetch", "folder", "idle", "plan", "pop3", "reassigned", "sources", "watch"]

"""The sync run: plan each folder from its cursor, take what is new, account for it.

``plan`` decides a folder's mode from its cursor; ``reassigned`` checks that held
UIDs still name the same messages; ``folder`` takes one folder through its plan,
with its bodies fetched by ``fetch``; ``accounts`` runs every configured account;
``watch`` waits between the runs of ``sync --watch``. What a run is asked and
what it did are in ``pipeline.reports``; one reconcile, for every source, in
``pipeline.reconcile``.
"""

from pipeline.sync.accounts import sync_accounts, sync_fold_every
from pipeline.sync.plan import Plan, plan_folder
from pipeline.sync.watch import wait_for_change

__all__ = ["Plan", "plan_folder", "sync_accounts", "sync_fold_every", "wait_for_change"]

"""Whether the UIDs a store holds still name the same messages on the server:
a sample of them, read from the store (``held_sample``) and compared with the
server's before a delta or a reconcile (``check_reassigned``)."""

from __future__ import annotations

import hashlib
import random
from typing import TYPE_CHECKING

from pipeline.parse import synthetic_message_id
from pipeline.reports import AccountReport, FolderReport
from pipeline.sync.plan import Plan, checks_reassigned

if TYPE_CHECKING:  # (the idle sync checks its sample without loading the store)
    from pipeline.store import MessageStore
    from pipeline.sync.sources import FolderState, ImapSource

__all__ = ["check_reassigned", "held_sample", "pick_held", "sample_rng", "suspects"]

# a UID held: its Message-ID, sha256 and size (None when the record is gone)
Held = tuple[str, str, int | None]

_SAMPLE = 5


def check_reassigned(
    src: ImapSource,
    state: FolderState,
    plan: Plan,
    fr: FolderReport,
    held: dict[int, Held],
    report: AccountReport,
) -> Plan:
    """Before a delta (or reconcile): do the UIDs we hold still name the same messages?

    A server that lost its state and forced the old UIDVALIDITY back (or a
    buggy one) can give known UIDs to other messages; a delta would then
    skip mail for good. Up to five known UIDs (the lowest, the highest and
    three drawn by a generator seeded with the folder and the run id, so a
    run can be replayed and successive runs look at other UIDs) are
    compared: Message-ID and size from an envelope, and where those differ
    the body's sha256, so a header we read differently is never taken for
    a reassignment. A confirmed difference raises an ALARM and turns the
    plan into a full rescan: like a UIDVALIDITY change, the cursor's number
    means nothing any more, and a rescan costs envelopes for what the
    store holds and loses nothing. (Leaving the cursor alone instead would
    stall the folder for good: no later run could tell it apart.) The bodies
    downloaded here count in ``fr.bodies`` and as ``bodies_checked``.
    ``held``: what ``held_sample`` read for this plan.
    """
    if not checks_reassigned(plan):
        return plan
    differ = suspects(src, held)
    fetched = src.bodies(differ) if differ else {}
    fr.bodies += len(fetched)
    fr.bodies_checked += len(fetched)
    fr.bytes_fetched += sum(map(len, fetched.values()))
    report.counts.bodies_checked += len(fetched)
    wrong = [uid for uid, raw in fetched.items() if hashlib.sha256(raw).hexdigest() != held[uid][1]]
    if not wrong:
        return plan
    return Plan(
        mode="full",
        after_uid=0,
        cursor_from=plan.cursor_from,
        reassigned=True,
        alarm=(
            f"UIDs reassigned without a UIDVALIDITY change (uidvalidity {state.uidvalidity};"
            f" known UIDs now naming other messages: {', '.join(map(str, wrong))}):"
            " rescanning the folder in full"
        ),
    )


def suspects(src: ImapSource, held: dict[int, Held]) -> list[int]:
    """The UIDs of ``held`` whose envelope on the server (the folder examined)
    differs from what the store holds: another Message-ID or another size.
    A UID the server no longer has is no evidence."""
    out = []
    for env in src.envelopes(sorted(held)) if held else ():
        mid, sha, size = held[env.uid]
        # A synthetic id says our parse found no Message-ID in the header; the
        # server's may find one (after a line that is no header field, say):
        # such a message is compared by its size alone.
        synthetic = mid == synthetic_message_id(sha)
        if (env.message_id != mid and not synthetic) or (size is not None and size != env.size):
            out.append(env.uid)
    return out


def sample_rng(account: str, folder: str, uidvalidity: int, run_id: str) -> random.Random:
    """The generator a run draws a folder's sample with: seeded with the folder
    and the run id, so a run can be replayed and successive runs look at other UIDs."""
    return random.Random(f"{account}/{folder}/{uidvalidity}/{run_id}")


def pick_held(pool: dict[int, Held], rng: random.Random) -> dict[int, Held]:
    """The sample checked of a pool of held UIDs: its lowest and highest UIDs and
    three drawn by ``rng``."""
    uids = sorted(pool)
    if not uids:
        return {}
    picked = rng.sample(uids, min(_SAMPLE - 2, len(uids)))
    return {uid: pool[uid] for uid in sorted({uids[0], uids[-1], *picked})}


def held_sample(
    store: MessageStore, account: str, folder: str, uidvalidity: int, plan: Plan
) -> dict[int, Held]:
    """``uid -> (message_id, sha256, size)`` the store holds for a sample of the
    folder's UIDs up to the plan's cursor (``queries.held_pool``, then
    ``pick_held``). Empty when the plan needs no check (``check_reassigned``)."""
    if not checks_reassigned(plan):
        return {}
    assert plan.cursor_from is not None
    rng = sample_rng(account, folder, uidvalidity, store.run_id)
    return pick_held(store.held_pool(account, folder, uidvalidity, plan.cursor_from, rng), rng)

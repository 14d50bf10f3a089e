"""Whether the UIDs a store holds still name the same messages on the server:
a sample of them, read from the store (``held_sample``) and compared with the
server's before a delta or a reconcile (``check_reassigned``)."""

from __future__ import annotations

import hashlib
import random
from typing import Any

from pipeline.reports import AccountReport, FolderReport
from pipeline.store import MessageStore
from pipeline.sync.plan import Plan, checks_reassigned
from pipeline.sync.sources import FolderState, ImapSource, synthetic_message_id

__all__ = ["check_reassigned", "held_sample"]

_SAMPLE = 5


def check_reassigned(
    src: ImapSource,
    state: FolderState,
    plan: Plan,
    fr: FolderReport,
    held: dict[int, tuple[str, str, int | None]],
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
    suspects = []
    for env in src.envelopes(sorted(held)) if held else ():  # expunged: no evidence
        mid, sha, size = held[env.uid]
        # A synthetic id says our parse found no Message-ID in the header; the
        # server's may find one (after a line that is no header field, say):
        # such a message is compared by its size alone.
        synthetic = mid == synthetic_message_id(sha)
        if (env.message_id != mid and not synthetic) or (size is not None and size != env.size):
            suspects.append(env.uid)
    fetched = src.bodies(suspects) if suspects else {}
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


def held_sample(
    store: MessageStore, account: str, folder: str, uidvalidity: int, plan: Plan
) -> dict[int, tuple[str, str, int | None]]:
    """``uid -> (message_id, sha256, size)`` the store holds for a sample of the
    folder's UIDs up to the plan's cursor: the latest content seen at each UID
    (after a rescan a UID has two), its size None when the record is gone.
    Empty when the plan needs no check (``check_reassigned``)."""
    if not checks_reassigned(plan):
        return {}
    last_uid = plan.cursor_from
    assert last_uid is not None
    # Probed, not listed: the lowest and highest UIDs and a random spread below
    # the cursor are looked up through the index on the location key, so an
    # idle sync of a folder of a million messages reads a few dozen rows.
    rng = random.Random(f"{account}/{folder}/{uidvalidity}/{store.run_id}")
    ends = [*range(1, min(last_uid, 8) + 1), *range(max(1, last_uid - 7), last_uid + 1)]
    spread = rng.sample(range(1, last_uid + 1), min(48, last_uid))
    probe = sorted({*ends, *spread})
    rows = store.locations_at(
        account,
        [(folder, uidvalidity, uid, None) for uid in probe],
        columns="uid, last_seq, vanished, message_id, sha256",
    )
    latest: dict[int, dict[str, Any]] = {}
    for r in rows:  # after a rescan a UID has two contents: the latest counts
        if r["uid"] is not None and (
            r["uid"] not in latest or r["last_seq"] > latest[r["uid"]]["last_seq"]
        ):
            latest[r["uid"]] = r
    uids = sorted(uid for uid, r in latest.items() if not r["vanished"])
    if not uids:
        return {}
    picked = rng.sample(uids, min(_SAMPLE - 2, len(uids)))
    sample = sorted({uids[0], uids[-1], *picked})
    held = {uid: latest[uid] for uid in sample}
    sizes = {
        (r["message_id"], r["sha256"]): r["size"]
        for r in store.message_rows(
            sorted({h["message_id"] for h in held.values()}), "message_id, sha256, size"
        )
    }
    return {
        uid: (h["message_id"], h["sha256"], sizes.get((h["message_id"], h["sha256"])))
        for uid, h in held.items()
    }

"""Purge: erase what a data-protection request asks for, keep what audits need.

A message is *purgeable* when the last of its ``message-seen`` /
``message-deleted`` events is a ``message-deleted``: it was deleted and no
source showed it to us again. A purge

- erases the blobs of purgeable messages, unless a stored message holds the
  same content (the same sha256 at a location of a stored message keeps it);
- rewrites every event of a purgeable message (seen, deleted, vanished) so that
  its personal columns are gone: ``headers``, ``subject``, ``from_addr``,
  ``to_addrs``, ``in_reply_to``, ``references``, ``list_id``, ``date_utc``,
  ``date_offset_min``, ``defects`` and the free-text ``reason``; its
  Message-ID is replaced by a random pseudonym
  (``purged-<32 hex>@purged.mailledger.invalid``);
- keeps the skeleton: type, seq, run_id, recorded_at, source, folder,
  uidvalidity, uid, uidl, sha256, size, internal_date, synthetic_id, actor. Cursor
  events are never touched, so the audit of every cursor move survives, and
  the locations still say "this UID/UIDL was downloaded", so a purged message
  is never fetched again.

Why the Message-ID goes too: it often carries a name, an address or a host
(``<john.smith.1234@laptop.example>``), and it is the very key a search for
"did this store hold X?" would use. Replay needs *an* identity that ties a
message's events together, not *the* identity: a pseudonym does that. It is
random, not a hash of the id, so nobody can confirm a guessed id against it.

Crash safety (a ``kill -9`` at any point; a re-run completes the purge):

1. The plan (ids to erase with their pseudonyms, the seq it was made at, the
   blobs to erase) is written to a journal before anything changes; a re-run
   resumes it. The journal holds the Message-IDs being erased until the purge
   ends, then it is removed.
2. One ``message-deleted`` event per pseudonym is appended first. From then
   on, whichever prefix of the files has been rewritten, the events under the
   old id and those under the pseudonym both end in a delete, so a replay of
   any intermediate log holds the same messages: nothing resurrects.
3. The projections are dropped (their ``locations`` hold the old ids); any
   reader rebuilds them from the log, which replays consistently at any step.
4. Files are rewritten in seq order, each atomically (temporary file, fsync,
   rename, directory fsync) with a fresh digest, after its old digest was
   checked (a tampered file is refused, never laundered). Only rows at or
   below the plan's seq are touched: an event committed after a crash (the
   message seen again) stays as it is.
5. Blobs are erased (unless a stored message now holds the content).
6. The caller rebuilds the projections into a fresh file (old DuckDB pages
   may still hold a subject) and then removes the journal.
"""

from __future__ import annotations

import contextlib
import json
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from stores.atomic import fsync_dir, replace_file
from stores.blobs import BlobStore
from stores.errors import LogIntegrityError
from stores.events import SCHEMA, MessageDeleted
from stores.log import EventLog

__all__ = [
    "PERSONAL_COLUMNS",
    "PSEUDONYM",
    "PurgeReport",
    "finish_purge",
    "purge_log",
]

PERSONAL_COLUMNS = (
    "headers",
    "subject",
    "from_addr",
    "to_addrs",
    "in_reply_to",
    "references",
    "list_id",
    "date_utc",
    "date_offset_min",
    "defects",
    "reason",
)
PSEUDONYM = re.compile(r"^purged-[0-9a-f]{32}@purged\.mailledger\.invalid$")
PURGE_ACTOR = "mailledger-purge"

_SEEN = "message-seen"
_DELETED = "message-deleted"


@dataclass
class PurgeReport:
    """What a purge did. ``resumed``: it finished a purge a crash had interrupted."""

    messages: int = 0
    events_rewritten: int = 0
    files_rewritten: int = 0
    blobs_erased: int = 0
    resumed: bool = False

    @property
    def changed(self) -> bool:
        return bool(self.messages or self.events_rewritten or self.blobs_erased or self.resumed)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class _Groups:
    """Per Message-ID, from the log: the last seen/deleted type, the contents seen."""

    last_type: dict[str, str]
    shas: dict[str, set[str]]
    erased: dict[str, bool]  # every message-seen row of the id already erased

    def stored(self) -> set[str]:
        """Contents a stored message holds (its id's last event is a message-seen)."""
        out: set[str] = set()
        for mid, kind in self.last_type.items():
            if kind == _SEEN:
                out |= self.shas.get(mid, set())
        return out


def _groups(log: EventLog) -> _Groups:
    last_type: dict[str, str] = {}
    shas: dict[str, set[str]] = {}
    erased: dict[str, bool] = {}
    for f in log.files():
        try:
            t = pq.read_table(f.path, columns=["seq", "type", "message_id", "sha256", "headers"])
        except (OSError, pa.ArrowException) as exc:
            raise LogIntegrityError(f"{f.path}: unreadable: {exc}; not purging") from exc
        t = t.filter(pc.is_in(t.column("type"), value_set=pa.array([_SEEN, _DELETED])))
        t = t.sort_by("seq")
        gone = pc.is_null(t.column("headers")).to_pylist()
        for kind, mid, sha, is_erased in zip(
            t.column("type").to_pylist(),
            t.column("message_id").to_pylist(),
            t.column("sha256").to_pylist(),
            gone,
            strict=True,
        ):
            if mid is None:
                continue
            last_type[mid] = kind
            if kind == _SEEN:
                if sha is not None:
                    shas.setdefault(mid, set()).add(sha)
                erased[mid] = erased.get(mid, True) and is_erased
    return _Groups(last_type, shas, erased)


def _plan(log: EventLog, blobs: BlobStore) -> dict[str, Any] | None:
    g = _groups(log)
    victims: dict[str, str] = {}
    done: list[str] = []
    for mid, kind in g.last_type.items():
        if kind != _DELETED:
            continue
        if PSEUDONYM.match(mid) and g.erased.get(mid, True):
            done.append(mid)  # purged before; only a blob may have come back
            continue
        victims[mid] = f"purged-{secrets.token_hex(16)}@purged.mailledger.invalid"
    keep = g.stored()
    candidates = set().union(*(g.shas.get(m, set()) for m in [*victims, *done]))
    erase = sorted(s for s in candidates - keep if blobs.has(s))
    if not victims and not erase:
        return None
    return {"version": 1, "last_seq": log.last_seq(), "victims": victims, "blobs": erase}


def _write_journal(path: Path, plan: dict[str, Any]) -> None:
    # (a fixed temporary name: _read_journal removes a plan never written whole)
    replace_file(path, json.dumps(plan).encode(), tmp=path.with_name(path.name + ".tmp"))


def _read_journal(path: Path) -> dict[str, Any] | None:
    path.with_name(path.name + ".tmp").unlink(missing_ok=True)  # a plan never written whole
    try:
        plan: dict[str, Any] = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except ValueError as exc:
        raise LogIntegrityError(f"{path}: unreadable purge journal: {exc}") from exc
    if plan.get("version") != 1:
        raise LogIntegrityError(f"{path}: unknown purge journal version")
    return plan


def _erase_rows(table: pa.Table, victims: dict[str, str], last_seq: int) -> tuple[pa.Table, int]:
    """``table`` with the rows of ``victims`` (seq <= last_seq) erased; and how many."""
    mask = pc.and_(
        pc.is_in(table.column("message_id"), value_set=pa.array(sorted(victims), pa.string())),
        pc.less_equal(table.column("seq"), last_seq),
    )
    hits = pc.sum(mask).as_py() or 0
    if not hits:
        return table, 0
    ids = [
        victims[mid] if hit else mid
        for mid, hit in zip(table.column("message_id").to_pylist(), mask.to_pylist(), strict=True)
    ]
    columns = {}
    for name in table.column_names:
        col = table.column(name)
        if name == "message_id":
            columns[name] = pa.array(ids, pa.string())
        elif name in PERSONAL_COLUMNS:
            columns[name] = pc.if_else(mask, pa.nulls(len(col), col.type), col)
        else:
            columns[name] = col
    return pa.table(columns, schema=table.schema), int(hits)


def purge_log(
    log: EventLog,
    blobs: BlobStore,
    journal: Path,
    *,
    run_id: str,
    now: Callable[[], datetime],
    drop_projections: Callable[[], None],
) -> PurgeReport:
    """Steps 1-5 of a purge (see the module docstring), under the writer lock.

    The caller rebuilds the projections when ``report.changed`` and then calls
    ``finish_purge(journal)``.
    """
    report = PurgeReport()
    with log.lock():
        log.tidy()
        plan = _read_journal(journal)
        if plan is not None:
            report.resumed = True
        else:
            # a damaged or tampered file is refused before anything changes: a
            # rewrite would give it a fresh digest and hide the damage for good
            problems = log.verify()
            if problems:
                raise LogIntegrityError(f"{problems[0]}; not purging (run verify)")
            plan = _plan(log, blobs)
            if plan is None:
                return report
            _write_journal(journal, plan)
        victims: dict[str, str] = plan["victims"]
        last_seq: int = plan["last_seq"]
        report.messages = len(victims)

        # 2. a delete under each pseudonym, before any row is renamed
        have = set()
        if victims:
            after = log.read(after=last_seq, columns=["type", "message_id"])
            have = {
                m
                for t, m in zip(
                    after.column("type").to_pylist(),
                    after.column("message_id").to_pylist(),
                    strict=True,
                )
                if t == _DELETED
            }
        missing = [p for p in victims.values() if p not in have]
        if missing:
            stamp = now()
            log.append(
                [
                    MessageDeleted(
                        run_id=run_id,
                        recorded_at=stamp,
                        message_id=p,
                        actor=PURGE_ACTOR,
                        reason="purged: personal data erased",
                    )
                    for p in sorted(missing)
                ]
            )

        # 3. projections hold the old ids: gone until rebuilt
        drop_projections()

        # 4. rewrite, in seq order, every file holding a row to erase
        if victims:
            for f in log.files():
                if f.first > last_seq:
                    break
                table = log.read_checked(f, doing="purging").cast(SCHEMA)
                new, hits = _erase_rows(table, victims, last_seq)
                if hits:
                    log.rewrite(f, new)
                    report.files_rewritten += 1
                    report.events_rewritten += hits

        # 5. blobs: never one a stored message holds now
        keep = _groups(log).stored()
        # (one rewrite per pack, however many of its blobs go)
        report.blobs_erased += len(blobs.delete_many(s for s in plan["blobs"] if s not in keep))
        blobs.flush()
        with contextlib.suppress(OSError):
            blobs.clean_tmp()  # a crashed writer's partial copy of an erased body
    return report


def finish_purge(journal: Path) -> None:
    """The last step: the purge is complete once its journal is gone."""
    journal.unlink(missing_ok=True)
    fsync_dir(journal.parent)

"""The commands that fill and look after a store: ``import``, ``replay``,
``delete``, ``verify`` and ``compact``."""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.cli import output
from pipeline.cli.common import command_progress, open_store
from pipeline.cli.exits import EXIT_ERROR, EXIT_OK
from pipeline.cli.parsing import add_command
from stores.errors import NotFoundError, UsageError

if TYPE_CHECKING:
    from pipeline.ingest import RunCounts

__all__ = ["add_compact", "add_delete", "add_import", "add_replay", "add_verify"]


def cmd_import(args: argparse.Namespace) -> int:
    from pipeline.sources.files import check_files, import_files
    from pipeline.sources.gdbm import check_gdbm, import_gdbm
    from pipeline.sources.maildir import check_maildir, import_maildir
    from pipeline.sources.mbox import check_mbox, import_mbox

    trees = {"maildir": (check_maildir, import_maildir), "files": (check_files, import_files)}
    if args.mboxrd and args.kind != "mbox":
        raise UsageError("--mboxrd is for an mbox file")
    # a path that is not what the kind reads is refused before a store is made for it
    checks = {"mbox": check_mbox, "gdbm": check_gdbm, **{k: v[0] for k, v in trees.items()}}
    checks[args.kind](Path(args.path).resolve())
    progress = command_progress()
    try:
        with open_store(args, create=True) as store:
            fn: Callable[..., RunCounts] = import_gdbm
            if args.kind in trees:
                fn = trees[args.kind][1]
            elif args.kind == "mbox":
                # (None: each message as its From line says; mailledger export's say mboxrd)
                fn = functools.partial(import_mbox, mboxrd=True if args.mboxrd else None)
            workers = args.workers if args.workers is not None else min(4, os.cpu_count() or 1)
            counts = fn(
                store,
                Path(args.path),
                batch_size=args.batch_size,
                progress=progress,
                workers=workers,
            )
    finally:
        progress.close()
    if args.json:
        output.print_json(counts.as_dict())
    else:
        output.echo(
            f"import {args.kind} {args.path}: seen={counts.uids_seen} new={counts.new_messages}"
            f" duplicates={counts.duplicates} other_source={counts.conflicts_other_source}"
            f" bodies={counts.bodies_fetched} known={counts.known_skipped}"
            f" malformed={counts.malformed} errors={counts.errors} events={counts.events}"
            + (f" flags_changed={counts.flags_changed}" if args.kind == "maildir" else "")
            + (f" not_mail={counts.not_mail}" if args.kind in trees else "")
        )
        for line in counts.error_details:
            output.echo(f"error: {line}", file=sys.stderr)
    if not counts.balanced:
        output.echo("error: run counts do not balance", file=sys.stderr)
        return EXIT_ERROR
    return EXIT_ERROR if counts.errors else EXIT_OK


def cmd_replay(args: argparse.Namespace) -> int:
    import time

    progress = command_progress()
    with open_store(args) as store:
        t0 = time.perf_counter()
        try:  # (bulk SQL: each phase is shown, with the time it has taken)
            last = store.reindex(progress=progress, text=args.text)
        finally:
            progress.close()
        took = time.perf_counter() - t0
    msg = {"events": last, "seconds": round(took, 3)}
    if args.json:
        output.print_json(msg)
    else:
        output.echo(f"replayed {last} events in {took:.2f}s into {store.projector.db_path}")
    return EXIT_OK


def cmd_delete(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        if not store.delete(args.id, reason=args.reason, actor=args.actor):
            raise NotFoundError(f"no message {args.id!r} in the store")
    output.echo(f"deleted {args.id}")
    return EXIT_OK


def cmd_verify(args: argparse.Namespace) -> int:
    if args.cluster is not None:  # (each shard's verify, its problems named by shard)
        from pipeline.cluster.verify import verify_cluster

        events, problems = verify_cluster(args.cluster, blobs=not args.no_blobs)
        return _verified(args, events, problems)
    progress = command_progress()
    with args.app.open_store(args.store, check=False) as store:  # lists every problem
        try:
            problems = store.verify(blobs=not args.no_blobs, progress=progress)
        finally:
            progress.close()
        events = store.log.last_seq()
    return _verified(args, events, problems)


def _verified(args: argparse.Namespace, events: int, problems: list[str]) -> int:
    if args.json:
        output.print_json({"ok": not problems, "events": events, "problems": problems})
    elif problems:
        for p in problems:
            output.echo(f"problem: {p}")
    else:
        output.echo(f"ok: {events} events, log intact, projections equal a fresh replay")
    return EXIT_ERROR if problems else EXIT_OK


def cmd_compact(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        before, after = store.compact(target_rows=args.target_rows)
        purged = store.purge().as_dict() if args.purge else None
    if args.json:
        output.print_json({"files_before": before, "files_after": after, "purge": purged})
        return EXIT_OK
    output.echo(f"compacted the log: {before} files -> {after}")
    if purged is not None:
        output.echo(
            f"purged: messages={purged['messages']} events_rewritten={purged['events_rewritten']}"
            f" files_rewritten={purged['files_rewritten']} blobs_erased={purged['blobs_erased']}"
            + (" (finished an interrupted purge)" if purged["resumed"] else "")
        )
    return EXIT_OK


def add_import(subs: Any) -> None:
    p = add_command(
        subs,
        "import",
        cmd_import,
        "import mail from a Maildir tree, an mbox file, the legacy GDBM UIDL store, or any"
        " tree of one-message files (files: a notmuch root, MH folders, saved .eml files)",
        "mailledger import maildir ~/Maildir\n  mailledger import files ~/Mail",
    )
    p.add_argument(
        "kind",
        choices=["maildir", "mbox", "gdbm", "files"],
        help="files: every regular file below PATH is a message, walked as `notmuch new`"
        " walks its root (hidden directories, tmp/, Xapian databases and MH bookkeeping"
        " left out; a symlink out of PATH never read); no Maildir flags are recorded",
    )
    p.add_argument("path")
    p.add_argument("--batch-size", type=int, default=1000)
    p.add_argument(
        "--workers", type=int, help="parser processes (default: one per core, at most 4; 0: none)"
    )
    p.add_argument(
        "--mboxrd",
        action="store_true",
        help="mbox: un-quote '>From ' lines (one '>' less) in every message, as mboxrd"
        " writers quote them (default: only in messages whose From line ends in 'mboxrd',"
        " as `mailledger export` writes them; the others keep the bytes in the file)",
    )
    p.add_argument("--json", action="store_true")


def add_replay(subs: Any) -> None:
    p = add_command(
        subs,
        "replay",
        cmd_replay,
        "rebuild every projection from the event log",
        "mailledger replay",
    )
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--text",
        action="store_true",
        help="rebuild the full-text index too, every message's text extracted again from"
        " the blobs (minutes for a large store; without it the index is rebuilt only when"
        " missing, made by another version or out of step, else brought up to the replay)",
    )


def add_delete(subs: Any) -> None:
    p = add_command(
        subs,
        "delete",
        cmd_delete,
        "delete a message from the store (recorded in the log)",
        "mailledger delete '<id@example.com>' --reason 'handled'",
    )
    p.add_argument("id")
    p.add_argument("--reason", default="deleted from the command line")
    p.add_argument("--actor", default="cli")


def add_verify(subs: Any) -> None:
    p = add_command(
        subs,
        "verify",
        cmd_verify,
        "check the log, the blobs, and that the projections equal a fresh replay",
        "mailledger verify",
    )
    p.add_argument("--no-blobs", action="store_true", help="skip reading every blob")
    p.add_argument("--json", action="store_true")


def add_compact(subs: Any) -> None:
    p = add_command(
        subs,
        "compact",
        cmd_compact,
        "merge small log files (no event changes); --purge also erases deleted messages",
        "mailledger compact --purge",
    )
    p.add_argument("--target-rows", type=int, default=100_000)
    p.add_argument(
        "--purge",
        action="store_true",
        help="erase the blobs of deleted messages no stored message holds, and rewrite the"
        " log so their headers are gone (the event skeleton stays: cursors and audits survive)",
    )
    p.add_argument("--json", action="store_true")

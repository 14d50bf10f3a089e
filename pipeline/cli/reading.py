"""The commands that read a store: ``find``, ``show``, ``thread``, ``query``,
``stats`` and ``cursor log``. Each asks the store one question and prints the
answer, as text or as JSON."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import Any

from pipeline.cli import output
from pipeline.cli.common import add_as_of, as_of, open_reads, open_store
from pipeline.cli.exits import EXIT_OK
from pipeline.cli.parsing import add_command
from pipeline.cli.searching import print_tree
from stores.errors import NotFoundError, UsageError

__all__ = ["add_cursor", "add_find", "add_query", "add_show", "add_stats", "add_thread"]


def cmd_find(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        if args.json:
            output.print_json(store.find(args.header, args.value))
            return EXIT_OK
        # one query for every hit, never one per hit; printed as DuckDB spelled it
        output.write_column(store.find_listing(args.header, args.value))
    return EXIT_OK


def cmd_show(args: argparse.Namespace) -> int:
    from pipeline.render import message_text, render_text

    with open_reads(args) as store:
        if args.raw:
            output.write_bytes(store.raw(args.id))
            return EXIT_OK
        rec = store.get(args.id)
        if rec is None:
            where = "cluster" if args.cluster is not None else "store"
            raise NotFoundError(f"no message {args.id!r} in the {where}")
        raw = store.raw(rec["message_id"])
    if args.json:
        text = message_text(raw)
        rec["headers"] = [{"name": n, "value": v} for n, v in rec["headers"]]
        rec["body"] = text.body
        rec["body_type"] = text.body_type or None
        rec["attachments"] = [
            {"filename": a.filename, "content_type": a.content_type, "size": a.size}
            for a in text.attachments
        ]
        output.print_json(rec)
        return EXIT_OK
    output.echo(render_text(rec["headers"], raw).removesuffix("\n"), newlines=True, tabs=True)
    return EXIT_OK


def cmd_thread(args: argparse.Namespace) -> int:
    with open_reads(args) as store, as_of(args, store) as then:
        if args.json:  # (the flat array of ids scripts read)
            output.print_json(then.walk_thread(args.id))
            return EXIT_OK
        roots = then.thread_tree(args.id)  # (one read of the thread, never one per message)
    if args.tree_json:
        output.print_json([root.as_dict() for root in roots])
    else:
        print_tree(roots)
    return EXIT_OK


def cmd_query(args: argparse.Namespace) -> int:
    import duckdb

    with open_reads(args) as store, as_of(args, store) as then:
        try:
            table = then.query(args.sql)
        except duckdb.Error as exc:
            raise UsageError(f"query failed: {exc}") from exc
    if args.json:
        output.print_json(table.to_pylist())
    else:
        rows = [tuple(r.values()) for r in table.to_pylist()]
        width = shutil.get_terminal_size().columns if sys.stdout.isatty() else None
        output.echo(output.format_table(table.column_names, rows, width), newlines=True)
        output.echo(f"({table.num_rows} rows)")
    return EXIT_OK


def cmd_stats(args: argparse.Namespace) -> int:
    from pipeline.at_rest import quick_stats  # (a store at rest: not opened)

    stats = quick_stats(Path(args.store)) if args.cluster is None else None
    if stats is None:
        with open_reads(args) as store:
            stats = store.stats()
    if args.json:
        output.print_json(stats)
    else:
        for key, value in stats.items():
            output.echo(f"{key}: {output.plain(value)}")
    return EXIT_OK


def cmd_cursor_log(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        moves = store.cursor_log(args.account, args.folder)
    if args.json:
        output.print_json(moves)
        return EXIT_OK
    if not moves:
        output.echo(f"no cursor events for {args.account} {args.folder}")
    for move in moves:
        m = {k: output.plain(v) for k, v in move.items()}
        when = m["recorded_at"]
        if m["type"] == "uidvalidity-changed":
            output.echo(
                f"seq={m['seq']} {when} run={m['run_id']} ALARM uidvalidity"
                f" {m['old_uidvalidity']}->{m['new_uidvalidity']} action={m['action']}"
            )
        else:
            output.echo(
                f"seq={m['seq']} {when} run={m['run_id']} mode={m['mode']}"
                f" uidvalidity={m['uidvalidity']} cursor={m['cursor_from']}->{m['cursor_to']}"
                f" uidnext={m['uidnext']} reason={m['reason']}"
            )
    return EXIT_OK


def add_find(subs: Any) -> None:
    p = add_command(
        subs,
        "find",
        cmd_find,
        "find messages by a normalized header value",
        "mailledger find from joe@example.com",
    )
    p.add_argument(
        "header", help="subject, from, to, cc, date, in-reply-to, references, list-id or message-id"
    )
    p.add_argument("value")
    p.add_argument("--json", action="store_true", help="a JSON array of Message-IDs")


def add_show(subs: Any) -> None:
    p = add_command(
        subs,
        "show",
        cmd_show,
        "show a message: decoded headers, attachments, the text body (--raw: the exact bytes)",
        "mailledger show '<id@example.com>'",
    )
    p.add_argument("id")
    p.add_argument("--json", action="store_true")
    p.add_argument("--raw", action="store_true", help="print the raw message bytes")


def add_thread(subs: Any) -> None:
    p = add_command(
        subs,
        "thread",
        cmd_thread,
        "draw a thread as a tree: replies indented under their parent, oldest first,"
        " messages the store lacks shown as [missing]",
        "mailledger thread '<id@example.com>' --tree-json",
    )
    p.add_argument("id")
    shape = p.add_mutually_exclusive_group()
    shape.add_argument(
        "--json", action="store_true", help="a flat JSON array of the stored Message-IDs"
    )
    shape.add_argument(
        "--tree-json",
        action="store_true",
        help="the tree as nested JSON: message_id, missing, date_iso, from_addr, subject, children",
    )
    add_as_of(p)


def add_query(subs: Any) -> None:
    p = add_command(
        subs,
        "query",
        cmd_query,
        "ask DuckDB anything: views events, messages, "
        "header_index, thread_edges, thread_nodes, locations, cursors; macro thread(id)",
        'mailledger query "select list_id, count(*) from messages group by 1"',
    )
    p.add_argument("sql")
    p.add_argument("--json", action="store_true")
    add_as_of(p)


def add_stats(subs: Any) -> None:
    p = add_command(
        subs, "stats", cmd_stats, "counts and sizes of the store", "mailledger stats --json"
    )
    p.add_argument("--json", action="store_true")


def add_cursor(subs: Any) -> None:
    p = add_command(
        subs,
        "cursor",
        cmd_cursor_log,
        "explain a folder's cursor, move by move",
        "mailledger cursor log gmail '[Gmail]/All Mail'",
    )
    p.add_argument("action", choices=["log"])
    p.add_argument("account")
    p.add_argument("folder")
    p.add_argument("--json", action="store_true")

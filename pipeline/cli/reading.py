"""The commands that read a store: ``find``, ``show``, ``thread``, ``query``,
``stats`` and ``cursor log``. Each asks the store one question and prints the
answer, as text or as JSON."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.cli import output
from pipeline.cli.common import add_as_of, as_of, open_reads, open_store
from pipeline.cli.exits import EXIT_ERROR, EXIT_OK
from pipeline.cli.parsing import add_command
from pipeline.cli.searching import print_tree
from stores.errors import NotFoundError, UsageError

if TYPE_CHECKING:
    from pipeline.cluster.reads import ClusterReads
    from pipeline.store import MessageStore
    from projections.queries import ThreadNode

__all__ = [
    "add_cursor",
    "add_find",
    "add_query",
    "add_show",
    "add_stats",
    "add_thread",
    "message_refs",
]


def cmd_find(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        if args.json:
            output.print_json(store.find(args.header, args.value))
            return EXIT_OK
        # one query for every hit, never one per hit; printed as DuckDB spelled it
        output.write_column(store.find_listing(args.header, args.value))
    return EXIT_OK


def message_refs(given: list[str]) -> list[tuple[str, str]]:
    """Each ID argument of ``show`` and ``thread`` as (``id`` or ``thread``, the id):
    what ``search`` prints is taken as it is printed: ``id:X`` (``id:"X"``), a
    Message-ID with or without its angle brackets, ``thread:T`` (the thread id of
    ``--output=threads``, which names a node of the thread)."""
    refs: list[tuple[str, str]] = []
    for text in given:
        kind, value = "id", text.strip()
        for prefix in ("id:", "thread:"):
            if value.startswith(prefix):
                kind, value = prefix[:-1], value[len(prefix) :]
                if len(value) > 1 and value[0] == value[-1] == '"':
                    value = value[1:-1]
                break
        if not value:
            raise UsageError(f"{text!r}: {kind}: needs a Message-ID")
        refs.append((kind, value))
    return refs


def _messages(
    store: MessageStore | ClusterReads, refs: list[tuple[str, str]]
) -> tuple[list[dict[str, Any]], list[str]]:
    """The primary records ``refs`` name (a thread: each stored message of it, oldest
    first), each once, in the order given; and the ids the store does not hold."""
    records: dict[str, dict[str, Any]] = {}
    missing: list[str] = []
    for kind, value in refs:
        if kind == "thread":
            try:
                ids = store.walk_thread(value)
            except NotFoundError:
                missing.append(value)
                continue
        else:
            ids = [value]
        for mid in ids:
            rec = store.get(mid)
            if rec is None:
                missing.append(mid)
            elif rec["message_id"] not in records:
                records[rec["message_id"]] = rec
    return list(records.values()), missing


def _not_found(missing: list[str], args: argparse.Namespace) -> int:
    where = "cluster" if getattr(args, "cluster", None) is not None else "store"
    for mid in missing:
        output.echo(f"mailledger: no message {mid!r} in the {where}", file=sys.stderr)
    return EXIT_ERROR if missing else EXIT_OK


def cmd_show(args: argparse.Namespace) -> int:
    from pipeline.render import message_json, render_text

    refs = message_refs(args.ids)
    one = len(refs) == 1 and refs[0][0] == "id"
    if (args.raw or args.part is not None) and not one:
        what = "--raw" if args.raw else "--part"
        raise UsageError(
            f"{what} writes the bytes of one message: name one id (several run together;"
            " `mailledger export` writes an mbox of many)"
        )
    if args.json and (args.raw or args.part is not None):
        raise UsageError("--json is not for bytes: --raw and --part write them as they are")
    if args.part is not None and args.part < 0:
        raise UsageError("--part: a part number is 0 (the whole message) or more")
    with open_reads(args) as store:
        if args.raw:
            output.write_bytes(store.raw(refs[0][1]))
            return EXIT_OK
        records, missing = _messages(store, refs)
        raws = [store.raw(rec["message_id"]) for rec in records]
    if args.part is not None:
        if records:
            from pipeline.attachments import part_bytes

            mid = records[0]["message_id"]
            output.write_bytes(part_bytes(raws[0], args.part, message_id=mid))
        return _not_found(missing, args)
    if args.save_attachments is not None:
        _save_attachments(args, records, raws)
        return _not_found(missing, args)
    if args.json:
        shown = [message_json(rec, raw) for rec, raw in zip(records, raws, strict=True)]
        output.print_json(shown[0] if one and shown else shown)
        return _not_found(missing, args)
    for i, (rec, raw) in enumerate(zip(records, raws, strict=True)):
        if len(records) > 1:  # (as head and tail name each file of several)
            output.echo(("\n" if i else "") + f"==> <{rec['message_id']}> <==", newlines=True)
        text = render_text(rec["headers"], raw).removesuffix("\n")
        output.echo(text, newlines=True, tabs=True)
    return _not_found(missing, args)


def _save_attachments(
    args: argparse.Namespace, records: list[dict[str, Any]], raws: list[bytes]
) -> None:
    """Save the attachments of each message into ``--save-attachments DIR`` and tell
    what was saved where."""
    from pipeline.attachments import save_attachments
    from pipeline.destination import user_directory

    if not records:
        return
    directory = user_directory(args.save_attachments)  # (made when new; exit 2 if not one)
    saved = []
    for rec, raw in zip(records, raws, strict=True):
        mid = rec["message_id"]
        done = save_attachments(raw, directory, message_id=mid)
        if not done:
            output.note(f"mailledger: <{mid}> has no attachments")
        saved.extend(done)
    if args.json:
        output.print_json([s.as_dict() for s in saved])
        return
    where = args.save_attachments.rstrip("/") or "/"
    for s in saved:
        output.echo(
            f"saved {where}/{s.saved_as} ({s.content_type}, {s.size} bytes,"
            f" part {s.part} of <{s.message_id}>)"
        )


def cmd_thread(args: argparse.Namespace) -> int:
    refs = message_refs(args.ids)
    missing: list[str] = []
    flat: list[str] = []
    trees: list[list[ThreadNode]] = []
    seen: set[tuple[str, ...]] = set()  # (each thread once, however many ids name it)
    with open_reads(args) as store, as_of(args, store) as then:
        for _, value in refs:
            try:
                if args.json:  # (the flat array of ids scripts read)
                    ids = then.walk_thread(value)
                    key = tuple(ids)
                else:
                    roots = then.thread_tree(value)  # (one read of the thread)
                    key = tuple(root.message_id for root in roots)
            except NotFoundError:
                missing.append(value)
                continue
            if key in seen:
                continue
            seen.add(key)
            if args.json:
                flat.extend(ids)
            else:
                trees.append(roots)
    if args.json:
        output.print_json(flat)  # ([] when no id is known)
    elif args.tree_json:
        output.print_json([root.as_dict() for roots in trees for root in roots])
    else:
        for i, roots in enumerate(trees):
            if i:
                output.echo()
            print_tree(roots)
    return _not_found(missing, args)


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
        "show messages: decoded headers, attachments (with their part numbers), the text"
        " body; --raw: the exact bytes; --part N: one part's decoded bytes;"
        " --save-attachments DIR: every attachment as a file",
        "mailledger show '<id@example.com>' --save-attachments ~/Downloads/invoice",
    )
    p.add_argument(
        "ids",
        nargs="+",
        metavar="ID",
        help="a Message-ID (with or without <>), id:ID, or thread:T (every message of the"
        " thread, oldest first), as `search` prints them; several: each in turn",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="the message as JSON (an array of them for several ids or a thread:); with"
        " --save-attachments, what was saved where",
    )
    what = p.add_mutually_exclusive_group()
    what.add_argument(
        "--raw", action="store_true", help="print the raw message bytes (one message only)"
    )
    what.add_argument(
        "--part",
        type=int,
        metavar="N",
        help="print part N's decoded bytes (one message only): parts numbered depth first as"
        " notmuch does, 1 the root part, 0 the whole message; `show` lists each attachment's",
    )
    what.add_argument(  # type: ignore[attr-defined]
        "--save-attachments",
        metavar="DIR",
        help="save every attachment into DIR (made when it is a new name in a directory that"
        " exists) under its name made safe: no directories, no leading dot, no control"
        " characters, never over a file (`name (1).ext`), never through a link",
    ).complete_kind = "DIRECTORY"


def add_thread(subs: Any) -> None:
    p = add_command(
        subs,
        "thread",
        cmd_thread,
        "draw a thread as a tree: replies indented under their parent, oldest first,"
        " messages the store lacks shown as [missing]",
        "mailledger thread '<id@example.com>' --tree-json",
    )
    p.add_argument(
        "ids",
        nargs="+",
        metavar="ID",
        help="a Message-ID (with or without <>), id:ID or thread:T, as `search` prints them;"
        " several: each thread once",
    )
    shape = p.add_mutually_exclusive_group()
    shape.add_argument(
        "--json",
        action="store_true",
        help="a flat JSON array of the stored Message-IDs ([] when no id is known)",
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

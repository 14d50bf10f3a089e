"""``mailledger search QUERY``: the search language (``projections.search``)
compiled to one query over the projections, printed as a summary, messages,
threads or a count; and ``thread ID`` drawn as a tree."""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from datetime import UTC, datetime, tzinfo
from typing import TYPE_CHECKING, Any

from pipeline.cli import output
from pipeline.cli.common import add_as_of, as_of, command_progress, open_reads, open_store
from pipeline.cli.exits import EXIT_ERROR, EXIT_OK
from pipeline.cli.parsing import add_command
from pipeline.terminal import terminal_text
from stores.errors import UsageError

if TYPE_CHECKING:  # (every command imports this module: DuckDB and pyarrow when used)
    import pyarrow as pa

    from projections.queries import ThreadNode

__all__ = ["add_export", "add_search", "print_tree"]

log = logging.getLogger("mailledger.cli")

_OUTPUTS = ("summary", "threads", "messages", "count")
_FORMATS = ("text", "json", "ids", "text0")


def _zone(name: str | None) -> tzinfo:
    if not name or name.upper() == "UTC":
        return UTC
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise UsageError(f"--tz: unknown time zone {name!r}") from None


def _now(args: argparse.Namespace) -> datetime:
    if args.now is None:
        now: datetime = args.app.clock.now()
        return now
    try:
        when = datetime.fromisoformat(args.now.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"--now: not an ISO 8601 date or time: {args.now!r}") from None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def _lines(table: pa.Table, out: str, fmt: str) -> list[str]:
    """The text lines of a result (``text``, ``ids``, ``text0``)."""
    rows = table.to_pylist()
    if fmt != "text" or out == "messages":
        key = "thread_id" if out == "threads" else "message_id"
        return [r[key] for r in rows]
    # (each field made safe for a terminal before it is padded: the columns line up)
    if out == "threads":
        return [
            f"thread:{terminal_text(r['thread_id'])}  {r['date_iso'] or '(undated)':20}"
            f"  [{r['matched']}/{r['messages']}]  {_one_line(r['subject'])}"
            for r in rows
        ]
    return [
        f"{r['date_iso'] or '(undated)':20}  {terminal_text(r['from_addr'] or '-'):30}"
        f"  {_one_line(r['subject'])}  <{terminal_text(r['message_id'])}>"
        for r in rows
    ]


def _one_line(text: str | None) -> str:
    """``text`` on one line for a terminal: its runs of blanks, tabs and line breaks
    one space, every other control or format character shown (``terminal_text``)."""
    return " ".join(terminal_text(text or "", newlines=True, tabs=True).split())


def cmd_search(args: argparse.Namespace) -> int:
    from projections.queries import compile_query
    from projections.queries.search import search_sql
    from projections.search import explain, parse

    if (args.limit is not None and args.limit < 0) or args.offset < 0:
        raise UsageError("--limit and --offset may not be negative")
    query = " ".join(args.query)  # (several arguments are one query, as notmuch reads them)
    tree = parse(query, now=_now(args), tz=_zone(args.tz))  # (exit 2, with the position)
    plan = compile_query(tree)
    if args.explain:
        output.echo(f"query: {explain(tree)}")
        for note in plan.notes:
            output.echo(f"  - {note}")
        if args.sort == "relevance" and not plan.text.keys() - plan.names:
            output.echo("  - --sort=relevance: no words or phrases to rank by; newest first")
        elif plan.drive is not None and args.limit is not None and args.sort != "relevance":
            output.echo(
                f"  - a page: {plan.drive}'s matches read a date window at a time from the"
                f" {args.sort} end, until the page is full"
            )
        sql = search_sql(plan, args.output, args.sort, args.limit, args.offset)
        output.echo(sql, newlines=True, tabs=True)
        return EXIT_OK
    matched: int | None = None  # (counted only when the page is empty but a match may not be)
    with open_reads(args) as store, as_of(args, store) as then:
        table = then.search(plan, args.output, sort=args.sort, limit=args.limit, offset=args.offset)
        if args.output != "count" and table.num_rows == 0 and (args.limit == 0 or args.offset):
            matched = then.search(plan, "count").column(0)[0].as_py()
    empty = (table.column(0)[0].as_py() == 0) if args.output == "count" else table.num_rows == 0
    if args.output == "count":
        count = table.column(0)[0].as_py()
        if args.format == "json":
            output.print_json(count)
        else:
            output.echo(str(count))
    elif args.format == "json":
        output.print_json(_json_rows(table, args.output))
    elif args.format == "text0":
        output.write_exact("".join(f"{line}\0" for line in _lines(table, args.output, "text0")))
    elif args.format == "ids":
        output.write_exact("".join(f"{line}\n" for line in _lines(table, args.output, "ids")))
    else:
        for line in _lines(table, args.output, args.format):
            output.echo(line)
    if matched:
        # (--limit 0 or an --offset past the end: the page is empty, the search is not)
        page = "--limit 0" if args.limit == 0 else f"--offset {args.offset}"
        output.note(
            f"mailledger: {matched} message{'s' if matched != 1 else ''} match {query!r}"
            f" ({page} shows none of them)"
        )
        return EXIT_OK
    if empty:
        output.note(f"mailledger: no messages match {query!r}")
        return EXIT_ERROR if args.exit_on_empty else EXIT_OK
    return EXIT_OK


def _any_of(queries: list[str], args: argparse.Namespace) -> Any:
    """The query tree of ``export QUERY... DEST``: one query as it is; several, the
    messages any of them matches (``id:a id:b`` as ``search`` prints them: both
    messages, as notmuch reads ids), each parsed on its own (an error's position is
    in the query that has it)."""
    from projections.search import Or, parse

    now, tz = _now(args), _zone(args.tz)
    trees = [parse(q, now=now, tz=tz) for q in queries]
    return trees[0] if len(trees) == 1 else Or(tuple(trees))


def _queries(queries: list[str]) -> str:
    return repr(queries[0]) if len(queries) == 1 else " or ".join(map(repr, queries))


def cmd_export(args: argparse.Namespace) -> int:
    from pipeline.destination import is_stdout
    from pipeline.export import export
    from projections.queries import compile_query

    plan = compile_query(_any_of(args.query, args))
    # (the mail goes where stdout does: what was written is told on stderr)
    told = sys.stderr if is_stdout(args.dest) else sys.stdout
    progress = command_progress(delay=0.5)
    try:
        with open_store(args) as store:
            report = export(
                store,
                plan,
                args.format,
                args.dest,  # (as given: only the string "-" is stdout)
                append=args.append,
                one_per_id=args.one_per_id,
                progress=progress,
            )
    finally:
        progress.close()
    code = EXIT_ERROR if report.errors else EXIT_OK
    if args.json:
        with contextlib.redirect_stdout(told):
            output.print_json({"exit_code": code, **report.as_dict()})
    else:
        variants = f", {report.variants} of them other versions of a Message-ID"
        output.echo(
            f"exported {report.messages} messages ({report.bytes} bytes"
            f"{variants if report.variants else ''}) to {args.dest} as {args.format}",
            file=told,
        )
        if report.newline_added:
            output.note(
                f"note: {report.newline_added} messages did not end in a newline; mbox"
                " cannot keep that ending, and gave them one (their From lines say so:"
                " `mailledger import mbox` takes it off again; a Maildir keeps it)"
            )
        for line in report.errors:
            output.echo(f"error: {line}", file=sys.stderr)
    if not report.messages and not report.errors:
        output.note(f"mailledger: no messages match {_queries(args.query)}")
    return code


def _json_rows(table: pa.Table, out: str) -> list[Any]:
    if out == "messages":
        return table.column("message_id").to_pylist()
    rows: list[Any] = table.to_pylist()
    return rows


def print_tree(roots: list[ThreadNode]) -> None:
    """A thread tree, a line per node, indented two spaces a level: date, sender,
    subject and the Message-ID; a ghost as ``[missing]`` with its id."""
    stack = [(node, 0) for node in reversed(roots)]
    while stack:
        node, depth = stack.pop()
        pad = "  " * depth
        if node.missing:
            output.echo(f"{pad}[missing]  <{node.message_id}>")
        else:
            output.echo(
                f"{pad}{node.date_iso or '(undated)'}  {node.from_addr or '-'}"
                f"  {_one_line(node.subject)}  <{node.message_id}>"
            )
        stack.extend((child, depth + 1) for child in reversed(node.children))


def add_search(subs: Any) -> None:
    p = add_command(
        subs,
        "search",
        cmd_search,
        "search the store: from:, to:, cc:, subject:, id:, thread:, list:, date:, size:,"
        " folder:, account:, is:, flag:, words; and, or, not (any case), -, ( )",
        "mailledger search from:alice subject:budget date:2025-06.. -has:attachment",
    )
    p.add_argument(
        "query",
        nargs="+",
        help="the query: its words, one argument or several (joined by spaces); a word"
        " starting with '-' is NOT (no '--' needed)",
    )
    p.add_argument(
        "--output",
        choices=_OUTPUTS,
        default="summary",
        help="summary (a line a message), threads (a line a thread), messages (ids), count",
    )
    p.add_argument(
        "--format",
        choices=_FORMATS,
        default="text",
        help="text, json, ids (a Message-ID or thread id a line), text0 (ids, NUL-separated)",
    )
    p.add_argument(
        "--sort",
        choices=("newest", "oldest", "relevance"),
        default="newest",
        help="relevance: FTS5's bm25 over the query's words and phrases (a subject word"
        " counts four times a body word), then newest; a query without text: newest",
    )
    p.add_argument("--limit", type=int, default=None, metavar="N")
    p.add_argument("--offset", type=int, default=0, metavar="N")
    p.add_argument(
        "--explain",
        action="store_true",
        help="print the parsed query, what each term reads, and the SQL; search nothing",
    )
    p.add_argument(
        "--now",
        metavar="WHEN",
        help="the instant relative dates (date:2w..) count back from (default: now)",
    )
    p.add_argument("--tz", metavar="ZONE", help="the time zone of calendar dates (default: UTC)")
    p.add_argument(
        "--exit-on-empty",
        action="store_true",
        help="exit 1 when nothing matches (default: 0, and a note on stderr)",
    )
    add_as_of(p)


def add_export(subs: Any) -> None:
    p = add_command(
        subs,
        "export",
        cmd_export,
        "write the messages a search matches, byte for byte, every version stored of each"
        " Message-ID, to an mbox file (mboxrd: '>From ' quoted, each From line marked so"
        " that `import mbox` un-quotes it) or a Maildir",
        "mailledger export 'list:dev* date:2024' --format=maildir ~/export/dev",
    )
    p.add_argument(
        "query",
        nargs="+",
        metavar="QUERY",
        help="the query, as `search` reads it (one argument: quote it); several: the"
        " messages any of them matches (id:X id:Y thread:T, as `search` prints them)",
    )
    p.add_argument(
        "dest",
        help="the mbox file (- for stdout; a symlink is written through, a FIFO or a device"
        " streamed into) or the Maildir directory to write",
    )
    p.add_argument(
        "--format",
        choices=("mbox", "maildir"),
        default="mbox",
        help="mbox (default: one file, mboxrd, written beside DEST and renamed onto it) or"
        " maildir (DEST/cur/, each message through DEST/tmp/)",
    )
    p.add_argument(
        "--append",
        action="store_true",
        help="add to an mbox or a Maildir that holds messages already (default: refuse one)",
    )
    p.add_argument(
        "--one-per-id",
        action="store_true",
        help="one body per Message-ID, the first stored (default: every content stored"
        " under it, as a folder or account showed it)",
    )
    p.add_argument("--now", metavar="WHEN", help="the instant relative dates count back from")
    p.add_argument("--tz", metavar="ZONE", help="the time zone of calendar dates (default: UTC)")
    p.add_argument("--json", action="store_true", help="the report as JSON")

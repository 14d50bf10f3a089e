"""``mailledger dispatch``: stored messages handed to the ``[dispatch]`` handlers
(``pipeline.dispatch``), a line per handler and a summary."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from pipeline.cli import output
from pipeline.cli.common import default_store_path
from pipeline.cli.exits import exit_code, with_exit
from pipeline.cli.parsing import add_command

if TYPE_CHECKING:
    from pipeline.dispatch import DispatchReport

__all__ = ["add_dispatch", "report_lines"]


def report_lines(report: DispatchReport) -> list[str]:
    """What a dispatch did, a line per handler, then the unrouted messages and the
    consumer's checkpoint."""
    out = []
    for h in report.handlers.values():
        text = f"dispatch {h.handler}: given={len(h.given)}"
        if not report.dry_run:
            text += f" finished={len(h.finished)}"
            if report.consumer is None:
                text += f" deleted={h.deleted}"
        if h.ignored:
            text += f" ignored_unknown_ids={len(h.ignored)}"
        if h.error:
            text += f" FAILED: {h.error}"
        out.append(text)
    if report.unrouted:
        what = "acknowledged, not handed over" if report.consumer else "they stay"
        out.append(f"unrouted: {len(report.unrouted)} (no route, no default; {what})")
    if report.consumer is not None:
        out.append(
            f"consumer {report.consumer}: checkpoint"
            f" {output.plain(report.checkpoint_from)}->{output.plain(report.checkpoint_to)}"
        )
    return out


def cmd_dispatch(args: argparse.Namespace) -> int:
    from pipeline.config import default_config_path, load_config
    from pipeline.dispatch import dispatch, parse_dispatch

    env = args.env
    config = load_config(args.config or default_config_path(env), env)
    dcfg = parse_dispatch(config.dispatch, config.path, env)
    store_path = args.store or config.store_path or default_store_path(env)
    with args.app.open_store(store_path) as store:
        report = dispatch(
            store,
            dcfg,
            dry_run=args.dry_run,
            consumer=args.consumer,
            on_error=lambda text: output.echo(text, file=sys.stderr, newlines=True),
        )
    code = exit_code(report)
    out = sys.stderr if args.json else sys.stdout
    for line in report_lines(report):
        output.echo(line, file=out)
    given = sum(len(h.given) for h in report.handlers.values())
    finished = sum(len(h.finished) for h in report.handlers.values())
    failed = sum(1 for h in report.handlers.values() if h.error)
    output.echo(
        f"{'dry-run' if args.dry_run else 'dispatch'} run={report.run_id}"
        f" handlers={len(report.handlers)} given={given} finished={finished}"
        f" unrouted={len(report.unrouted)} failed={failed} exit={code}",
        file=out,
    )
    if args.json:
        output.print_json(with_exit(report.as_dict(), code))
    return code


def add_dispatch(subs: Any) -> None:
    p = add_command(
        subs,
        "dispatch",
        cmd_dispatch,
        "hand stored messages to the [dispatch] handlers by To/Cc address; delete what they"
        " finish (or, with --consumer, only advance that consumer's checkpoint)",
        "mailledger dispatch --dry-run",
        opens_store=False,
    )
    p.add_argument("--dry-run", action="store_true", help="show the routing; call no handler")
    p.add_argument(
        "--consumer",
        metavar="NAME",
        help="non-destructive: only messages stored since NAME's checkpoint; nothing deleted",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")

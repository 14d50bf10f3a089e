"""The commands that describe the command line itself, generated from its own
parser: ``completion`` (shtab) and ``man`` (argparse-manpage)."""

from __future__ import annotations

import argparse
from typing import Any

from pipeline.cli import output
from pipeline.cli.common import version
from pipeline.cli.exits import EXIT_OK
from pipeline.cli.parsing import GLOBAL_OPTIONS, add_command

__all__ = ["add_completion", "add_man"]


def cmd_completion(args: argparse.Namespace) -> int:
    import shtab

    parser: argparse.ArgumentParser = args.parser
    todo = [parser]
    while todo:  # every parser's paths: shtab's completers (imported here only: 20 ms)
        for action in todo.pop()._actions:
            kind = getattr(action, "complete_kind", None)
            if kind is not None:
                action.complete = getattr(shtab, kind)  # type: ignore[attr-defined]
            if isinstance(action, argparse._SubParsersAction):
                todo.extend(action.choices.values())
    output.write_exact(shtab.complete(parser, shell=args.shell))
    return EXIT_OK


def cmd_man(args: argparse.Namespace) -> int:
    from argparse_manpage.manpage import Manpage

    parser: argparse.ArgumentParser = args.parser
    # the global options once, at the top, not again under every command
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                sub._action_groups = [g for g in sub._action_groups if g.title != GLOBAL_OPTIONS]
    page = Manpage(parser)
    page.source = f"mailledger {version()}"
    page.manual = "mailledger manual"
    page.description = "keep mail safe and findable: an event log of every message seen"
    output.write_exact(str(page))
    return EXIT_OK


def add_completion(subs: Any) -> None:
    p = add_command(
        subs,
        "completion",
        cmd_completion,
        "print the shell completion script (generated from this parser by shtab)",
        "mailledger completion bash > ~/.local/share/bash-completion/completions/mailledger",
        opens_store=False,
    )
    p.add_argument("shell", choices=["bash", "zsh", "tcsh"])


def add_man(subs: Any) -> None:
    add_command(
        subs,
        "man",
        cmd_man,
        "print the manual page (roff, generated from this parser)",
        "mailledger man > mailledger.1 && man -l mailledger.1",
        opens_store=False,
    )

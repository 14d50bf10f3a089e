"""``search``'s arguments as notmuch reads them: every argument that is not one of
the command's options is a word of the query, a leading ``-`` included, in order."""

from __future__ import annotations

import pytest

from pipeline.cli import build_parser
from pipeline.cli.parsing import query_words_last


def _read(*argv: str) -> tuple[list[str], dict[str, object]]:
    parser = build_parser({})
    args = parser.parse_args(query_words_last(list(argv), parser, parser.query_commands))
    return args.query, {"limit": args.limit, "sort": args.sort, "output": args.output}


@pytest.mark.parametrize(
    ("argv", "words", "options"),
    [
        (["search", "-from:carl"], ["-from:carl"], {}),
        (
            ["search", "from:x", "-subject:y", "--limit", "5", "or", "-h2"],
            ["from:x", "-subject:y", "or", "-h2"],
            {"limit": 5},
        ),
        (["--store", "search", "search", "-a", "--sort=oldest"], ["-a"], {"sort": "oldest"}),
        (["search", "--lim", "3", "-x"], ["-x"], {"limit": 3}),  # (an abbreviation)
        (["-q", "search", "-v", "a", "--", "--limit"], ["a", "--limit"], {}),  # ('--' ends them)
        (["search", "-", "(a", "-b)"], ["-", "(a", "-b)"], {}),
        (["search", "--output", "count", "-10"], ["-10"], {"output": "count"}),
    ],
)
def test_query_words_keep_their_order_and_options_stay_options(
    argv: list[str], words: list[str], options: dict[str, object]
) -> None:
    got_words, got_options = _read(*argv)
    assert got_words == words
    assert {k: got_options[k] for k in options} == options


def test_other_commands_are_left_as_they_are() -> None:
    parser = build_parser({})
    argv = ["show", "-x", "--raw"]
    assert query_words_last(argv, parser, parser.query_commands) == argv
    assert query_words_last(["--version"], parser, parser.query_commands) == ["--version"]

"""``mailledger search`` on the read model, and ``thread`` drawn as a tree: a
table of queries and their hits over the bundled fixtures and the notmuch
corpus (real DuckDB projections, imported the way a user imports), the
command's outputs and exit codes, and tree snapshots."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from pipeline.cli import main
from pipeline.sources.maildir import import_maildir
from pipeline.sources.mbox import import_mbox
from pipeline.store import MessageStore
from projections.queries import compile_query
from projections.search import parse
from stores.errors import UsageError
from tests.conftest import StepClock

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "fixtures"
NOW = datetime(2024, 7, 1, 12, 0, tzinfo=UTC)

PLAN = {"plan-1@example.org", "plan-2@example.org", "plan-4@example.pl", "plan-5@example.org"}
NIGHTLY = {
    "nightly-20240628@lists.example.org",
    "nightly-20240629@lists.example.org",
    "nightly-fix@example.org",
}
NO_ID = "sha256-d926c01086677b806c943040d236781300f2a137@synthetic.mailledger"
EVERY = PLAN | NIGHTLY | {"undated-1@example.com", NO_ID}


@pytest.fixture(scope="module")
def fixtures_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MessageStore]:
    root = tmp_path_factory.mktemp("search") / "store"
    with MessageStore.open(root, clock=StepClock(), run_id="test-run") as store:
        import_maildir(store, FIXTURES / "maildir")
        import_mbox(store, FIXTURES / "lists.mbox")
        yield store


@pytest.fixture(scope="module")
def notmuch_store(
    tmp_path_factory: pytest.TempPathFactory, notmuch_corpus: Path
) -> Iterator[MessageStore]:
    corpus = notmuch_corpus
    root = tmp_path_factory.mktemp("notmuch") / "store"
    with MessageStore.open(root, clock=StepClock(), run_id="test-run") as store:
        import_maildir(store, corpus)
        yield store


def hits(store: MessageStore, query: str, **kw: object) -> list[str]:
    table = store.search(compile_query(parse(query, now=NOW)), "messages", **kw)  # type: ignore[arg-type]
    ids: list[str] = table.column("message_id").to_pylist()
    return ids


# query -> the Message-IDs it finds among the fixtures
FIXTURE_TABLE: list[tuple[str, set[str]]] = [
    ("*", EVERY),
    ("from:ada", {"plan-1@example.org", "plan-5@example.org"}),
    ("from:ada@example.org", {"plan-1@example.org", "plan-5@example.org"}),
    ("from:ADA@", {"plan-1@example.org", "plan-5@example.org"}),
    ("from:@example.pl", {"plan-4@example.pl"}),
    ("from:example.org", PLAN - {"plan-4@example.pl"} | NIGHTLY),  # subdomains too
    ("from:@lists.example.org", NIGHTLY - {"nightly-fix@example.org"}),
    ("from:zof*", {"plan-4@example.pl"}),
    ("from:@exam*", PLAN | {"nightly-fix@example.org", "undated-1@example.com", NO_ID}),
    ("to:team@example.org", {"plan-1@example.org", "plan-2@example.org", "plan-4@example.pl"}),
    ("cc:grace@example.org", {"plan-1@example.org"}),  # (To and Cc are one list)
    ("to:dev@", NIGHTLY),
    ("subject:budget", set()),
    ("subject:wire", PLAN),
    ('subject:"live wire"', PLAN),
    ('subject:"wire live"', set()),
    ("subject:live-wire", PLAN),  # (punctuation separates words, as in the subject)
    ('subject:"wire release"', PLAN),  # ("Live Wire: release plan")
    ("subject:plan_", PLAN),
    ("subject:migracja", {"plan-4@example.pl"}),
    ("subject:rel*", PLAN),
    ("subject:FAILED", {"nightly-20240629@lists.example.org", "nightly-fix@example.org"}),
    ('subject:="Live Wire: release plan"', PLAN - {"plan-4@example.pl"}),
    ("subject:re", set()),  # (the reply prefix is not a word of the subject key)
    ("nightly", NIGHTLY),
    ("body:nightly", set()),  # (in the subjects only)
    ("body:flaky", {"nightly-fix@example.org"}),  # the body text, through the full-text index
    ("subject:flaky", set()),
    ("FLAKY", {"nightly-fix@example.org"}),  # bare words: the subject and the body
    ('"flaky clock"', {"nightly-fix@example.org"}),
    ('"clock flaky"', set()),
    ("migrat*", {"plan-2@example.org"}),
    ("plan friday", {"plan-1@example.org"}),  # a subject word and a body word
    ("nightly OR flaky", NIGHTLY),
    ("stable synthetic", {NO_ID}),
    ("-body:the", {*NIGHTLY - {"nightly-fix@example.org"}, "plan-4@example.pl", NO_ID}),
    ("has:attachment", set()),
    ("-has:attachment", EVERY),
    ("body:wire from:ada", {"plan-1@example.org"}),
    ("id:<plan-2@example.org>", {"plan-2@example.org"}),
    ("id:plan-3@example.org", set()),  # a ghost: referred to, never stored
    ("thread:plan-4@example.pl", PLAN),
    ("thread:plan-3@example.org", PLAN),  # the ghost's thread
    ("thread:{from:zofia}", PLAN),
    ("thread:{subject:fix*}", set()),
    ("thread:{from:grace}", PLAN | NIGHTLY - {"nightly-20240628@lists.example.org"}),
    ("list:dev.lists.example.org", NIGHTLY),
    ("list:<dev.lists.example.org>", NIGHTLY),
    ("list:dev*", NIGHTLY),
    ("list:ops*", set()),
    ("date:2024-06-26", {"plan-1@example.org", "plan-2@example.org", "plan-4@example.pl"}),
    ("date:2024-06-27..2024-06-28", {"plan-5@example.org", "nightly-20240628@lists.example.org"}),
    ("date:2024-06-29..", {"nightly-20240629@lists.example.org", "nightly-fix@example.org", NO_ID}),
    # (from the start of the day three days back, as notmuch: 06-28 02:00 is in)
    ("date:3d..", NIGHTLY | {NO_ID}),
    ("date:..2024-06-25", set()),
    ("-date:2024", {"undated-1@example.com"}),  # undated: in no year, so in NOT any
    ("folder:INBOX", PLAN - {"plan-5@example.org"} | {"undated-1@example.com", NO_ID}),
    ("folder:inbox", PLAN - {"plan-5@example.org"} | {"undated-1@example.com", NO_ID}),
    ("folder:Archive", {"plan-5@example.org", "nightly-20240628@lists.example.org"}),
    ("folder:Drafts", set()),
    ("account:import:maildir*", EVERY - NIGHTLY | {"nightly-20240628@lists.example.org"}),
    ("NOT account:import:maildir*", NIGHTLY - {"nightly-20240628@lists.example.org"}),
    (
        "size:1..280",
        {
            NO_ID,
            "undated-1@example.com",
            "plan-5@example.org",
            "plan-1@example.org",
            "nightly-20240629@lists.example.org",
        },
    ),
    ("size:>=386", {"plan-4@example.pl", "nightly-fix@example.org"}),
    ("size:>10M", set()),
    ("is:vanished", set()),
    ("NOT is:deleted", EVERY),
    ("from:ada subject:plan", {"plan-1@example.org", "plan-5@example.org"}),
    ("from:ada AND NOT subject:fwd", {"plan-1@example.org", "plan-5@example.org"}),
    ("from:ada -date:2024-06-27", {"plan-1@example.org"}),
    ("from:zofia OR list:dev*", NIGHTLY | {"plan-4@example.pl"}),
    ("(from:zofia OR from:bot) date:2024-06-29", {"nightly-20240629@lists.example.org"}),
    ("NOT from:example.org NOT from:example.com", {"plan-4@example.pl", NO_ID}),
    (
        "-(from:ada OR from:grace OR from:bot)",
        {"plan-4@example.pl", "undated-1@example.com", NO_ID},
    ),
]


@pytest.mark.parametrize(("query", "expected"), FIXTURE_TABLE, ids=[q for q, _ in FIXTURE_TABLE])
def test_fixture_queries_find_what_they_name(
    fixtures_store: MessageStore, query: str, expected: set[str]
) -> None:
    found = hits(fixtures_store, query)
    assert len(found) == len(set(found))
    assert set(found) == expected


# query -> how many of the notmuch corpus's 278 messages it finds (the counts of
# from:, list: and date: were checked against Python's email parser on the files)
NOTMUCH_TABLE: list[tuple[str, int]] = [
    ("*", 278),
    ("subject:accentue", 1),  # "Essai accentué"
    ("fotgangare", 1),  # "fotgängare"
    ("from:perches.com", 53),
    ("from:joe@perches.com", 53),
    ("list:notmuch.notmuchmail.org", 17),
    ("list:linux-*", 122),
    ("NOT list:linux-*", 156),
    ("date:2009-11-17", 21),
    ("folder:default/foo", 6),
    ("folder:default*", 52),
    ('subject:="root message"', 2),
    ("subject:grand*", 4),
    ('thread:{subject:"grand-child message 2"}', 6),
    ("thread:mid-loop-21@example.org", 2),
    ("(from:cworth OR from:keithp) date:2009", 20),
    ("from:alice@example.org -folder:threading*", 3),
    # the full-text index (duplicated files hold one message: first seen wins)
    # (as notmuch counts them: a detached signature or an S/MIME envelope is no
    # attachment, an inline file is body text; notmuch's `tag:attachment` is 7)
    ("has:attachment", 7),
    ("filename:signature.asc", 0),
    ("filename:fake.pdf", 1),  # (a named attachment of no known type)
    ("filename:patch", 4),
    ('body:"too many open files"', 5),
    ('"local caching"', 6),
    ("cifs caching", 11),
    ("cach*", 39),
    ("accentue", 1),  # "accentué", latin-1 in the subject and the body
    ('"bonne heure"', 1),
    ("notmuch -has:attachment", 56),  # (bare words read the names and addresses too)
    # display names, as notmuch matches them (`notmuch count` gives the same)
    ('from:"Carl Worth"', 12),
    ("from:Carl", 12),
    ("from:carl*", 12),
    ('from:"Keith Packard" OR from:carl', 20),
    ("carl", 19),  # (a bare word: the subject, the body, the names and addresses)
    ("boost or python", 4),
]


@pytest.mark.parametrize(("query", "count"), NOTMUCH_TABLE, ids=[q for q, _ in NOTMUCH_TABLE])
def test_notmuch_corpus_queries(notmuch_store: MessageStore, query: str, count: int) -> None:
    plan = compile_query(parse(query, now=NOW))
    assert notmuch_store.search(plan, "count").column(0)[0].as_py() == count
    assert len(hits(notmuch_store, query)) == count


def test_sort_limit_offset_page_through_the_same_order(fixtures_store: MessageStore) -> None:
    newest = hits(fixtures_store, "*")
    assert newest[0] == NO_ID and newest[-1] == "undated-1@example.com"
    oldest = hits(fixtures_store, "*", sort="oldest")
    assert oldest[:-1] == newest[:-1][::-1] and oldest[-1] == "undated-1@example.com"
    pages = [hits(fixtures_store, "*", limit=3, offset=o) for o in range(0, 9, 3)]
    assert [mid for page in pages for mid in page] == newest


def test_threads_output_counts_matches_and_stored_messages(fixtures_store: MessageStore) -> None:
    plan = compile_query(parse("from:ada OR from:bot", now=NOW))
    rows = fixtures_store.search(plan, "threads").to_pylist()
    assert [(r["thread_id"], r["matched"], r["messages"]) for r in rows] == [
        ("nightly-20240629@lists.example.org", 1, 2),
        ("nightly-20240628@lists.example.org", 1, 1),
        ("plan-1@example.org", 2, 4),
    ]
    assert rows[2]["subject"] == "Live Wire: release plan"  # its first message's


def test_text_terms_compile_to_full_text_matches() -> None:
    plan = compile_query(parse("filename:report.pdf OR has:attachment", now=NOW))
    assert list(plan.text.values()) == ['filenames : ("report" + "pdf")', 'flags : "attachment"']
    plan = compile_query(parse('budget "live wi"* -from:ada', now=NOW))
    # the words of one AND share one match; from:ada also reads the From names
    assert list(plan.text.values()) == [
        '{subject body names} : ("budget") AND {subject body names} : ("live" + "wi"*)',
        'from_names : ("ada")',
    ]
    assert plan.names == {"_text2"}  # (a condition, not words --sort=relevance ranks by)
    plan = compile_query(parse('to:"Carl Worth" cc:jo* from:ada@example.org', now=NOW))
    # (a value naming an address, or a part of one, reads the addresses only)
    assert list(plan.text.values()) == ['to_names : ("carl" + "worth")', 'to_names : ("jo"*)']
    assert any("MATCH" in n for n in plan.notes)
    with pytest.raises(UsageError, match="no letter or digit"):
        compile_query(parse("subject:--", now=NOW))


# -- the command ------------------------------------------------------------------
def run(capsys: pytest.CaptureFixture[str], store: Path, *argv: str) -> tuple[int, str, str]:
    code = main(["--store", str(store), *argv], env={})
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def filled(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    store = tmp_path / "store"
    assert run(capsys, store, "import", "maildir", str(FIXTURES / "maildir"))[0] == 0
    assert run(capsys, store, "import", "mbox", str(FIXTURES / "lists.mbox"))[0] == 0
    return store


def test_search_reads_its_arguments_as_one_query_a_leading_dash_as_not(
    filled: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # as a user types it: a real process, its arguments as the shell splits them
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline", "--store", str(filled), "search",
         "-from:ada", "--format=ids", "subject:wire", "--limit", "5", "-q"],
        capture_output=True, text=True, check=False, cwd=REPO,
    )  # fmt: skip
    assert (proc.returncode, proc.stderr) == (0, "")
    assert set(proc.stdout.split()) == {"plan-2@example.org", "plan-4@example.pl"}
    for argv, expected in [
        (["from:ada", "or", "from:bot", "--output", "count"], "4"),
        (["--output=count", "not", "from:ada", "subject:wire"], "2"),
        (["--output", "count", "--", "-from:ada", "subject:wire"], "2"),  # ('--' as before)
        (["--output", "count", "(from:ada", "OR", "from:zofia)", "-date:2024-06-27"], "2"),
        (["--output", "count", "from:ada subject:plan"], "2"),  # (one argument, as before)
    ]:
        code, out, err = run(capsys, filled, "search", *argv)
        assert (code, out.strip(), err) == (0, expected, ""), argv
    code, _, err = run(capsys, filled, "search", "subject:wire", "--limit")
    assert code == 2 and "--limit: expected one argument" in err


def test_search_command_outputs_and_formats(
    filled: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, filled, "search", "from:ada")
    assert code == 0 and err == ""
    assert out.splitlines() == [
        "2024-06-27T08:30:00Z  ada@example.org                 Fwd: Re: Live Wire: release plan"
        "  <plan-5@example.org>",
        "2024-06-26T08:00:00Z  ada@example.org                 Live Wire: release plan"
        "  <plan-1@example.org>",
    ]
    code, out, _ = run(capsys, filled, "search", "from:ada", "--format=ids", "--sort=oldest")
    assert out == "plan-1@example.org\nplan-5@example.org\n"
    code, out, _ = run(capsys, filled, "search", "from:ada", "--format=text0", "--limit=1")
    assert out == "plan-5@example.org\0"
    code, out, _ = run(capsys, filled, "search", "from:ada", "--output=messages", "--format=json")
    assert json.loads(out) == ["plan-5@example.org", "plan-1@example.org"]
    code, out, _ = run(capsys, filled, "search", "from:ada", "--format=json", "--offset=1")
    assert [r["message_id"] for r in json.loads(out)] == ["plan-1@example.org"]
    code, out, _ = run(capsys, filled, "search", "list:dev*", "--output=count")
    assert out == "3\n"
    code, out, _ = run(capsys, filled, "search", "from:ada", "--output=threads", "--format=ids")
    assert out == "plan-1@example.org\n"
    code, out, _ = run(capsys, filled, "search", "from:ada", "--output=threads")
    assert out.startswith("thread:plan-1@example.org  2024-06-27T08:30:00Z  [2/4]  Live Wire")


def test_relative_dates_count_from_now_in_the_time_zone_asked(
    filled: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ("search", "--format=ids", "--now=2024-06-30T00:00:00Z")
    _, out, _ = run(capsys, filled, *args, "date:1d..")
    assert set(out.split()) == {
        "nightly-20240629@lists.example.org",
        "nightly-fix@example.org",
        NO_ID,
    }
    # 2024-06-26 in Tokyo is 06-25T15:00Z..06-26T15:00Z: the three plan messages of the 26th
    _, out, _ = run(capsys, filled, *args, "--tz=Asia/Tokyo", "date:2024-06-26")
    assert set(out.split()) == {"plan-1@example.org", "plan-2@example.org", "plan-4@example.pl"}
    _, out, _ = run(capsys, filled, *args, "--tz=Pacific/Kiritimati", "date:2024-06-26")
    assert set(out.split()) == {"plan-1@example.org", "plan-2@example.org"}
    assert run(capsys, filled, *args, "--tz=Nowhere/Atlantis", "*")[0] == 2


def test_a_query_that_cannot_be_parsed_exits_2_naming_the_position(
    filled: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, filled, "search", "from:ada AND (subject:x")
    assert code == 2 and out == ""
    assert "position 13" in err and "never closed" in err
    code, _, err = run(capsys, filled, "search", "date:2024-13")
    assert code == 2 and "position 5" in err


def test_an_empty_result_says_so_and_exits_0_or_1_when_asked(
    filled: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, filled, "search", "from:nobody@nowhere")
    assert (code, out) == (0, "") and "no messages match" in err
    code, out, err = run(capsys, filled, "search", "from:nobody@nowhere", "--exit-on-empty")
    assert (code, out) == (1, "") and "no messages match" in err
    code, out, err = run(capsys, filled, "search", "from:nobody@nowhere", "--output=count")
    assert (code, out) == (0, "0\n") and "no messages match" in err


def test_explain_prints_the_query_the_plan_and_the_sql(
    filled: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, filled, "search", "--explain", "budget -from:ada")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "query: budget AND NOT from:ada"
    assert any('MATCH {subject body names} : ("budget")' in line for line in lines)
    assert lines[-1].startswith("SELECT m.message_id")
    assert "m.seq IN (SELECT seq FROM _text1)" in lines[-1]
    code, out, err = run(capsys, filled, "search", "--format=ids", "flaky")
    assert (code, out, err) == (0, "nightly-fix@example.org\n", "")


# -- thread as a tree ---------------------------------------------------------------
PLAN_TREE = """\
2024-06-26T08:00:00Z  ada@example.org  Live Wire: release plan  <plan-1@example.org>
  2024-06-26T09:00:00Z  grace@example.org  Re: Live Wire: release plan  <plan-2@example.org>
    [missing]  <plan-3@example.org>
      2024-06-26T11:00:00Z  zofia@example.pl  Re: Live Wire: release plan — migracja  <plan-4@example.pl>
    2024-06-27T08:30:00Z  ada@example.org  Fwd: Re: Live Wire: release plan  <plan-5@example.org>
"""  # noqa: E501


def test_thread_draws_the_tree_and_json_stays_flat(
    filled: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, filled, "thread", "<plan-4@example.pl>")
    assert code == 0 and out == PLAN_TREE
    code, out, _ = run(capsys, filled, "thread", "plan-1@example.org", "--json")
    assert json.loads(out) == sorted(PLAN)
    code, out, _ = run(capsys, filled, "thread", "plan-1@example.org", "--tree-json")
    (root,) = json.loads(out)

    def shape(node: dict[str, object]) -> object:
        kids = node["children"]
        assert isinstance(kids, list)
        return (node["message_id"], node["missing"], [shape(k) for k in kids])

    assert shape(root) == (
        "plan-1@example.org",
        False,
        [
            (
                "plan-2@example.org",
                False,
                [
                    ("plan-3@example.org", True, [("plan-4@example.pl", False, [])]),
                    ("plan-5@example.org", False, []),
                ],
            )
        ],
    )
    assert run(capsys, filled, "thread", "<plan-3@example.org>")[1] == PLAN_TREE  # (a ghost's)
    assert run(capsys, filled, "thread", "<nobody@nowhere>")[0] == 1


def _tree(store: MessageStore, msg_id: str) -> list[str]:
    lines = []
    stack = [(n, 0) for n in reversed(store.thread_tree(msg_id))]
    while stack:
        node, depth = stack.pop()
        lines.append("  " * depth + ("?" if node.missing else "") + node.message_id)
        stack.extend((c, depth + 1) for c in reversed(node.children))
    return lines


def test_notmuch_thread_trees_ghosts_loops_and_chains(notmuch_store: MessageStore) -> None:
    assert _tree(notmuch_store, "001-fake-message-root@example.org") == [
        "000-real-root@example.org",
        "  001-child@example.org",
        "    ?nonexistent-message@example.org",
        "      001-fake-message-root@example.org",
        "    001-grand-child@example.org",
        "      001-great-grand-child@example.org",
        "    001-grand-child2@example.org",
    ]
    # two messages each in reply to the other: the older one is the root
    assert _tree(notmuch_store, "mid-loop-21@example.org") == [
        "mid-loop-12@example.org",
        "  mid-loop-21@example.org",
    ]
    # a ghost first in a reply's References: the parent of the stored root (JWZ)
    tree = _tree(notmuch_store, "87bmc6lp3h.fsf@len.workgroup")
    assert tree[0].startswith("?RT-Ticket-33575@") and tree[1] == "  87bmc6lp3h.fsf@len.workgroup"
    assert len(tree) == 4


def test_relevance_ranks_by_words_not_by_a_name_in_from(fixtures_store: MessageStore) -> None:
    # from:ada reads the From names too, but ranks nothing: newest first, as before
    plan = compile_query(parse("from:ada", now=NOW))
    assert plan.text and plan.names == set(plan.text)
    assert hits(fixtures_store, "from:ada", sort="relevance") == hits(fixtures_store, "from:ada")

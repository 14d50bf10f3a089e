"""``show``, ``thread`` and ``export`` take what ``search`` prints (issue 36 §2): a
Message-ID bare or in angle brackets, ``id:X``, ``thread:T`` (the thread id of
``--output=threads``, a ghost's id too), several of them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.cli import main

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "fixtures"

# a reply to a message never stored, whose id sorts before the reply's: the
# thread's id (its smallest node id) is the ghost's
ORPHAN = (
    b"From: eve@example.org\r\nSubject: Re: lost\r\nMessage-ID: <zz-reply@example.org>\r\n"
    b"In-Reply-To: <aa-never-stored@example.org>\r\n"
    b"Date: Thu, 27 Jun 2024 10:00:00 +0000\r\n\r\nhello\r\n"
)


def run(capsys: pytest.CaptureFixture[str], store: Path, *argv: str) -> tuple[int, str, str]:
    code = main(["--store", str(store), *argv], env={})
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("ids")
    store = tmp / "store"
    orphan = tmp / "orphan"
    for sub in ("cur", "new", "tmp"):
        (orphan / sub).mkdir(parents=True)
    (orphan / "cur" / "1.M1P1.t:2,S").write_bytes(ORPHAN)
    for argv in (
        ("import", "maildir", str(FIXTURES / "maildir")),
        ("import", "mbox", str(FIXTURES / "lists.mbox")),
        ("import", "maildir", str(orphan)),
    ):
        assert main(["--store", str(store), *argv], env={}) == 0
    return store


def _json(capsys: pytest.CaptureFixture[str], store: Path, *argv: str) -> object:
    code, out, err = run(capsys, store, *argv)
    assert code == 0, err
    return json.loads(out)


def _thread_ids(capsys: pytest.CaptureFixture[str], store: Path, query: str) -> list[str]:
    """What ``search --output=threads`` prints first on each line: ``thread:T``."""
    code, out, _ = run(capsys, store, "search", query, "--output=threads")
    assert code == 0
    return [line.split()[0] for line in out.splitlines()]


# -- show --------------------------------------------------------------------------


def test_show_takes_an_id_bare_in_brackets_or_as_id_colon(
    filled: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, filled, "search", "subject:live", "--output=messages")
    assert code == 0
    first = out.splitlines()[0]
    shown = _json(capsys, filled, "show", first, "--json")
    assert isinstance(shown, dict) and shown["message_id"] == first
    for form in (f"<{first}>", f"id:{first}", f"id:<{first}>", f'id:"{first}"'):
        assert _json(capsys, filled, "show", form, "--json") == shown, form


def test_show_of_several_ids_shows_each_in_turn(
    filled: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, filled, "search", "*", "--format=ids", "--sort=oldest")
    ids = out.split()[:3]
    assert len(ids) == 3
    argv = [f"id:{ids[0]}", ids[1], f"<{ids[2]}>", ids[0]]  # (the repeat: shown once)
    shown = _json(capsys, filled, "show", *argv, "--json")
    assert isinstance(shown, list) and [m["message_id"] for m in shown] == ids
    code, out, err = run(capsys, filled, "show", *argv)
    assert code == 0, err
    headers = [line for line in out.splitlines() if line.startswith("==> ")]
    assert headers == [f"==> <{mid}> <==" for mid in ids]
    chunks = out.split("==> ")[1:]  # (each message's own text follows its line)
    for mid, chunk in zip(ids, chunks, strict=True):
        assert [line for line in chunk.splitlines() if line.startswith("Message-ID:")] == [
            f"Message-ID: <{mid}>"
        ]


def test_show_of_a_thread_shows_each_of_its_messages_oldest_first(
    filled: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for thread in _thread_ids(capsys, filled, "*"):
        members = _json(capsys, filled, "thread", thread.removeprefix("thread:"), "--json")
        shown = _json(capsys, filled, "show", thread, "--json")
        assert isinstance(shown, list)
        assert [m["message_id"] for m in shown] == members, thread


def test_a_ghost_thread_id_names_its_thread_for_show_and_thread(
    filled: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert "thread:aa-never-stored@example.org" in _thread_ids(capsys, filled, "from:eve")
    ghost = "thread:aa-never-stored@example.org"
    assert _json(capsys, filled, "thread", ghost, "--json") == ["zz-reply@example.org"]
    shown = _json(capsys, filled, "show", ghost, "--json")
    assert [m["message_id"] for m in shown] == ["zz-reply@example.org"]  # type: ignore[union-attr]
    code, out, _ = run(capsys, filled, "thread", ghost)
    assert code == 0 and out.splitlines()[0] == "[missing]  <aa-never-stored@example.org>"
    # the ghost is no message: show refuses it bare, as an id
    code, _, err = run(capsys, filled, "show", "aa-never-stored@example.org")
    assert code == 1 and "aa-never-stored@example.org" in err


def test_show_names_each_unknown_id_shows_the_rest_and_exits_1(
    filled: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, filled, "show", "id:nobody@x", "plan-1@example.org", "--json")
    assert code == 1 and "no message 'nobody@x' in the store" in err
    assert [m["message_id"] for m in json.loads(out)] == ["plan-1@example.org"]
    code, _, err = run(capsys, filled, "show", "thread:nobody@x")
    assert code == 1 and "nobody@x" in err


def test_raw_and_part_take_exactly_one_message(
    filled: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for flag in (["--raw"], ["--part", "1"]):
        for ids in (["plan-1@example.org", "plan-2@example.org"], ["thread:plan-1@example.org"]):
            code, out, err = run(capsys, filled, "show", *ids, *flag)
            assert (code, out) == (2, "") and "one message" in err, (flag, ids)
    code, _, err = run(capsys, filled, "show", "id:", "--json")
    assert code == 2 and "needs a Message-ID" in err


def test_raw_of_id_colon_is_the_same_bytes_as_raw_of_the_bare_id(
    filled: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    main(["--store", str(filled), "show", "plan-4@example.pl", "--raw"], env={})
    bare = capsysbinary.readouterr().out
    main(["--store", str(filled), "show", "id:<plan-4@example.pl>", "--raw"], env={})
    assert capsysbinary.readouterr().out == bare and b"Message-ID: <plan-4@example.pl>" in bare


# -- thread ------------------------------------------------------------------------


def test_thread_takes_what_search_prints_and_draws_each_thread_once(
    filled: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    threads = _thread_ids(capsys, filled, "*")
    assert len(threads) > 2
    every = _json(capsys, filled, "thread", *threads, "--json")
    one_by_one = [
        mid
        for t in threads
        for mid in _json(capsys, filled, "thread", t, "--json")  # type: ignore[attr-defined]
    ]
    assert every == one_by_one and len(set(one_by_one)) == len(one_by_one)
    # several ids of one thread: drawn once
    same = ("plan-1@example.org", "id:plan-2@example.org", "<plan-4@example.pl>")
    alone = _json(capsys, filled, "thread", "plan-5@example.org", "--tree-json")
    assert (
        _json(capsys, filled, "thread", *same, "thread:plan-1@example.org", "--tree-json") == alone
    )
    code, out, _ = run(capsys, filled, "thread", "plan-1@example.org", "plan-2@example.org")
    assert code == 0 and out.count("<plan-1@example.org>") == 1


def test_thread_json_of_an_unknown_id_prints_an_empty_array(
    filled: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for flag in ("--json", "--tree-json"):
        code, out, err = run(capsys, filled, "thread", "nobody@nowhere", flag)
        assert (code, json.loads(out)) == (1, []) and "nobody@nowhere" in err
    code, out, err = run(
        capsys, filled, "thread", "thread:nobody@x", "plan-5@example.org", "--json"
    )
    assert code == 1 and "nobody@x" in err
    assert json.loads(out) == _json(capsys, filled, "thread", "plan-5@example.org", "--json")


# -- export ------------------------------------------------------------------------


def test_export_of_several_ids_and_a_thread_writes_each_message_once(
    filled: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    box = tmp_path / "two.mbox"
    code, out, err = run(
        capsys, filled, "export", "id:plan-1@example.org", "id:<plan-4@example.pl>", str(box)
    )
    assert code == 0, err
    assert "exported 2 messages" in out
    text = box.read_bytes()
    assert b"Message-ID: <plan-1@example.org>" in text and b"<plan-4@example.pl>" in text
    members = _json(capsys, filled, "thread", "plan-1@example.org", "--json")
    report = _json(
        capsys,
        filled,
        "export",
        "thread:plan-1@example.org",
        "id:plan-2@example.org",
        str(tmp_path / "thread.mbox"),
        "--json",
    )
    assert report["messages"] == len(members)  # type: ignore[arg-type,index]
    code, _, err = run(capsys, filled, "export", "id:a@x", "id:(", str(tmp_path / "bad.mbox"))
    assert code == 2 and "position" in err and not (tmp_path / "bad.mbox").exists()

"""The small promises of the command line (issue 36 §4): ``-q`` leaves errors only,
``search --limit 0`` counts what matched, a failed import leaves no store behind,
a mistyped table in the config file is an error with a did-you-mean."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.cli import main
from pipeline.sources.maildir import import_maildir
from pipeline.store import MessageStore
from tests.conftest import StepClock

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "fixtures"


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


# -- -q: errors only ------------------------------------------------------------------


def test_quiet_silences_no_messages_match_but_keeps_the_exit_code(
    filled: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, filled, "search", "from:nobody@nowhere")
    assert (code, out) == (0, "") and "no messages match" in err
    code, out, err = run(capsys, filled, "-q", "search", "from:nobody@nowhere", "--exit-on-empty")
    assert (code, out, err) == (1, "", "")
    code, out, err = run(capsys, filled, "search", "from:nobody@nowhere", "-q", "--output=count")
    assert (code, out, err) == (0, "0\n", "")
    code, out, err = run(capsys, filled, "-q", "export", "from:nobody", str(filled.parent / "x"))
    assert code == 0 and err == "" and "exported 0 messages" in out


def test_quiet_silences_the_export_note_and_keeps_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    maildir = tmp_path / "in"
    (maildir / "cur").mkdir(parents=True)
    (maildir / "cur" / "1.msg:2,S").write_bytes(
        b"From: a@example.org\nSubject: s\nMessage-ID: <nl@example.org>\n\nno newline"
    )
    store = tmp_path / "store"
    with MessageStore.open(store, clock=StepClock(), run_id="fill") as s:
        import_maildir(s, maildir)
    code, _, err = run(capsys, store, "export", "*", str(tmp_path / "a.mbox"))
    assert code == 0 and "note: 1 messages did not end in a newline" in err
    code, out, err = run(capsys, store, "-q", "export", "*", str(tmp_path / "b.mbox"))
    assert (code, err) == (0, "") and "exported 1 messages" in out
    # an error still shows under -q
    code, _, err = run(capsys, store, "-q", "export", "*", str(tmp_path / "no" / "c.mbox"))
    assert code == 2 and "no such directory" in err


# -- search --limit 0 ---------------------------------------------------------------


def test_limit_0_says_how_many_messages_match(
    filled: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    live = int(run(capsys, filled, "search", "subject:live", "--output=count")[1])
    assert live > 1
    code, out, err = run(capsys, filled, "search", "subject:live", "--limit", "0")
    assert (code, out) == (0, "")
    said = f"mailledger: {live} messages match 'subject:live' (--limit 0 shows none of them)\n"
    assert err == said
    assert run(capsys, filled, "search", "from:zofia", "--output=count")[1] == "1\n"
    code, out, err = run(capsys, filled, "search", "from:zofia", "--limit=0", "--exit-on-empty")
    assert (code, out) == (0, "") and "1 message match 'from:zofia'" in err
    every = int(run(capsys, filled, "search", "*", "--output=count")[1])
    code, out, err = run(capsys, filled, "search", "*", "--offset=100", "--format=ids")
    assert (code, out) == (0, "") and f"{every} messages match '*' (--offset 100" in err
    code, _, err = run(capsys, filled, "search", "from:nobody", "--limit=0", "--exit-on-empty")
    assert code == 1 and "no messages match" in err
    code, _, err = run(capsys, filled, "-q", "search", "subject:live", "--limit=0")
    assert (code, err) == (0, "")


# -- a failed import leaves no store --------------------------------------------------


@pytest.mark.parametrize("kind", ["mbox", "gdbm", "maildir", "files"])
def test_importing_a_missing_path_exits_2_and_creates_no_store(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    code, _, err = run(capsys, store, "import", kind, str(tmp_path / "absent"))
    assert code == 2 and "absent" in err
    assert not store.exists()


@pytest.mark.parametrize("kind", ["mbox", "gdbm"])
def test_importing_a_file_that_is_not_mail_exits_2_and_creates_no_store(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("shopping list\nmilk\n")
    store = tmp_path / "store"
    code, _, err = run(capsys, store, "import", kind, str(notes))
    assert code == 2 and "notes.txt: not " in err
    assert not store.exists()
    code, _, err = run(capsys, store, "import", kind, str(tmp_path))  # (a directory)
    assert code == 2 and "not a file" in err and not store.exists()


def test_an_empty_mbox_is_an_mbox_of_no_messages(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    box = tmp_path / "empty.mbox"
    box.write_bytes(b"\n\n")
    code, out, _ = run(capsys, tmp_path / "store", "import", "mbox", str(box))
    assert code == 0 and "seen=0 new=0" in out


# -- the config file's tables ---------------------------------------------------------


def test_an_unknown_table_in_the_config_is_a_usage_error_with_a_did_you_mean(
    filled: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.toml"
    config.write_text(f'[stor]\npath = "{filled}"\n')
    code = main(["stats", "--config", str(config)], env={})
    err = capsys.readouterr().err
    assert code == 2
    assert f"{config}: stor: unknown table (did you mean [store]?)" in err
    assert "known tables: [accounts], [store], [metrics], [dispatch]" in err
    code = main(["search", "*", "--config", str(config)], env={})
    assert code == 2 and "did you mean [store]?" in capsys.readouterr().err

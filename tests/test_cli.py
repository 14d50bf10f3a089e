"""The command line: outputs a script can read, and exit codes that tell the outcome."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.cli import default_store_path, main

REPO = Path(__file__).resolve().parents[1]
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


def test_thread_and_find_json_are_arrays_of_ids_without_brackets(
    filled: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, filled, "thread", "<plan-2@example.org>", "--json")
    assert code == 0
    assert json.loads(out) == [
        "plan-1@example.org", "plan-2@example.org", "plan-4@example.pl", "plan-5@example.org",
    ]  # fmt: skip
    code, out, _ = run(capsys, filled, "find", "subject", "LIVE wire: Release plan", "--json")
    assert code == 0 and json.loads(out) == [
        "plan-1@example.org", "plan-2@example.org", "plan-5@example.org",
    ]  # fmt: skip


def test_stats_json_has_the_promised_keys(filled: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, filled, "stats", "--json")
    stats = json.loads(out)
    assert code == 0
    assert {"events", "messages", "threads", "blobs", "bytes"} <= stats.keys()
    assert (stats["events"], stats["messages"], stats["blobs"]) == (9, 9, 9)


def test_show_json_and_raw(filled: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, filled, "show", "plan-4@example.pl", "--json")
    rec = json.loads(out)
    assert code == 0 and rec["from_addr"] == "zofia@example.pl"
    assert rec["subject"] == "Re: Live Wire: release plan — migracja"


def test_query_thread_macro_and_views(filled: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, filled, "query", "select message_id from thread('<plan-1@example.org>')", "--json"
    )
    assert code == 0 and len(json.loads(out)) == 4
    for view in ("events", "messages", "header_index", "thread_edges", "locations", "cursors"):
        code, out, err = run(capsys, filled, "query", f"select count(*) as n from {view}", "--json")
        assert code == 0, err


def test_delete_then_find_misses_and_replay_keeps_it_deleted(
    filled: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, filled, "delete", "<plan-5@example.org>", "--reason", "done")[0] == 0
    assert "plan-5@example.org" not in json.loads(
        run(capsys, filled, "find", "subject", "live wire: release plan", "--json")[1]
    )
    assert run(capsys, filled, "replay")[0] == 0
    assert run(capsys, filled, "show", "plan-5@example.org")[0] == 1
    assert run(capsys, filled, "verify")[0] == 0


def test_usage_errors_exit_2_with_the_reason(
    filled: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, filled, "find", "x-spam-score", "5")
    assert code == 2 and "x-spam-score" in err
    code, _, err = run(capsys, filled, "import", "maildir", str(filled / "no-such-dir"))
    assert code == 2 and "not a directory" in err
    code, _, err = run(capsys, filled, "query", "select * from no_such_table")
    assert code == 2 and "no_such_table" in err
    code, _, err = run(capsys, filled, "frobnicate")
    assert code == 2


def test_missing_message_exits_1(filled: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, filled, "thread", "<nobody@nowhere>")
    assert code == 1 and "nobody@nowhere" in err


def test_verify_fails_with_exit_1_when_a_log_file_is_tampered(
    filled: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    path = sorted((filled / "log").glob("*.parquet"))[0]
    table = pq.read_table(path)
    subject = table.column("subject")
    table = table.set_column(table.column_names.index("subject"), "subject", pc.utf8_upper(subject))
    pq.write_table(table, path)
    code, out, _ = run(capsys, filled, "verify")
    assert code == 1 and path.name in out


def test_store_default_comes_from_env_then_xdg() -> None:
    assert default_store_path({"MAILLEDGER_STORE": "/s"}) == Path("/s")
    assert default_store_path({"XDG_DATA_HOME": "/x"}) == Path("/x/mailledger")
    assert default_store_path({"HOME": "/h"}) == Path("/h/.local/share/mailledger")


def test_installed_command_runs_with_help_examples(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline", "--store", str(tmp_path / "s"), "thread", "--help"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0 and "example:" in proc.stdout

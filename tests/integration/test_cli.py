"""The command line: outputs a script can read, and exit codes that tell the outcome."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pipeline.cli import default_store_path, main
from tests.conftest import stderr_on_a_terminal

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


# --- the command line people expect (issue 13) ---------------------------------------


def _imported_into(store: Path) -> bool:
    return (store / "store.json").is_file() and any((store / "log").glob("*.parquet"))


def test_store_path_in_the_config_file_is_used_relative_to_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "config.toml").write_text('[store]\npath = "mail-store"\n')
    code = main(
        ["import", "maildir", str(FIXTURES / "maildir"), "--config", str(conf / "config.toml")],
        env={"HOME": str(tmp_path)},
    )
    assert code == 0, capsys.readouterr().err
    assert _imported_into(conf / "mail-store")
    assert not (tmp_path / ".local").exists()  # not the default store
    # the default config file ($XDG_CONFIG_HOME/mailledger/config.toml) is read too
    xdg = tmp_path / "xdg" / "mailledger"
    xdg.mkdir(parents=True)
    (xdg / "config.toml").write_text(f'[store]\npath = "{conf / "mail-store"}"\n')
    capsys.readouterr()
    code = main(
        ["find", "subject", "LIVE wire: Release plan", "--json"],
        env={"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "xdg")},
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "plan-1@example.org" in json.loads(out)


@pytest.mark.parametrize(
    ("flag", "env_var", "in_config", "expected"),
    [
        (True, True, True, "flag"),
        (False, True, True, "env"),
        (False, False, True, "config"),
        (False, False, False, "xdg/mailledger"),
    ],
)
def test_store_precedence_flag_then_env_then_config_then_default(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    flag: bool,
    env_var: bool,
    in_config: bool,
    expected: str,
) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[store]\npath = "config"\n' if in_config else "[store]\n")
    env = {"HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path / "xdg")}
    if env_var:
        env["MAILLEDGER_STORE"] = str(tmp_path / "env")
    argv = ["import", "mbox", str(FIXTURES / "lists.mbox"), "--config", str(config)]
    if flag:
        argv[1:1] = ["--store", str(tmp_path / "flag")]
    assert main(argv, env=env) == 0, capsys.readouterr().err
    made = {str(p.parent.relative_to(tmp_path)) for p in tmp_path.rglob("store.json")}
    assert made == {expected}


def test_global_options_are_accepted_after_the_command_too(
    filled: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = main(["--store", str(filled), "find", "subject", "LIVE wire: Release plan"], env={})
    out_before = capsys.readouterr().out
    after = main(["find", "--store", str(filled), "subject", "LIVE wire: Release plan"], env={})
    out_after = capsys.readouterr().out
    assert before == after == 0
    assert out_before == out_after and "plan-1@example.org" in out_after
    # given on both sides, the one after the command wins; neither is reset by a default
    code = main(
        ["--store", str(filled.parent / "nothing"), "stats", "--store", str(filled), "--json"],
        env={},
    )
    assert code == 0 and json.loads(capsys.readouterr().out)["messages"] > 0
    code = main(["--store", str(filled), "-q", "stats", "--json", "--memory", "300MiB"], env={})
    assert code == 0 and json.loads(capsys.readouterr().out)["messages"] > 0


def test_a_bad_config_file_is_a_usage_error_naming_file_and_key(
    filled: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "bad.toml"
    config.write_text("[store]\npath = 7\n")
    code = main(["stats", "--config", str(config)], env={})
    err = capsys.readouterr().err
    assert code == 2 and str(config) in err and "store.path" in err
    code = main(["stats", "--config", str(tmp_path / "absent.toml")], env={})
    assert code == 2 and "absent.toml" in capsys.readouterr().err


def test_reading_commands_import_no_tls_no_mail_parser_and_no_key_suggester(
    filled: Path,
) -> None:
    # a cron job's `stats` pays for every module it imports: TLS (ssl), the
    # email package's parsing policy and the config's "did you mean" helper are
    # for sync, show and a mistyped key only
    probe = (
        "import sys\n"
        "from pipeline.cli import main\n"
        f"code = main(['--store', {str(filled)!r}, 'stats'], env={{}})\n"
        "heavy = ('ssl', 'email.policy', 'email.headerregistry', 'difflib', 'shlex',"
        " 'pipeline.parse')\n"
        "print(code, sorted(m for m in heavy if m in sys.modules))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=False, cwd=REPO
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "0 []"


def test_version_prints_the_package_version_and_exits_0() -> None:
    from importlib.metadata import version

    proc = subprocess.run(
        [sys.executable, "-m", "pipeline", "--version"], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"mailledger {version('mailledger')}\n"


def test_verbose_says_which_store_and_why_quiet_and_default_do_not(
    filled: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.toml"
    config.write_text(f'[store]\npath = "{filled}"\n')
    for flags, shown in ((["-v"], True), ([], False), (["-q"], False)):
        code = main(["stats", "--config", str(config), *flags], env={})
        err = capsys.readouterr().err
        assert code == 0
        assert (f"store {filled} (from [store] path in {config})" in err) is shown, err


def _many_mail(root: Path, n: int) -> Path:
    for sub in ("cur", "new", "tmp"):
        (root / sub).mkdir(parents=True)
    for i in range(n):
        (root / "cur" / f"{i}.host:2,S").write_bytes(
            f"From: a@x.example\nSubject: m{i}\nMessage-ID: <m{i}@x.example>\n\nbody {i}\n".encode()
        )
    return root


def test_progress_shows_on_a_terminal_and_quiet_silences_it(tmp_path: Path) -> None:
    """The verbosity contract: progress is drawn only on a terminal, never under -q."""
    maildir = _many_mail(tmp_path / "mail", 500)
    store = str(tmp_path / "s")

    def import_on_a_terminal(*flags: str) -> tuple[int, bytes]:
        return stderr_on_a_terminal(
            [sys.executable, "-m", "pipeline", *flags, "--store", store,
             "import", "maildir", str(maildir), "--workers", "0"]
        )  # fmt: skip

    code, seen = import_on_a_terminal()
    assert code == 0 and b"import maildir" in seen and b"/500" in seen  # done/total
    code, seen = import_on_a_terminal("-q")
    assert code == 0 and seen == b""


def test_completion_scripts_name_every_command() -> None:
    commands = _commands()
    assert {"import", "sync", "find", "show", "query", "completion", "man"} <= commands
    scripts: dict[str, str] = {}
    for shell in ("bash", "zsh"):
        proc = subprocess.run(
            [sys.executable, "-m", "pipeline", "completion", shell],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        missing = [c for c in commands if c not in proc.stdout]
        assert not missing and "--store" in proc.stdout, (shell, missing)
        scripts[shell] = proc.stdout
    syntax = subprocess.run(
        ["bash", "-n"], input=scripts["bash"], capture_output=True, text=True, check=False
    )
    assert syntax.returncode == 0, syntax.stderr


def _commands() -> set[str]:
    import argparse

    from pipeline.cli import build_parser

    parser = build_parser({})
    [subs] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return set(subs.choices)


def test_man_page_documents_every_command_and_option(tmp_path: Path) -> None:
    import argparse
    import shutil

    from pipeline.cli import build_parser

    proc = subprocess.run(
        [sys.executable, "-m", "pipeline", "man"], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    page = proc.stdout
    assert page.startswith(".TH MAILLEDGER") and ".SH SYNOPSIS" in page
    parser = build_parser({})
    [subs] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for name, sub in subs.choices.items():
        assert f".SH COMMAND \\fI\\,'mailledger {name}'" in page, name
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction):
                continue  # (--help is left out of a man page)
            for flag in action.option_strings:
                assert flag.replace("-", "\\-") in page, (name, flag)
    for flag in ("--version", "--store", "--config", "--debug", "--quiet", "--verbose"):
        assert flag.replace("-", "\\-") in page, flag
    if shutil.which("groff"):  # well-formed roff: no warning from groff's checks
        (tmp_path / "mailledger.1").write_text(page)
        check = subprocess.run(
            ["groff", "-man", "-Tutf8", "-ww", "-z", str(tmp_path / "mailledger.1")],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert check.returncode == 0 and not check.stderr, check.stderr


def test_package_builds_without_deprecation_warnings(tmp_path: Path) -> None:
    """`pip install` of mailledger prints no SetuptoolsDeprecationWarning (the license
    table form was deprecated): a wheel is built from a copy of the sources, verbosely,
    in pip's isolated build environment (setuptools as pyproject.toml requires it)."""
    import shutil

    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    for package in ("stores", "projections", "pipeline"):
        shutil.copytree(REPO / package, src / package, ignore=shutil.ignore_patterns("__pycache__"))
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-v", "-w", str(tmp_path / "dist"),
         str(src)],
        capture_output=True, text=True, check=False, timeout=540,
    )  # fmt: skip
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-3000:]
    assert list((tmp_path / "dist").glob("mailledger-*.whl"))
    warned = [line for line in output.splitlines() if "deprecat" in line.lower()]
    assert not warned, "\n".join(warned)


def _imap_config(tmp_path: Path, dovecot: Any, extra: str = "", **account: object) -> Path:
    config = tmp_path / "config.toml"
    config.write_text(dovecot.account_toml("fastmail", **account) + extra)
    return config


def _delivered(user: Any, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        user.save(
            "INBOX",
            f"From: a@x.example\r\nSubject: s{i}\r\nMessage-ID: <d{i}@x.example>\r\n\r\nhi\r\n"
            .encode(),
        )  # fmt: skip


def test_sync_stores_where_the_config_file_says(
    imap_user: Callable[[str], Any], dovecot: Any, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    _delivered(imap_user("fastmail"), 2)
    config = _imap_config(tmp_path, dovecot, '[store]\npath = "synced"\n', folders=["INBOX"])
    env = {**dovecot.password_env(), "HOME": str(tmp_path)}
    code = main(["sync", "--apply", "--config", str(config), "-v"], env=env)
    err = capsys.readouterr().err
    assert code == 0, err
    assert f"store {tmp_path.resolve() / 'synced'}" in err  # -v says where it went
    assert _imported_into(tmp_path / "synced")
    assert not (tmp_path / ".local").exists()  # not the default store


def test_debug_shows_the_imap_conversation_and_never_the_password(
    imap_user: Callable[[str], Any], dovecot: Any, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    user = imap_user("fastmail")
    _delivered(user, 2)
    config = _imap_config(tmp_path, dovecot, folders=["INBOX"])
    env = {**dovecot.password_env(), "HOME": str(tmp_path)}
    store = str(tmp_path / "store")
    code = main(["sync", "--apply", "--config", str(config), "--store", store, "--debug"], env=env)
    out, err = capsys.readouterr()
    assert code == 0, err
    assert user.password == "pw-fastmail"
    assert user.password not in out + err
    # the conversation, client and server: the login (masked), the folder, the bodies
    assert "LOGIN **REDACTED**" in err
    assert "EXAMINE" in err and "FETCH" in err and "OK" in err
    # without --debug (and with -v): no conversation
    _delivered(user, 1, start=10)
    code = main(["sync", "--apply", "--config", str(config), "--store", store, "-v"], env=env)
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "EXAMINE" not in err and "LOGIN" not in err and user.password not in out + err


def test_quiet_sync_prints_only_errors_and_keeps_the_exit_code(
    imap_user: Callable[[str], Any], dovecot: Any, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    _delivered(imap_user("fastmail"), 1)
    env = {**dovecot.password_env(), "HOME": str(tmp_path)}
    store = str(tmp_path / "store")
    good = _imap_config(tmp_path, dovecot, folders=["INBOX"])
    assert main(["-q", "sync", "--apply", "--config", str(good), "--store", store], env=env) == 0
    out, err = capsys.readouterr()
    assert (out, err) == ("", "")
    assert main(["sync", "--apply", "--config", str(good), "--store", store], env=env) == 0
    assert "INBOX" in capsys.readouterr().out  # (the folder lines, without -q)
    bad = _imap_config(tmp_path, dovecot, folders=["INBOX", "No such folder"])
    code = main(["sync", "-q", "--apply", "--config", str(bad), "--store", store], env=env)
    out, err = capsys.readouterr()
    assert code == 1
    lines = (out + err).splitlines()
    assert lines and all(line.startswith(("error", "sync ")) for line in lines), lines
    assert any("No such folder" in line for line in lines)


def test_debug_shows_the_workers_imap_conversation_too_without_the_password(
    imap_user: Callable[[str], Any], dovecot: Any, tmp_path: Path
) -> None:
    """A large folder is fetched by worker processes on their own connections: their
    conversation is logged under --debug as well, masked the same way."""
    user = imap_user("fastmail")
    many = 450  # above pipeline.sync.fetch.WORKER_FETCH_MIN: the workers fetch
    user.bulk_maildir(
        "INBOX",
        [
            f"Subject: b{i}\r\nMessage-ID: <b{i}@x.example>\r\n\r\nhi\r\n".encode()
            for i in range(many)
        ],
    )
    config = _imap_config(tmp_path, dovecot, folders=["INBOX"])
    argv = [sys.executable, "-m", "pipeline", "--debug", "sync", "--apply", "--workers", "2"]
    proc = subprocess.run(
        [*argv, "--config", str(config), "--store", str(tmp_path / "store")],
        capture_output=True, text=True, check=False, timeout=300,
        env={**dovecot.password_env(), "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert user.password not in proc.stdout + proc.stderr
    logins = [line for line in proc.stderr.splitlines() if "LOGIN **REDACTED**" in line]
    pids = {line.split()[2] for line in logins}  # "date time pid name LEVEL: message"
    assert len(pids) >= 2, logins  # the syncing process and at least one worker

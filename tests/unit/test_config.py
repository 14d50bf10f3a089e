"""The config file: read once into typed objects; every mistake named by file and key;
secrets from the environment or a command, never shown."""

from __future__ import annotations

import subprocess
import textwrap
from dataclasses import replace
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from pipeline.config import (
    Account,
    InitialMode,
    default_config_path,
    is_loopback,
    load_config,
    load_store_settings,
    resolve_secret,
    tls_context,
)
from stores.errors import ConfigError

MINIMAL = """
[accounts.fastmail]
type = "imap"
host = "imap.fastmail.com"
username = "me@fastmail.com"
password_env = "MAIL_FASTMAIL_PASSWORD"
"""


def write(tmp_path: Path, text: str, name: str = "config.toml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def config_error(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> str:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path, env or {})
    return str(info.value)


# --- a good file ---------------------------------------------------------------------


def test_minimal_imap_account_gets_the_defaults(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, MINIMAL), {})
    a = config.accounts["fastmail"]
    assert (a.type, a.host, a.port, a.tls, a.insecure, a.ca_file) == (
        "imap",
        "imap.fastmail.com",
        993,
        "implicit",
        False,
        None,
    )
    assert (a.username, a.password_env, a.password_command, a.auth) == (
        "me@fastmail.com",
        "MAIL_FASTMAIL_PASSWORD",
        None,
        "password",
    )
    assert a.folders == ("*",)
    assert a.exclude == ("\\Junk", "\\Trash", "\\Drafts")
    assert a.initial == InitialMode("full") and a.delete_after == "never"
    assert (config.store_path, config.metrics_file, config.dispatch) == (None, None, {})


def test_the_documented_example_parses(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("not checked here")
    config = load_config(
        write(
            tmp_path,
            f"""
        [accounts.fastmail]
        type = "imap"
        host = "imap.fastmail.com"
        port = 993
        tls = "implicit"
        insecure = false
        ca_file = "{ca}"
        username = "me@fastmail.com"
        password_env = "MAIL_FASTMAIL_PASSWORD"
        auth = "password"
        folders = ["INBOX", "\\\\Archive", "\\\\Sent"]
        exclude = []
        initial = "since:2026-06-01"
        delete_after = "never"
        [accounts.home]
        type = "pop3"
        host = "pop.example.net"
        tls = "starttls"
        username = "me"
        password_command = "pass show home"
        auth = "xoauth2"
        delete_after = "stored"
        [store]
        path = "/var/lib/mailledger"
        [metrics]
        file = "/var/lib/node-exporter/mailledger.prom"
        [dispatch]
        "bugs@example.org" = "handlers.bugs"
        [dispatch.options]
        retries = 3
    """,
        ),
        {},
    )
    fm, home = config.accounts["fastmail"], config.accounts["home"]
    assert fm.folders == ("INBOX", "\\Archive", "\\Sent") and fm.exclude == ()
    assert fm.ca_file == ca
    assert fm.initial == InitialMode("since", date(2026, 6, 1))
    assert str(fm.initial) == "since:2026-06-01"
    assert (home.type, home.port, home.tls, home.auth, home.delete_after) == (
        "pop3",
        110,
        "starttls",
        "xoauth2",
        "stored",
    )
    assert (home.folders, home.exclude) == (("INBOX",), ())
    assert home.password_command == "pass show home"
    assert config.store_path == Path("/var/lib/mailledger")
    assert config.metrics_file == Path("/var/lib/node-exporter/mailledger.prom")
    assert config.dispatch == {"bugs@example.org": "handlers.bugs", "options": {"retries": 3}}


@pytest.mark.parametrize(
    ("type_", "tls", "port"),
    [
        ("imap", "implicit", 993),
        ("imap", "starttls", 143),
        ("imap", "none", 143),
        ("pop3", "implicit", 995),
        ("pop3", "starttls", 110),
        ("pop3", "none", 110),
    ],
)
def test_default_port_follows_type_and_tls(tmp_path: Path, type_: str, tls: str, port: int) -> None:
    config = load_config(
        write(
            tmp_path,
            f"""
        [accounts.a]
        type = "{type_}"
        host = "localhost"
        tls = "{tls}"
        username = "u"
        password_env = "P"
    """,
        ),
        {},
    )
    assert config.accounts["a"].port == port


def test_special_use_names_are_canonical_and_asked_for_ones_are_not_excluded(
    tmp_path: Path,
) -> None:
    config = load_config(
        write(tmp_path, MINIMAL + """folders = ['\\all', 'INBOX', '\\TRASH']\n"""), {}
    )
    a = config.accounts["fastmail"]
    assert a.folders == ("\\All", "INBOX", "\\Trash")
    assert a.exclude == ("\\Junk", "\\Drafts")


def test_new_only_initial_mode(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, MINIMAL + 'initial = "new-only"\n'), {})
    assert config.accounts["fastmail"].initial == InitialMode("new-only")


def test_paths_expand_home_and_are_relative_to_the_file(tmp_path: Path) -> None:
    (tmp_path / "certs").mkdir()
    (tmp_path / "certs/ca.pem").write_text("x")
    config = load_config(
        write(
            tmp_path,
            MINIMAL
            + """ca_file = "certs/ca.pem"
        [store]
        path = "~/mail"
        [metrics]
        file = "metrics/mailledger.prom"
    """,
        ),
        {"HOME": "/home/someone"},
    )
    assert config.accounts["fastmail"].ca_file == tmp_path.resolve() / "certs/ca.pem"
    assert config.store_path == Path("/home/someone/mail")
    assert config.metrics_file == tmp_path.resolve() / "metrics/mailledger.prom"


def test_mailledger_store_overrides_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL + '[store]\npath = "/from/file"\n')
    assert load_config(path, {}).store_path == Path("/from/file")
    assert load_config(path, {"MAILLEDGER_STORE": "/from/env"}).store_path == Path("/from/env")


# --- the [store] table alone, for commands that only open a store ---------------------


def test_store_settings_read_a_file_without_accounts_relative_to_the_file(
    tmp_path: Path,
) -> None:
    path = write(tmp_path, '[store]\npath = "mail/store"\nmemory = "300MiB"\n')
    settings = load_store_settings(path, {})
    assert settings.path == tmp_path.resolve() / "mail/store"
    assert settings.memory == 300 * 2**20
    assert settings.config_file == path
    assert load_store_settings(path, {"MAILLEDGER_STORE": "/env"}).path == Path("/env")
    assert load_store_settings(write(tmp_path, "", "empty.toml"), {}).path is None
    # accounts are not checked here (sync checks them), the [store] table is
    full = write(tmp_path, MINIMAL + '[store]\npath = "~/m"\n', "full.toml")
    assert load_store_settings(full, {"HOME": "/h"}).path == Path("/h/m")


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("[store]\npath = 5\n", "store.path"),
        ('[store]\npaht = "/x"\n', "store.paht"),
        ('[store]\nmemory = "lots"\n', "store.memory"),
        ('store = "/x"\n', "store"),
    ],
)
def test_store_settings_name_the_file_and_key_of_a_mistake(
    tmp_path: Path, text: str, key: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_store_settings(path, {})
    assert f"{path}: {key}:" in str(info.value)


def test_default_config_path() -> None:
    assert default_config_path({"XDG_CONFIG_HOME": "/x"}) == Path("/x/mailledger/config.toml")
    assert default_config_path({"HOME": "/h"}) == Path("/h/.config/mailledger/config.toml")


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("localhost", True),
        ("LOCALHOST", True),
        ("127.0.0.1", True),
        ("127.9.8.7", True),
        ("::1", True),
        ("128.0.0.1", False),
        ("localhost.example.com", False),
        ("imap.example.com", False),
        ("::2", False),
    ],
)
def test_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


@pytest.mark.parametrize("host", ["localhost", "127.0.0.2", "::1"])
def test_plaintext_to_loopback_is_allowed(tmp_path: Path, host: str) -> None:
    config = load_config(
        write(
            tmp_path,
            f"""
        [accounts.local]
        type = "imap"
        host = "{host}"
        tls = "none"
        username = "u"
        password_env = "P"
    """,
        ),
        {},
    )
    assert config.accounts["local"].tls == "none"
    assert tls_context(config.accounts["local"]) is None


def test_plaintext_elsewhere_needs_insecure(tmp_path: Path) -> None:
    text = MINIMAL + 'tls = "none"\n'
    message = config_error(tmp_path, text)
    assert "config.toml: accounts.fastmail.tls:" in message
    assert "insecure" in message
    config = load_config(write(tmp_path, text + "insecure = true\n"), {})
    assert config.accounts["fastmail"].tls == "none"


# --- every mistake names the file and the key -------------------------------------------


def test_port_error_reads_like_the_documented_example(tmp_path: Path) -> None:
    message = config_error(tmp_path, MINIMAL + 'port = "x"\n')
    assert message.endswith(
        'config.toml: accounts.fastmail.port: must be an integer 1-65535, got "x"'
    )


@pytest.mark.parametrize(
    ("addition", "key"),
    [
        ("port = 0\n", "accounts.fastmail.port"),
        ("port = 70000\n", "accounts.fastmail.port"),
        ("port = true\n", "accounts.fastmail.port"),
        ('tls = "ssl"\n', "accounts.fastmail.tls"),
        ('auth = "oauth"\n', "accounts.fastmail.auth"),
        ('insecure = "yes"\n', "accounts.fastmail.insecure"),
        ('initial = "sometimes"\n', "accounts.fastmail.initial"),
        ('initial = "since:yesterday"\n', "accounts.fastmail.initial"),
        ('initial = "since:2026-13-01"\n', "accounts.fastmail.initial"),
        ('folders = "INBOX"\n', "accounts.fastmail.folders"),
        ('folders = ["\\\\Sentt"]\n', "accounts.fastmail.folders"),
        ("exclude = [1]\n", "accounts.fastmail.exclude"),
        ('delete_after = "stored"\n', "accounts.fastmail.delete_after"),
        ('ca_file = "/nonexistent/ca.pem"\n', "accounts.fastmail.ca_file"),
        ('hots = "typo"\n', "accounts.fastmail.hots"),
        ('password_command = "pass show x"\n', "accounts.fastmail.password_env"),
        ('[accounts.other]\nhost = "h"\n', "accounts.other.type"),
        ("[store]\npath = 5\n", "store.path"),
        ('[store]\ndir = "/x"\n', "store.dir"),
        ('[metrics]\nfile = ""\n', "metrics.file"),
        ("[dispatch]\n[sync]\nx = 1\n", "sync"),
    ],
)
def test_bad_value_names_file_and_key(tmp_path: Path, addition: str, key: str) -> None:
    message = config_error(tmp_path, MINIMAL + addition)
    assert f"config.toml: {key}:" in message


@pytest.mark.parametrize(
    ("text", "key"),
    [
        (MINIMAL.replace('"imap"', '"smtp"'), "accounts.fastmail.type"),
        (MINIMAL.replace('host = "imap.fastmail.com"\n', ""), "accounts.fastmail.host"),
        (MINIMAL.replace('host = "imap.fastmail.com"', 'host = ""'), "accounts.fastmail.host"),
        (MINIMAL.replace('username = "me@fastmail.com"\n', ""), "accounts.fastmail.username"),
        (
            MINIMAL.replace('password_env = "MAIL_FASTMAIL_PASSWORD"\n', ""),
            "accounts.fastmail.password_env",
        ),
        (
            MINIMAL.replace('"MAIL_FASTMAIL_PASSWORD"', '"not a name"'),
            "accounts.fastmail.password_env",
        ),
        ("[accounts]\n", "accounts"),
        ('[store]\npath = "/x"\n', "accounts"),
        ('accounts = "fastmail"\n', "accounts"),
        (MINIMAL.replace("[accounts.fastmail]", '[accounts."fast mail"]'), "accounts.fast mail"),
        (
            MINIMAL.replace('type = "imap"', 'type = "pop3"') + 'folders = ["INBOX"]\n',
            "accounts.fastmail.folders",
        ),
        (
            MINIMAL.replace('type = "imap"', 'type = "pop3"') + 'initial = "since:2026-01-01"\n',
            "accounts.fastmail.initial",
        ),
    ],
)
def test_missing_or_wrong_account_fields_name_the_key(tmp_path: Path, text: str, key: str) -> None:
    assert f"config.toml: {key}:" in config_error(tmp_path, text)


def test_unknown_key_suggests_the_known_one(tmp_path: Path) -> None:
    message = config_error(tmp_path, MINIMAL + 'pasword_env = "X"\n')
    assert "accounts.fastmail.pasword_env: unknown key (did you mean password_env?)" in message


def test_a_password_in_the_file_is_refused_without_echoing_it(tmp_path: Path) -> None:
    message = config_error(tmp_path, MINIMAL + 'password = "hunter2"\n')
    assert "accounts.fastmail.password:" in message
    assert "hunter2" not in message


def test_both_password_sources_is_an_error(tmp_path: Path) -> None:
    message = config_error(tmp_path, MINIMAL + 'password_command = "echo hunter2"\n')
    assert (
        "config.toml: accounts.fastmail.password_env: set password_env or password_command, "
        "not both" in message
    )
    assert "hunter2" not in message


def test_all_problems_are_reported_at_once(tmp_path: Path) -> None:
    message = config_error(tmp_path, MINIMAL + 'port = "x"\ntls = "ssl"\n[metrics]\nfle = "x"\n')
    lines = message.splitlines()
    assert len(lines) == 3
    assert all(line.startswith(f"{tmp_path / 'config.toml'}: ") for line in lines)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"config\.toml: no such file"):
        load_config(tmp_path / "config.toml", {})


def test_toml_syntax_error_gives_the_line(tmp_path: Path) -> None:
    message = config_error(tmp_path, MINIMAL + "port = \n")
    assert "config.toml: TOML syntax error" in message
    assert "line 7" in message


def test_backslash_in_a_basic_string_gets_a_hint(tmp_path: Path) -> None:
    message = config_error(tmp_path, MINIMAL + 'folders = ["\\Archive"]\n')
    assert "config.toml: TOML syntax error" in message and "\\\\All" in message


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_bytes(MINIMAL.encode() + b"# caf\xe9\n")
    with pytest.raises(ConfigError, match=r"config\.toml: not UTF-8"):
        load_config(path, {})


# --- secrets -------------------------------------------------------------------------


def account(tmp_path: Path, **changes: Any) -> Account:
    base = load_config(write(tmp_path, MINIMAL), {}).accounts["fastmail"]
    return replace(base, **changes)


def test_secret_from_the_environment(tmp_path: Path) -> None:
    a = account(tmp_path)
    assert resolve_secret(a, {"MAIL_FASTMAIL_PASSWORD": "s3cret"}) == "s3cret"


@pytest.mark.parametrize("env", [{}, {"MAIL_FASTMAIL_PASSWORD": ""}])
def test_missing_or_empty_variable_names_the_variable(tmp_path: Path, env: dict[str, str]) -> None:
    with pytest.raises(ConfigError) as info:
        resolve_secret(account(tmp_path), env)
    message = str(info.value)
    assert "MAIL_FASTMAIL_PASSWORD" in message
    assert "config.toml: accounts.fastmail.password_env" in message


def test_multiline_variable_is_refused_without_showing_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        resolve_secret(account(tmp_path), {"MAIL_FASTMAIL_PASSWORD": "line1\nline2"})
    assert "line1" not in str(info.value) and "line2" not in str(info.value)


def test_secret_from_a_command(tmp_path: Path) -> None:
    a = account(tmp_path, password_env=None, password_command="printf secret")
    assert resolve_secret(a, {}) == "secret"


def test_command_output_loses_one_trailing_newline(tmp_path: Path) -> None:
    a = account(tmp_path, password_env=None, password_command="printf 's3cr3t\\n'")
    assert resolve_secret(a, {}) == "s3cr3t"
    two = account(tmp_path, password_env=None, password_command="printf 's3cr3t\\n\\n'")
    with pytest.raises(ConfigError, match="more than one line") as info:
        resolve_secret(two, {})
    assert "s3cr3t" not in str(info.value)


def test_command_runs_without_a_shell(tmp_path: Path) -> None:
    seen: dict[str, Any] = {}

    def fake_run(argv: list[str], **kw: Any) -> subprocess.CompletedProcess[bytes]:
        seen["argv"], seen["kw"] = argv, kw
        return subprocess.CompletedProcess(argv, 0, b"tok\n")

    a = account(
        tmp_path, password_env=None, password_command='pass show "mail/my account" ; rm -rf /'
    )
    assert resolve_secret(a, {}, run=fake_run) == "tok"
    assert seen["argv"] == ["pass", "show", "mail/my account", ";", "rm", "-rf", "/"]
    assert not seen["kw"].get("shell")


@pytest.mark.parametrize(
    "command",
    [
        "sh -c 'printf leaked-secret; exit 3'",  # fails after printing
        "sh -c 'printf leaked-secret >&2; exit 1'",
        "true",  # prints nothing
        "/nonexistent/secret-tool leaked-secret",
    ],
)
def test_failing_command_names_the_account_not_the_output(tmp_path: Path, command: str) -> None:
    a = account(tmp_path, password_env=None, password_command=command)
    with pytest.raises(ConfigError) as info:
        resolve_secret(a, {})
    message = str(info.value)
    assert "accounts.fastmail.password_command" in message
    assert "leaked-secret" not in message


def test_repr_never_shows_a_secret(tmp_path: Path) -> None:
    config = load_config(
        write(
            tmp_path,
            """
        [accounts.a]
        type = "imap"
        host = "imap.example.com"
        username = "u"
        password_command = "printf hunter2"
    """,
        ),
        {"MAIL_X": "hunter3"},
    )
    a = config.accounts["a"]
    secret = resolve_secret(a, {})
    assert secret == "hunter2"
    assert "hunter2" not in repr(a) and "hunter2" not in repr(config)
    assert "printf" not in repr(a)

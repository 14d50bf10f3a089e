"""Secrets campaign: passwords and tokens never leave the process that needs them.

A real Dovecot on loopback and four accounts: a password from the environment
(``password_env``), a strong random password from a command
(``password_command``), an XOAUTH2 token from a command (Dovecot refuses
XOAUTH2 here: the error path is exercised), and a wrong password (another
error path). The runs: ``sync --apply --json --metrics-file``, a dry run,
``--measure``, a ``--watch`` sync that keeps running while its process
arguments are read, and a config file that (wrongly) holds a password inline.

Searched for every secret, as is and base64-encoded (alone and inside the
SASL PLAIN / XOAUTH2 strings a client sends): every byte of output (stdout and
stderr: the log lines), the ``--json`` reports, the metrics textfile, the
whole store directory (raw and decoded: blobs, Parquet, DuckDB tables) and
``/proc/PID/cmdline`` of every process of a running sync, sampled while it
runs. Never found.

Permissions: after sync, import, delete, compact --purge, replay and verify,
run under a umask of 000 so that the modes come from the code, every
directory of the store is 0700 and every file 0600.
"""

from __future__ import annotations

import base64
import contextlib
import os
import random
import signal
import stat
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from torture import (
    Result,
    cli_argv,
    cli_main,
    dovecot_server,
    group_pids,
    kill_group,
    run_cli,
    search_store,
    spawn_cli,
)

__all__ = ["FULL_TRIALS", "QUICK_TRIALS", "SEED", "main"]

FULL_TRIALS = 10
QUICK_TRIALS = 1
SEED = 77


class Exposed(AssertionError):
    pass


def _require(cond: bool, what: str) -> None:
    if not cond:
        raise Exposed(what)


def _b64(data: bytes) -> bytes:
    return base64.b64encode(data)


def _needles(secrets: dict[str, str], users: dict[str, str]) -> dict[str, bytes]:
    """Each secret as is and in the encodings a client puts on the wire."""
    out: dict[str, bytes] = {}
    for name, value in secrets.items():
        v = value.encode()
        out[name] = v
        out[f"{name} (base64)"] = _b64(v)
        user = users[name].encode()
        out[f"{name} (SASL PLAIN)"] = _b64(b"\0" + user + b"\0" + v)
        out[f"{name} (XOAUTH2)"] = _b64(b"user=" + user + b"\x01auth=Bearer " + v + b"\x01\x01")
    return out


class Setup:
    def __init__(self, work: Path, dv: Any, rng: random.Random) -> None:
        self.work = work
        self.dv = dv
        strong = "S3cr3t-" + rng.randbytes(16).hex()
        token = "ya29." + rng.randbytes(24).hex()
        wrong = "Wr0ng-" + rng.randbytes(16).hex()
        self.secrets = {
            "env password": "pw-fastmail",
            "command password": strong,
            "oauth token": token,
            "wrong password": wrong,
        }
        users = {
            "env password": "fastmail",
            "command password": "gmail",
            "oauth token": "plain",
            "wrong password": "plain",
        }
        self.needles = _needles(self.secrets, users)
        for user in ("fastmail", "gmail", "plain"):
            dv.reset_user(user)
            for i in range(3):
                dv.save(user, "INBOX", (
                    f"From: a{i}@secrets.example\r\nTo: {user}@secrets.example\r\n"
                    f"Subject: note {i}\r\nMessage-ID: <{user}-{i}@secrets.example>\r\n\r\n"
                    f"hello {i}\r\n"
                ).encode())  # fmt: skip
        # a strong password for the gmail user, once its mail is in (the harness logs
        # in with the old one); Dovecot's passwd-file reloads when the file changes
        passwd = dv.dir / "etc" / "passwd"
        passwd.write_text(passwd.read_text().replace("{PLAIN}pw-gmail:", f"{{PLAIN}}{strong}:"))
        secret_file = work / "gmail.secret"
        secret_file.write_text(strong + "\n")
        secret_file.chmod(0o600)
        token_file = work / "token.secret"
        token_file.write_text(token + "\n")
        token_file.chmod(0o600)
        self.config = work / "config.toml"
        self.config.write_text(
            dv.account_toml("fastmail", name="envacct", folders=["INBOX"])
            + dv.account_toml("gmail", name="cmdacct", folders=["INBOX"]).replace(
                'password_env = "MAILLEDGER_TEST_GMAIL_PASSWORD"',
                f'password_command = "cat {secret_file}"',
            )
            + dv.account_toml("plain", name="tokenacct", folders=["INBOX"], auth="xoauth2").replace(
                'password_env = "MAILLEDGER_TEST_PLAIN_PASSWORD"',
                f'password_command = "cat {token_file}"',
            )
            + dv.account_toml("plain", name="wrongacct", folders=["INBOX"]).replace(
                "MAILLEDGER_TEST_PLAIN_PASSWORD", "MAILLEDGER_TORTURE_WRONG"
            )
        )
        self.env = {**dv.password_env(), "MAILLEDGER_TORTURE_WRONG": wrong}
        self.bad_config = work / "bad.toml"
        self.bad_config.write_text(
            dv.account_toml("gmail", name="inline").replace(
                'password_env = "MAILLEDGER_TEST_GMAIL_PASSWORD"', f'password = "{strong}"'
            )
        )


def _umask0() -> None:
    os.umask(0)


def _private(store: Path) -> list[str]:
    """Every directory of ``store`` not 0700 and file not 0600."""
    bad = []
    for path in [store, *store.rglob("*")]:
        mode = stat.S_IMODE(path.lstat().st_mode)
        want = 0o700 if path.is_dir() else 0o600
        if mode != want:
            bad.append(f"{path.relative_to(store.parent)} {oct(mode)}")
    return bad


def _trial(s: Setup, n: int, rng: random.Random) -> dict[str, int]:
    work = s.work / f"trial-{n}"
    work.mkdir()
    store = work / "store"
    metrics = work / "metrics.prom"
    outputs: list[Path] = []
    cmdlines: list[str] = []

    def run(*args: str, config: Path | None = None, want: tuple[int, ...] = (0, 1, 2, 3)) -> str:
        out = work / f"out-{len(outputs)}.txt"
        outputs.append(out)
        argv = cli_argv(store, *args)
        if config is not None:
            argv += ["--config", str(config)]
        code, text = run_cli(argv, out, env=s.env)
        _require(code in want, f"mailledger {' '.join(args)}: exit {code}: {text[-400:]}")
        _require("Traceback" not in text, f"a traceback: {text[-600:]}")
        return text

    # the runs, in a random order (the store exists only after --apply)
    runs = [
        ("sync", "--json"),
        ("sync", "--measure", "--json"),
        ("sync", "--apply", "--json", "--metrics-file", str(metrics)),
    ]
    rng.shuffle(runs)
    for args in runs:
        run(*args, config=s.config, want=(1,))  # two accounts fail: exit 1
    run("sync", "--apply", "--json", "--metrics-file", str(metrics), config=s.config, want=(1,))
    run("sync", config=s.bad_config, want=(2,))  # a password inline: refused, not echoed

    # a running sync: its arguments (and its helpers') read from /proc while it runs
    out = work / "watch.txt"
    outputs.append(out)
    argv = [*cli_argv(store, "sync", "--apply", "--watch", "--interval", "1s"),
            "--config", str(s.config)]  # fmt: skip
    proc = spawn_cli(argv, out, env=s.env)
    try:
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline and proc.poll() is None:
            for pid in group_pids(proc.pid):
                with contextlib.suppress(OSError):
                    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                    cmdlines.append(cmdline.replace(b"\0", b" ").decode(errors="replace"))
            time.sleep(0.01)
        _require(proc.poll() is None, f"the watching sync ended early: {out.read_text()[-400:]}")
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    finally:
        kill_group(proc)
    _require(len(cmdlines) > 10, "too few samples of the running sync's arguments")

    # every command that writes the store, under umask 000: the modes come from the code
    src = work / "maildir"
    for d in ("cur", "new", "tmp"):
        (src / d).mkdir(parents=True)
    (src / "cur" / "1.M1P1.s:2,S").write_bytes(
        b"From: x@secrets.example\r\nSubject: local\r\n"
        b"Message-ID: <local@secrets.example>\r\n\r\nx\r\n"
    )
    for args in (
        ("import", "maildir", str(src)),
        ("delete", "<local@secrets.example>"),
        ("compact", "--purge"),
        ("replay",),
        ("verify",),
        ("stats", "--json"),
    ):
        o = work / f"out-{len(outputs)}.txt"
        outputs.append(o)
        code, text = run_cli(cli_argv(store, *args), o, env=s.env, preexec=_umask0)
        _require(code == 0, f"mailledger {' '.join(args)}: exit {code}: {text[-300:]}")
    bad = _private(store)
    _require(not bad, f"not private: {bad[:8]}")

    # the search
    found: dict[str, list[str]] = {}
    for path in [*outputs, metrics]:
        data = path.read_bytes()
        for name, needle in s.needles.items():
            if needle in data:
                found.setdefault(name, []).append(path.name)
    for line in cmdlines:
        for name, needle in s.needles.items():
            if needle.decode() in line:
                found.setdefault(name, []).append(f"cmdline {line!r}")
    for name, places in search_store(store, s.needles).items():
        if places:
            found.setdefault(name, []).extend(places)
    _require(not found, f"a secret was found: {found}")

    # the runs did what they should: two accounts synced (3 + 3 messages; the local one
    # was deleted and purged), two failed without a word of their secret
    synced = run("stats", "--json")
    _require('"messages": 6' in synced, f"the two good accounts did not sync: {synced[-300:]}")
    return {
        "outputs": len(outputs) + 1,
        "cmdline_samples": len(cmdlines),
        "needles": len(s.needles),
        "bytes_searched": sum(p.stat().st_size for p in [*outputs, metrics]),
    }


def main(trials: int = FULL_TRIALS, seed: int = SEED, workdir: Path | None = None) -> Result:
    """Run ``trials`` rounds of every run above; print the figures."""
    result = Result("secrets")
    t0 = time.monotonic()
    rng = random.Random(seed)
    totals: dict[str, int] = {}
    with (
        tempfile.TemporaryDirectory(prefix="mailledger-secrets-", dir=workdir) as tmp,
        dovecot_server() as dv,
    ):
        if dv is None:
            result.fail("dovecot is not installed: the secrets campaign needs it")
            return result
        setup = Setup(Path(tmp), dv, random.Random(rng.randrange(1 << 30)))
        for n in range(trials):
            result.trials += 1
            try:
                got = _trial(setup, n, random.Random(rng.randrange(1 << 30)))
            except Exposed as exc:
                result.fail(f"trial {n}: {exc}")
                continue
            except Exception as exc:
                result.fail(f"trial {n}: {type(exc).__name__}: {exc}")
                continue
            for k, v in got.items():
                totals[k] = totals.get(k, 0) + v
            print(f"secrets trial {n}: {got}", flush=True)
    result.figures = {**totals, "secrets": 4, "accounts": 4}
    print(
        f"secrets trials={result.trials} outputs={totals.get('outputs', 0)}"
        f" cmdline-samples={totals.get('cmdline_samples', 0)}"
        f" needles={len(setup.needles)} failures={len(result.failures)}",
        flush=True,
    )
    result.seconds = time.monotonic() - t0
    return result


if __name__ == "__main__":
    cli_main(main, FULL_TRIALS, SEED)
    sys.exit(0)

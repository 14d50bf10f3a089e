"""The IMAP half of `make demo`: a real Dovecot on loopback, seeded with the
bundled fixture mail, synced twice by `mailledger sync`, then asked things.

Uses the project's own test harness (testkit/dovecot.py); needs the Debian
packages dovecot-imapd and openssl (scripts/demo.sh installs them when root).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from pipeline.sources.maildir import iter_maildir
from pipeline.sources.mbox import iter_mbox
from testkit.dovecot import Dovecot, find_dovecot

REPO = Path(__file__).resolve().parents[1]


def ml(store: Path, env: dict[str, str], *args: str) -> int:
    print(f"$ mailledger {' '.join(args)}", file=sys.stderr, flush=True)
    code = subprocess.run(
        [sys.executable, "-m", "pipeline", "--store", str(store), *args], env=env, check=False
    ).returncode
    print(f"(exit {code})\n", file=sys.stderr, flush=True)
    return code


def main() -> int:
    if find_dovecot() is None:
        print(
            "demo: dovecot is not installed; skipping the IMAP part "
            "(apt-get install -y dovecot-imapd dovecot-pop3d openssl)",
            file=sys.stderr,
        )
        return 0
    store = Path(sys.argv[1]).resolve()
    dv = Dovecot(rawlog=False)
    dv.start()
    try:
        # gmail's \All holds everything (Polish UI: [Gmail]/Wszystkie); fastmail has the
        # planning thread in INBOX and the list mail in Archive: the same messages in
        # two accounts cost an envelope, not a second body.
        for _, _, path in iter_maildir(REPO / "fixtures" / "maildir"):
            raw = path.read_bytes().replace(b"\n", b"\r\n")
            dv.save("gmail", "[Gmail]/Wszystkie", raw)
            dv.save("fastmail", "INBOX", raw)
        for _, raw in iter_mbox(REPO / "fixtures" / "lists.mbox"):
            dv.save("fastmail", "Archive", raw.replace(b"\n", b"\r\n"))
        config = Path(dv.dir) / "demo-config.toml"
        config.write_text(
            dv.account_toml("gmail", folders=["\\All"])
            + dv.account_toml("fastmail", folders=["INBOX", "\\Archive", "\\Sent"])
        )
        env = {**os.environ, **dv.password_env()}
        ml(store, env, "sync", "--config", str(config))  # dry run: plan only
        ml(store, env, "sync", "--config", str(config), "--apply")  # the real thing
        dv.save(
            "fastmail",
            "INBOX",
            (
                b"From: Grace Hopper <grace@example.org>\r\nTo: team@example.org\r\n"
                b"Subject: Re: Live Wire: release plan\r\nDate: Fri, 28 Jun 2024 12:00:00 +0000\r\n"
                b"Message-ID: <plan-6@example.org>\r\nIn-Reply-To: <plan-4@example.pl>\r\n"
                b"References: <plan-1@example.org> <plan-4@example.pl>\r\n\r\nShipped.\r\n"
            ),
        )
        ml(store, env, "sync", "--config", str(config), "--apply")  # one new body
        ml(store, env, "sync", "--config", str(config), "--apply")  # idle: new=0
        ml(store, env, "thread", "<plan-1@example.org>")
        ml(
            store,
            env,
            "query",
            "select source, folder, count(*) as locations from locations group by all order by all",
        )
        ml(store, env, "cursor", "log", "fastmail", "INBOX")
        ml(store, env, "verify")
    finally:
        dv.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

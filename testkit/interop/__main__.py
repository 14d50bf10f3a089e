"""``make interop``: the core sync behaviours against Cyrus IMAP and Courier-IMAP.

    .venv/bin/python -m testkit.interop [--servers cyrus,courier] [--cache DIR] [-v]

For each server (:mod:`testkit.interop.servers`: unpacked from Debian packages,
run from a cache on a free loopback port, removed afterwards) it seeds mail by
IMAP APPEND, then drives mailledger through its CLI (``python -m pipeline
--store S sync --apply --config C --json``), through a byte-counting proxy
(:mod:`testkit.interop.wire`), one scenario after the other on one store:

==============  ===============================================================
first           first sync of INBOX (20), Lists (10), Archive (empty): 30 bodies
idle            nothing changed: no body crosses the wire, nothing new
new-mail        3 APPENDed to INBOX: exactly those 3 bodies
move            5 INBOX messages COPY'd to Archive + EXPUNGEd: no body, 5 known
uidvalidity     Lists gets a new UIDVALIDITY: an alarm, no body, 10 known
expunge         1 INBOX message expunged, ``--reconcile``: no body, the store's
                live INBOX locations are the server's UIDs
read-only       a folder the user may only read (ACL): 4 bodies, no error, no
                flag changed on the server
==============  ===============================================================

Each check reads the run report (``--json``), the store (``query``) and the
server. A scenario fails when a check fails, e.g. when bodies are downloaded
that should not be. The table gives per server and scenario: pass/FAIL, the
bytes the server sent, the bodies on the wire (counted in the server's stream,
not taken from mailledger) against those mailledger reports, and mailledger's
report line for the folder the scenario is about. Exit 0 when every scenario
passed, 1 when one failed, 2 when a server could not be fetched or started.

Expected today: Cyrus passes every scenario. Courier echoes the FETCH item
``BODY[HEADER.FIELDS ("MESSAGE-ID")]`` with the field name quoted, mailledger
does not recognise its own request in that answer, and so downloads bodies it
already has (idle, move, UIDVALIDITY change, reconcile) and under-reports them:
those rows FAIL with the wire count beside the reported one.

Nothing is installed and nothing is left running: see :mod:`testkit.interop.servers`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testkit.interop.servers import PASSWORD, SERVERS, InteropError, Server
from testkit.interop.wire import CountingProxy, Wire

REPO = Path(__file__).resolve().parents[2]
ACCOUNT = "interop"
PASSWORD_ENV = "MAILLEDGER_INTEROP_PASSWORD"


def message(server: str, n: int, folder: str) -> bytes:
    """A plain text message of 1-6 KB with a Message-ID unique to this run."""
    body = "".join(
        f"Line {i} of message {n} in {folder}: the quick brown fox jumps over the lazy dog.\r\n"
        for i in range(12 + (n * 7) % 60)
    )
    return (
        f"From: Sender {n} <sender{n}@example.org>\r\n"
        f"To: interop@example.net\r\n"
        f"Subject: interop {server} {folder} {n}\r\n"
        f"Date: Mon, 2 Nov 2026 10:{n % 60:02d}:00 +0000\r\n"
        f"Message-ID: <interop-{server}-{folder}-{n}@example.org>\r\n"
        "MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n" + body
    ).encode()


@dataclass
class Run:
    """One ``mailledger sync``: exit code, report, report lines, wire counts."""

    code: int
    report: dict[str, Any]
    lines: list[str]
    wire: Wire

    def folder(self, name: str) -> dict[str, Any]:
        folders: dict[str, Any] = (
            self.report.get("accounts", {}).get(ACCOUNT, {}).get("folders", {})
        )
        return folders.get(name, {})

    def total(self, key: str) -> int:
        folders = self.report.get("accounts", {}).get(ACCOUNT, {}).get("folders", {})
        return sum(int(f.get(key) or 0) for f in folders.values())

    def line(self, name: str) -> str:
        # the folder's result line, not an ALARM about it
        mine = [t.strip() for t in self.lines if f" {ACCOUNT} {name}:" in t]
        done = [t for t in mine if not t.startswith("ALARM")]
        return (done or mine or ["(no report line)"])[-1]


@dataclass
class Row:
    server: str
    scenario: str
    ok: bool
    wire: Wire | None
    reported_bodies: int | None
    line: str
    problems: list[str] = field(default_factory=list)


class Harness:
    """One server, one store, one config; scenarios run in order on them."""

    def __init__(self, server: Server, work: Path, verbose: bool) -> None:
        self.server = server
        self.work = work
        self.store = work / "store"
        self.config = work / "config.toml"
        self.verbose = verbose
        self.folders = ["INBOX", "Archive", "Lists"]
        self.proxy = CountingProxy(("127.0.0.1", server.port)).start()
        self.seq = 0
        self.last_run: Run | None = None

    def close(self) -> None:
        self.proxy.stop()

    def mail(self, folder: str, count: int) -> list[bytes]:
        out = []
        for _ in range(count):
            self.seq += 1
            out.append(message(self.server.name, self.seq, folder))
        return out

    def write_config(self) -> None:
        names = ", ".join(json.dumps(self.server.folder(f)) for f in self.folders)
        self.config.write_text(
            textwrap.dedent(
                f"""\
                [accounts.{ACCOUNT}]
                type = "imap"
                host = "127.0.0.1"
                port = {self.proxy.port}
                tls = "none"
                username = "{self.server.user}"
                password_env = "{PASSWORD_ENV}"
                folders = [{names}]
                exclude = []
                timeout = 60
                """
            )
        )

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ, **{PASSWORD_ENV: PASSWORD})
        env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
        return subprocess.run(
            [sys.executable, "-m", "pipeline", "--store", str(self.store), *args],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )

    def sync(self, *extra: str) -> Run:
        self.write_config()
        self.proxy.take(settle=0)  # nothing before this run counts
        done = self.cli("sync", "--apply", "--config", str(self.config), "--json", *extra)
        wire = self.proxy.take()
        try:
            report = json.loads(done.stdout) if done.stdout.strip() else {}
        except json.JSONDecodeError:
            report = {}
        lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
        if self.verbose:
            print(f"  $ mailledger sync {' '.join(extra)} -> exit {done.returncode}")
            for ln in lines:
                print("    " + ln)
        return Run(done.returncode, report, lines, wire)

    def query(self, sql: str) -> list[dict[str, Any]]:
        done = self.cli("query", sql, "--json")
        if done.returncode != 0:
            raise InteropError(f"query failed ({done.returncode}): {done.stderr.strip()[-500:]}")
        rows: list[dict[str, Any]] = json.loads(done.stdout)
        return rows

    def messages(self) -> int:
        return int(self.query("select count(*) as n from messages")[0]["n"])

    def live_uids(self, folder: str, uidvalidity: int) -> list[int]:
        name = self.server.folder(folder).replace("'", "''")
        rows = self.query(
            "select uid from locations where source like '%' || "
            f"'{ACCOUNT}' || '%' and folder = '{name}' and uidvalidity = {uidvalidity}"
            " and not vanished order by uid"
        )
        return [int(r["uid"]) for r in rows]


def expect(problems: list[str], cond: bool, text: str) -> None:
    if not cond:
        problems.append(text)


def common(h: Harness, run: Run, *, bodies: int, code: int = 0, messages: int) -> list[str]:
    p: list[str] = []
    expect(p, run.code == code, f"exit {run.code}, expected {code}")
    expect(p, bool(run.report), "no JSON report")
    expect(p, run.wire.bodies == bodies, f"{run.wire.bodies} bodies on the wire, expected {bodies}")
    expect(
        p,
        run.total("bodies") == run.wire.bodies,
        f"report says bodies={run.total('bodies')}, the wire carried {run.wire.bodies}",
    )
    stored = h.messages()
    expect(p, stored == messages, f"{stored} messages in the store, expected {messages}")
    return p


def scenarios(h: Harness) -> list[tuple[str, str, Callable[[], list[str]]]]:
    """(name, folder the line is about, run-and-check) in the order they run."""
    s = h.server

    def first() -> list[str]:
        s.create("Archive")
        s.create("Lists")
        s.append("INBOX", h.mail("INBOX", 20))
        s.append("Lists", h.mail("Lists", 10))
        run = h.last_run = h.sync()
        p = common(h, run, bodies=30, messages=30)
        expect(p, run.total("new") == 30, f"new={run.total('new')}, expected 30")
        return p

    def idle() -> list[str]:
        run = h.last_run = h.sync()
        p = common(h, run, bodies=0, messages=30)
        expect(p, run.total("new") == 0, f"new={run.total('new')}, expected 0")
        return p

    def new_mail() -> list[str]:
        s.append("INBOX", h.mail("INBOX", 3))
        run = h.last_run = h.sync()
        p = common(h, run, bodies=3, messages=33)
        expect(p, run.folder("INBOX").get("new") == 3, "INBOX new != 3")
        return p

    def move() -> list[str]:
        s.move("INBOX", "Archive", s.uids("INBOX")[:5])
        run = h.last_run = h.sync()
        p = common(h, run, bodies=0, messages=33)
        arch = run.folder(s.folder("Archive"))
        expect(p, arch.get("known") == 5, f"Archive known={arch.get('known')}, expected 5")
        uidv = s.status("Archive")["uidvalidity"]
        live = h.live_uids("Archive", uidv)
        expect(p, live == s.uids("Archive"), f"store has Archive UIDs {live}")
        return p

    def uidvalidity() -> list[str]:
        _, new = s.change_uidvalidity("Lists")
        run = h.last_run = h.sync()
        p = common(h, run, bodies=0, code=3, messages=33)
        lists = run.folder(s.folder("Lists"))
        expect(p, lists.get("known") == 10, f"Lists known={lists.get('known')}, expected 10")
        expect(
            p,
            any("UIDVALIDITY" in a for a in run.report.get("alarms", [])),
            "no UIDVALIDITY alarm",
        )
        live = h.live_uids("Lists", new)
        expect(p, live == s.uids("Lists"), f"store has Lists UIDs {live} under {new}")
        return p

    def expunge() -> list[str]:
        s.expunge("INBOX", s.uids("INBOX")[:1])
        run = h.last_run = h.sync("--reconcile")
        p = common(h, run, bodies=0, messages=33)
        uidv = s.status("INBOX")["uidvalidity"]
        live, there = h.live_uids("INBOX", uidv), s.uids("INBOX")
        expect(p, live == there, f"store's live INBOX UIDs {live} != server's {there}")
        return p

    def read_only() -> list[str]:
        s.create("ReadOnly")
        s.append("ReadOnly", h.mail("ReadOnly", 4))
        s.make_read_only("ReadOnly")
        before = s.flags("ReadOnly")
        h.folders.append("ReadOnly")
        run = h.last_run = h.sync()
        p = common(h, run, bodies=4, messages=37)
        ro = run.folder(s.folder("ReadOnly"))
        expect(p, ro.get("new") == 4, f"ReadOnly new={ro.get('new')}, expected 4")
        expect(p, not ro.get("error"), f"ReadOnly error: {ro.get('error')}")
        after = s.flags("ReadOnly")
        expect(p, after == before, f"server flags changed: {before} -> {after}")
        expect(p, s.selects_read_only("ReadOnly"), "ReadOnly is no longer read-only")
        return p

    return [
        ("first", "INBOX", first),
        ("idle", "INBOX", idle),
        ("new-mail", "INBOX", new_mail),
        ("move", "Archive", move),
        ("uidvalidity", "Lists", uidvalidity),
        ("expunge", "INBOX", expunge),
        ("read-only", "ReadOnly", read_only),
    ]


def run_server(kind: str, cache: Path, verbose: bool) -> list[Row]:
    server = SERVERS[kind](cache)
    rows: list[Row] = []
    work = Path(tempfile.mkdtemp(prefix="mailledger-interop."))
    try:
        server.start()
        print(f"{server.name}: listening on 127.0.0.1:{server.port}", flush=True)
        h = Harness(server, work, verbose)
        try:
            for name, folder, step in scenarios(h):
                if verbose:
                    print(f"- {server.name} {name}")
                h.last_run = None
                try:
                    problems = step()
                except InteropError as e:
                    problems = [f"setup: {e}"]
                run = h.last_run
                rows.append(
                    Row(
                        server.name,
                        name,
                        not problems,
                        run.wire if run else None,
                        run.total("bodies") if run else None,
                        run.line(server.folder(folder)) if run else "(no run)",
                        problems,
                    )
                )
        finally:
            h.close()
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    return rows


def table(rows: list[Row]) -> str:
    head = ("server", "scenario", "result", "bytes s->c", "bodies wire/report", "body KB")
    body = [
        (
            r.server,
            r.scenario,
            "pass" if r.ok else "FAIL",
            f"{r.wire.bytes_s2c:,}" if r.wire else "-",
            f"{r.wire.bodies}/{r.reported_bodies}" if r.wire else "-",
            f"{r.wire.body_bytes / 1024:.1f}" if r.wire else "-",
        )
        for r in rows
    ]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body, strict=True)]
    out = [" | ".join(str(c).ljust(w) for c, w in zip(head, widths, strict=True))]
    out.append("-+-".join("-" * w for w in widths))
    for r, cells in zip(rows, body, strict=True):
        out.append(" | ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)))
        out.append("    " + r.line)
        out.extend(f"    ! {p}" for p in r.problems)
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m testkit.interop",
        description="Run the core sync scenarios against Cyrus IMAP and Courier-IMAP.",
    )
    ap.add_argument("--servers", default="cyrus,courier", help="comma-separated: cyrus,courier")
    ap.add_argument(
        "--cache",
        type=Path,
        default=Path(os.environ.get("MAILLEDGER_INTEROP_CACHE", REPO / "bench-data/interop")),
        help="where the .debs are downloaded and unpacked (default bench-data/interop)",
    )
    ap.add_argument("-v", "--verbose", action="store_true", help="print every sync's report")
    args = ap.parse_args(argv)
    kinds = [k.strip() for k in args.servers.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in SERVERS]
    if unknown:
        ap.error(f"unknown server {', '.join(unknown)} (known: {', '.join(SERVERS)})")
    rows: list[Row] = []
    broken: list[str] = []
    for kind in kinds:
        try:
            rows += run_server(kind, args.cache.resolve(), args.verbose)
        except InteropError as e:
            broken.append(f"{kind}: {e}")
    print()
    print(table(rows))
    for b in broken:
        print(f"ERROR {b}", file=sys.stderr)
    if broken:
        return 2
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

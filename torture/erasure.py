"""Erasure campaign: ``delete`` then ``compact --purge`` leaves no trace of a message.

A template store holds mail synced from a real Dovecot (two runs, so cursors
moved twice and their audit has history) and mail imported from a Maildir.
Every message carries unique canaries: a Subject, a body line, a sender
address and a Message-ID that looks like a person's (``<alice.smith.TOKEN@...>``).

Each trial, on a copy of the template, deletes a random handful of messages
through the command line, plus, at random, one that is deleted and then seen
again (it must survive the purge) and one whose bytes a kept message shares
under another id (its blob must stay). Then, checked against the same store
before the purge:

- a positive control: before the purge, the search finds every canary of the
  victims (so the search can see what it looks for: subjects in decoded
  Parquet, bodies in decompressed blobs, ids everywhere);
- after ``compact --purge``, a byte search over the whole store directory
  (raw bytes of every file, plus blobs decompressed, Parquet decoded, DuckDB
  tables dumped and the full-text index's tables and terms dumped) finds no
  Subject, body, sender or Message-ID of a victim, nor its token as a word;
- every other message is intact: record, raw bytes, found by its subject;
- the cursors and the audit of every cursor move are unchanged; the skeleton
  of every event (type, seq, run, time, location, hash, size) is unchanged;
- ``verify`` passes; a second purge does nothing;
- the erased mail does not come back: an idle sync, a ``--reconcile`` sync
  and a re-import of the Maildir leave the store clean.
"""

from __future__ import annotations

import json
import random
import secrets
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any

from torture import Result, cli_argv, cli_main, dovecot_server, run_cli, search_store

__all__ = ["FULL_TRIALS", "QUICK_TRIALS", "SEED", "main"]

FULL_TRIALS = 40
QUICK_TRIALS = 3
SEED = 6


class Leak(AssertionError):
    pass


def _require(cond: bool, what: str) -> None:
    if not cond:
        raise Leak(what)


@dataclass(frozen=True)
class Canary:
    token: str
    raw: bytes
    message_id: str

    @property
    def needles(self) -> dict[str, bytes]:
        t = self.token
        return {
            f"{t} subject": f"erasure-subject-{t}".encode(),
            f"{t} body": f"erasure-body-{t}".encode(),
            f"{t} sender": f"alice.{t}@people.example".encode(),
            f"{t} message-id": self.message_id.encode(),
            # the token as a word on its own: how the full-text index holds it
            f"{t} word": t.encode(),
        }


def _canary(i: int, when: datetime, token: str | None = None) -> Canary:
    token = token or secrets.token_hex(6)
    mid = f"alice.smith.{token}@laptop.example"
    prose = "We talked about the lease and the deposit; see the figures below.\n" * 20
    raw = (
        f"From: Alice Smith <alice.{token}@people.example>\r\n"
        f"To: Bob Jones <bob@people.example>\r\n"
        f"Subject: erasure-subject-{token} about the lease\r\n"
        f"Date: {format_datetime(when)}\r\n"
        f"Message-ID: <{mid}>\r\n"
        f"List-Id: Tenants <tenants-{token}.people.example>\r\n\r\n"
        f"Dear Bob,\r\nerasure-body-{token}\r\n{prose}Alice\r\n"
    ).encode()
    return Canary(token, raw, mid)


class Template:
    """A store synced from Dovecot (twice) and imported from a Maildir."""

    USER = "fastmail"

    def __init__(self, work: Path, dv: Any, rng: random.Random) -> None:
        self.work = work
        self.dv = dv
        self.rng = rng
        t0 = datetime(2026, 3, 1, tzinfo=UTC)
        self.canaries: list[Canary] = []

        def make(n: int) -> list[Canary]:
            out = [_canary(len(self.canaries) + i, t0 + timedelta(hours=i)) for i in range(n)]
            self.canaries.extend(out)
            return out

        dv.reset_user(self.USER)
        for c in make(12):
            dv.save(self.USER, "INBOX", c.raw)
        self.config = work / "sync.toml"
        self.config.write_text(dv.account_toml(self.USER, folders=["INBOX", "\\Archive"]))
        self.env = dv.password_env()
        self.store = work / "template"
        self._sync()  # first contact: full
        for c in make(6):
            dv.save(self.USER, "INBOX", c.raw)
        for c in make(6):
            dv.save(self.USER, "Archive", c.raw)
        self._sync()  # delta: the cursors move again
        self.maildir = work / "maildir"
        for d in ("cur", "new", "tmp"):
            (self.maildir / d).mkdir(parents=True)
        for i, c in enumerate(make(12)):
            (self.maildir / "cur" / f"{1760000000 + i}.M{i}P1.erasure:2,S").write_bytes(c.raw)
        self.cli("import", "maildir", str(self.maildir))

    def cli(self, *args: str, store: Path | None = None) -> str:
        out = self.work / "cli.out"
        code, text = run_cli(cli_argv(store or self.store, *args), out, env=self.env)
        _require(code == 0, f"mailledger {' '.join(args)}: exit {code}: {text[-500:]}")
        return text

    def _sync(self, store: Path | None = None, *extra: str) -> str:
        return self.cli("sync", "--apply", "--config", str(self.config), *extra, store=store)


def _state(store: Path) -> dict[str, Any]:
    """What must survive a purge, read through the product's API."""
    from pipeline.store import MessageStore

    with MessageStore.open(store, create=False) as st:
        ids = st.message_ids()
        records = {}
        for mid in ids:
            rec = st.get(mid)
            assert rec is not None
            records[mid] = rec
        raws = {mid: st.raw(mid) for mid in ids}
        cursors = st.query("SELECT * FROM cursors ORDER BY ALL").to_pylist()
        audit = {
            (c["account"], c["folder"]): st.cursor_log(c["account"], c["folder"]) for c in cursors
        }
        skeleton = st.query(
            "SELECT seq, type, run_id, recorded_at, source, folder, uidvalidity, uid, uidl,"
            " sha256, size, actor, cursor_from, cursor_to, mode FROM events ORDER BY seq"
        ).to_pylist()
    return {
        "ids": ids,
        "records": records,
        "raws": raws,
        "cursors": cursors,
        "audit": audit,
        "skeleton": skeleton,
    }


def _trial(t: Template, rng: random.Random, n: int) -> dict[str, int]:
    from pipeline.store import MessageStore

    store = t.work / f"trial-{n}"
    shutil.copytree(t.store, store)
    pool = list(t.canaries)
    rng.shuffle(pool)
    victims = pool[: rng.randint(1, 4)]
    rest = pool[len(victims) :]
    reseen = rest.pop() if rng.random() < 0.5 else None
    shared = rest.pop() if rng.random() < 0.5 else None
    copy_id = f"shared-copy-{n}@copies.example"
    if shared is not None:
        with MessageStore.open(store, create=False) as st:
            st.add(None, shared.raw, source="api", folder="copies", message_id=copy_id)
    deleted = [*victims, *(c for c in (reseen, shared) if c is not None)]
    for c in deleted:
        t.cli("delete", c.message_id, "--reason", f"erasure request for {c.token}", store=store)
    if reseen is not None:  # seen again after its delete: stored, never purged
        again = t.work / f"again-{n}"
        (again / "cur").mkdir(parents=True)
        (again / "cur" / "1.M1P1.again:2,S").write_bytes(reseen.raw)
        t.cli("import", "maildir", str(again), store=store)

    needles: dict[str, bytes] = {}
    for c in victims:
        needles.update(c.needles)
    # a shared victim's bytes stay (the copy holds them, its headers included): what
    # must go is the id it was stored under, checked in the log's id column below

    before = _state(store)
    control = search_store(store, needles)
    blind = [k for k, v in control.items() if not v]
    _require(not blind, f"positive control: the search cannot see {blind} before the purge")

    text = t.cli("compact", "--purge", "--json", store=store)
    report = json.loads(text.strip().splitlines()[-1])["purge"]
    _require(report["messages"] == len(victims) + (shared is not None), f"purge report {report}")

    hits = {k: v for k, v in search_store(store, needles).items() if v}
    _require(not hits, f"erased data still in the store: {hits}")
    after = _state(store)
    _require(after["ids"] == before["ids"], "the stored messages changed")
    _require(after["records"] == before["records"], "a kept message's record changed")
    _require(after["raws"] == before["raws"], "a kept message's bytes changed")
    _require(after["cursors"] == before["cursors"], "the cursors changed")
    _require(after["audit"] == before["audit"], "the audit of cursor moves changed")
    n_before = len(before["skeleton"])
    _require(after["skeleton"][:n_before] == before["skeleton"], "the event skeleton changed")
    extra = after["skeleton"][n_before:]
    _require(
        all(e["type"] == "message-deleted" and e["actor"] == "mailledger-purge" for e in extra),
        f"the purge added unexpected events: {extra[:2]}",
    )
    if reseen is not None:
        _require(reseen.message_id in after["ids"], "a message seen again after its delete is gone")
    if shared is not None:
        _require(after["raws"][copy_id] == shared.raw, "the message sharing a blob lost it")
        with MessageStore.open(store, create=False) as st:
            left = st.query(
                "SELECT (SELECT count(*) FROM events WHERE message_id = $1)"
                " + (SELECT count(*) FROM locations WHERE message_id = $1) AS n",
                [shared.message_id],
            ).to_pylist()[0]["n"]
        _require(left == 0, f"the shared victim's id is still on {left} rows")
    for c in rest[:3]:
        found = t.cli("find", "subject", f"erasure-subject-{c.token} about the lease", "--json",
                      store=store)  # fmt: skip
        _require(c.message_id in json.loads(found), f"{c.message_id} no longer found")
    t.cli("verify", store=store)
    again = json.loads(t.cli("compact", "--purge", "--json", store=store).splitlines()[-1])
    _require(again["purge"]["messages"] == 0, f"a second purge did something: {again}")

    # the erased mail must not come back from its sources
    last = _state(store)["skeleton"][-1]["seq"]
    t._sync(store)
    t._sync(store, "--reconcile")
    t.cli("import", "maildir", str(t.maildir), store=store)
    hits = {k: v for k, v in search_store(store, needles).items() if v}
    _require(not hits, f"erased data came back after a sync/reconcile/re-import: {hits}")
    with MessageStore.open(store, create=False) as st:
        back = {c.message_id for c in victims} & set(st.message_ids())
        _require(not back, f"an erased message is stored again: {back}")
        new = st.query("SELECT count(*) AS n FROM events WHERE seq > ? AND type = 'message-seen'",
                       [last]).to_pylist()[0]["n"]  # fmt: skip
        _require(new == 0, f"{new} message-seen events after the purge")
    shutil.rmtree(store, ignore_errors=True)
    return {
        "victims": len(victims),
        "reseen": int(reseen is not None),
        "shared": int(shared is not None),
        "needles": len(needles),
    }


def main(trials: int = FULL_TRIALS, seed: int = SEED, workdir: Path | None = None) -> Result:
    """Run ``trials`` delete + purge trials; print the figures."""
    result = Result("erasure")
    t0 = time.monotonic()
    rng = random.Random(seed)
    totals = {"victims": 0, "reseen": 0, "shared": 0, "needles": 0}
    with (
        tempfile.TemporaryDirectory(prefix="mailledger-erasure-", dir=workdir) as tmp,
        dovecot_server() as dv,
    ):
        if dv is None:
            result.fail("dovecot is not installed: the erasure campaign needs it")
            return result
        template = Template(Path(tmp), dv, random.Random(rng.randrange(1 << 30)))
        for n in range(trials):
            result.trials += 1
            try:
                got = _trial(template, random.Random(rng.randrange(1 << 30)), n)
            except Leak as exc:
                result.fail(f"trial {n}: {exc}")
                continue
            except Exception as exc:
                result.fail(f"trial {n}: {type(exc).__name__}: {exc}")
                continue
            result.faults += got["victims"] + got["shared"]
            for k, v in got.items():
                totals[k] += v
            print(f"erasure trial {n:3}: {got}", flush=True)
    result.figures = {**totals, "messages_in_template": len(template.canaries)}
    print(
        f"erasure trials={result.trials} erased={totals['victims'] + totals['shared']}"
        f" (shared-blob={totals['shared']}) deleted-then-seen-again={totals['reseen']}"
        f" needles-searched={totals['needles']} failures={len(result.failures)}",
        flush=True,
    )
    result.seconds = time.monotonic() - t0
    return result


if __name__ == "__main__":
    cli_main(main, FULL_TRIALS, SEED)
    sys.exit(0)

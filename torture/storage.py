"""Storage-fault campaign: damaged Parquet files, blobs that lie, a full disk.

Every fault is made on a copy of a real store, then the real ``mailledger``
command is asked to work on it. What must hold:

- a truncated or corrupted log file is refused when the store is opened
  (``MessageStore.open`` and every command) and by ``verify``, the file named,
  exit 1, no traceback; ``replay`` refuses it too: never silently skipped;
  every other file still checks out;
- a corrupted file whose mtime was put back (bit rot the file system did not
  see) is not caught at open (the open-time check trusts unchanged files) but
  by ``verify`` and by any read of it (``replay``): the case is run to show it;
- a blob whose bytes no longer match its sha256 (flipped bytes, other content,
  truncated, missing) is named by ``verify`` and by any read of the message
  (``show --raw``); the other messages still read;
- a damaged projection database is reported (exit 1) and ``replay`` restores it;
- a full disk (a real tmpfs, pre-filled to a random level) during an import,
  a compaction, a purge or a replay: exit 1 with the file named, no
  traceback; the log is whole at once; nothing committed before the fault is
  lost; once space is freed, the same command completes and ``verify`` passes.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from torture import Result, cli_argv, cli_main, maildir_raws, run_cli, source_ids

__all__ = ["CASES", "FULL_TRIALS", "QUICK_TRIALS", "SEED", "main"]

FULL_TRIALS = 200
QUICK_TRIALS = 10
SEED = 5150


class Fault(AssertionError):
    pass


def _require(cond: bool, what: str) -> None:
    if not cond:
        raise Fault(what)


def _no_traceback(text: str) -> None:
    _require("Traceback" not in text, f"a traceback instead of a message: {text[-800:]}")


# -- the store used by most cases -------------------------------------------------------


class Bench:
    """A source Maildir and a template store made from it (once per campaign)."""

    def __init__(self, work: Path, rng: random.Random) -> None:
        from testkit.corpus import write_maildir

        self.work = work
        self.rng = rng
        self.src = work / "maildir"
        write_maildir(self.src, 120, seed=rng.randrange(1 << 30))
        self.ids = source_ids(maildir_raws(self.src))
        self.template = work / "template"
        code, text = run_cli(
            cli_argv(self.template, "import", "maildir", str(self.src), "--batch-size", "10"),
            work / "template.out",
        )
        _require(code == 0, f"template import failed: {text[-500:]}")
        self.n = 0

    def copy(self) -> Path:
        self.n += 1
        store = self.work / f"store-{self.n}"
        shutil.copytree(self.template, store)
        return store

    def run(self, store: Path, *args: str) -> tuple[int, str]:
        return run_cli(cli_argv(store, *args), self.work / f"out-{self.n}")


def _open_refuses(store: Path, name: str) -> None:
    from pipeline.store import MessageStore
    from stores.errors import LogIntegrityError

    try:
        MessageStore.open(store, create=False).close()
    except LogIntegrityError as exc:
        _require(name in str(exc), f"open refused without naming {name}: {exc}")
        return
    raise Fault(f"MessageStore.open accepted a damaged {name}")


def _others_whole(store: Path, damaged: str) -> None:
    from stores.log import EventLog

    log = EventLog(store / "log")
    for f in log.files():
        if f.path.name != damaged:
            problem = log.check_file(f)
            _require(problem is None, f"an undamaged file fails: {problem}")


def _log_file(store: Path, rng: random.Random) -> Path:
    return rng.choice(sorted((store / "log").glob("*.parquet")))


def _commands_refuse(b: Bench, store: Path, name: str, *, at_open: bool = True) -> bool:
    """Checks that commands refuse the damaged file ``name``; returns whether
    ``replay`` refused it too (without the open-time check, a flip that still
    decodes into valid values can only be found by verify's digest)."""
    code, out = b.run(store, "verify")
    _require(code == 1 and name in out, f"verify: exit {code}, output {out[-400:]}")
    _no_traceback(out)
    code, out = b.run(store, "replay")
    _no_traceback(out)
    if not at_open and code == 0:
        return False
    _require(code == 1 and name in out, f"replay: exit {code}, output {out[-400:]}")
    if at_open:
        for cmd in (["stats"], ["find", "subject", "x"], ["import", "maildir", str(b.src)]):
            code, out = b.run(store, *cmd)
            _require(code == 1 and name in out, f"{cmd[0]}: exit {code}, output {out[-400:]}")
            _no_traceback(out)
    return True


# -- the cases ---------------------------------------------------------------------------


def case_truncated_log(b: Bench, rng: random.Random) -> str:
    store = b.copy()
    path = _log_file(store, rng)
    size = path.stat().st_size
    keep = rng.randrange(0, size)
    os.truncate(path, keep)
    _open_refuses(store, path.name)
    _commands_refuse(b, store, path.name)
    _others_whole(store, path.name)
    return f"{path.name} cut to {keep}/{size} bytes"


def _flip(path: Path, rng: random.Random) -> tuple[int, int]:
    data = bytearray(path.read_bytes())
    at = rng.randrange(0, len(data))
    n = rng.randint(1, 16)
    for i in range(at, min(len(data), at + n)):
        data[i] ^= rng.randint(1, 255)
    path.write_bytes(bytes(data))
    return at, n


def _content_unchanged(original: Path, damaged: Path) -> bool:
    """True when every decoded row (and the digest) of ``damaged`` equals the original's."""
    import pyarrow.parquet as pq

    try:
        a = pq.read_table(original)
        c = pq.read_table(damaged)
    except Exception:
        return False
    return a.equals(c) and (a.schema.metadata or {}) == (c.schema.metadata or {})


def case_corrupt_log(b: Bench, rng: random.Random) -> str:
    store = b.copy()
    path = _log_file(store, rng)
    original = b.work / "original.parquet"
    shutil.copy2(path, original)
    at, n = _flip(path, rng)
    if _content_unchanged(original, path):
        # the flip hit bytes no reader decodes (statistics, padding): no row differs
        return f"{path.name} bytes {at}+{n}: benign (every decoded row identical)"
    _open_refuses(store, path.name)
    _commands_refuse(b, store, path.name)
    _others_whole(store, path.name)
    return f"{path.name} bytes {at}+{n} flipped"


def case_corrupt_log_mtime_kept(b: Bench, rng: random.Random) -> str:
    """Bit rot the file system never saw: caught by verify and by reads, not at open."""
    store = b.copy()
    from pipeline.store import MessageStore

    MessageStore.open(store, create=False).close()  # the open-time check records the files
    path = _log_file(store, rng)
    st = path.stat()
    original = b.work / "original.parquet"
    shutil.copy2(path, original)
    at, n = _flip(path, rng)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    if _content_unchanged(original, path):
        return f"{path.name} bytes {at}+{n}: benign (every decoded row identical)"
    if not _commands_refuse(b, store, path.name, at_open=False):
        return f"{path.name} bytes {at}+{n} flipped, mtime put back: verify only"
    return f"{path.name} bytes {at}+{n} flipped, mtime put back"


def _stored_blob(
    store: Path, rng: random.Random
) -> tuple[str, tuple[Path, int, int], list[str], set[str]]:
    """A stored message, where its blob's bytes are (file, offset, length), a sample
    of other messages, and the shas held in the same file (a pack holds many)."""
    from pipeline.store import MessageStore
    from stores.blobs import pack_records

    with MessageStore.open(store, create=False) as st:
        rows = st.query("SELECT message_id, sha256 FROM messages ORDER BY 1").to_pylist()
        pick = rng.choice(rows)
        sharing = [r["message_id"] for r in rows if r["sha256"] == pick["sha256"]]
        others = [r["message_id"] for r in rows if r["sha256"] != pick["sha256"]]
        where = st.blobs.location(pick["sha256"])
        assert where is not None, pick
        neighbours = {pick["sha256"]}
        if where[0].suffix == ".pack":
            neighbours |= {sha for sha, _, _ in pack_records(where[0].read_bytes())}
            # messages whose blob shares the damaged pack are sampled first
            close = [r["message_id"] for r in rows if r["sha256"] in neighbours]
            others = [m for m in close if m not in sharing] + others
        return pick["message_id"], where, [*sharing, *others[:3]], neighbours


def case_blob(b: Bench, rng: random.Random) -> str:
    """A blob's bytes damaged in place (in its own file or inside its pack): every
    command that reads it names the file (or, once the file is gone, the blob)."""
    from stores.blobs import encode_blob

    store = b.copy()
    mid, (path, off, length), sample, neighbours = _stored_blob(store, rng)
    how = rng.choice(["flip", "other-content", "truncate", "missing"])
    if how == "flip":
        data = bytearray(path.read_bytes())
        at = off + rng.randrange(0, length)
        data[at] ^= rng.randint(1, 255)
        path.write_bytes(bytes(data))
    elif how == "other-content":
        data = bytearray(path.read_bytes())
        other = encode_blob(b"From: someone@else\r\n\r\nnot the message\r\n" * 40)
        data[off : off + length] = (other * (length // len(other) + 1))[:length]
        path.write_bytes(bytes(data))
    elif how == "truncate":
        os.truncate(path, off + rng.randrange(0, length))
    else:
        path.unlink()
    # what an error about this damage names: the file, or a blob that was in it
    names = {path.name} | (neighbours if how == "missing" else set())
    named = lambda out: any(n in out for n in names)  # noqa: E731
    code, out = b.run(store, "verify")
    _require(code == 1 and named(out), f"verify: exit {code}, output {out[-400:]}")
    _no_traceback(out)
    code, out = b.run(store, "show", mid, "--raw")
    _require(code == 1 and named(out), f"show --raw: exit {code}, output {out[-400:]}")
    _no_traceback(out)
    for other in sample:
        if other == mid:
            continue
        code, out = b.run(store, "show", other, "--raw")
        shares = code == 1 and named(out)  # the same content, or the same damaged pack
        _require(code == 0 or shares, f"another message no longer reads: {out[-300:]}")
    return f"blob of <{mid}> in {path.parent.name}/{path.name}: {how}"


def case_projections(b: Bench, rng: random.Random) -> str:
    store = b.copy()
    db = store / "projections.duckdb"
    how = rng.choice(["truncate", "flip", "garbage"])
    if how == "truncate":
        os.truncate(db, rng.randrange(0, db.stat().st_size))
    elif how == "flip":
        data = bytearray(db.read_bytes())
        for _ in range(64):
            data[rng.randrange(0, len(data))] ^= 0xFF
        db.write_bytes(bytes(data))
    else:
        db.write_bytes(os.urandom(4096))
    code, out = b.run(store, "find", "subject", "x")
    # a damaged database may still answer (a flip in free space); if not, it says so
    _require(code in (0, 1), f"find: exit {code}: {out[-300:]}")
    _no_traceback(out)
    code, out = b.run(store, "replay")
    _require(code == 0, f"replay did not restore the projections: {out[-400:]}")
    code, out = b.run(store, "verify")
    _require(code == 0, f"verify after replay: {out[-400:]}")
    return f"projections.duckdb: {how}; replay restored it"


# -- a full disk ---------------------------------------------------------------------------


class MountError(Exception):
    pass


@contextlib.contextmanager
def tmpfs(where: Path, size: str) -> Iterator[Path]:
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise MountError(done.stderr.strip() or f"mount exit {done.returncode}")
    try:
        yield where
    finally:
        _unmount(where)


# Mounts whose file system stayed busy (who held it, as fuser saw it): printed
# by ``main``. A lazy unmount lets the campaign go on and clean up after itself.
BUSY_MOUNTS: list[str] = []


def _unmount(where: Path, wait: float = 30.0) -> None:
    deadline = time.monotonic() + wait
    while subprocess.run(["umount", str(where)], capture_output=True, check=False).returncode:
        if time.monotonic() > deadline:
            held = "fuser is not installed"
            if shutil.which("fuser"):
                who = subprocess.run(
                    ["fuser", "-vm", str(where)], capture_output=True, text=True, check=False
                )
                held = " ".join((who.stdout + who.stderr).split())[:300] or "nobody fuser saw"
            BUSY_MOUNTS.append(f"{where.name}: busy {wait:.0f} s after its trial: {held}")
            subprocess.run(["umount", "-l", str(where)], capture_output=True, check=False)
            return
        time.sleep(0.1)


def _grow(where: Path, size: str) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(where)], check=True)


def _fill(where: Path, leave: int) -> Path:
    """Fill the file system at ``where`` until about ``leave`` bytes are free."""
    filler = where / "filler"
    free = shutil.disk_usage(where).free
    with open(filler, "wb") as fh:
        left = max(0, free - leave)
        while left > 0:
            chunk = min(left, 1 << 20)
            try:
                fh.write(b"\0" * chunk)
            except OSError:
                break
            left -= chunk
    return filler


def _noise_maildir(root: Path, n: int, seed: int) -> None:
    """``n`` messages that do not compress: the disk fills as fast as the files are read."""
    rng = random.Random(seed)
    for d in ("cur", "new", "tmp"):
        (root / d).mkdir(parents=True, exist_ok=True)
    for i in range(n):
        body = rng.randbytes(3000).hex()
        (root / "cur" / f"{1700000000 + i}.M{i}P1.noise:2,S").write_text(
            f"From: n{i % 7}@noise.example\nTo: me@noise.example\nSubject: noise {i}\n"
            f"Message-ID: <noise-{i}@noise.example>\n\n{body}\n"
        )


def _log_state(store: Path) -> tuple[int, set[str]]:
    """(last seq, Message-IDs in the log), read from the log alone (no DuckDB write)."""
    from stores.log import EventLog

    log = EventLog(store / "log")
    problems = log.verify()
    _require(problems == [], f"the log is damaged after a full disk: {problems}")
    t = log.read(columns=["type", "message_id", "sha256"])
    from stores.blobs import BlobStore

    blobs = BlobStore(store / "blobs")
    last: dict[str, str] = {}
    shas: dict[str, set[str]] = {}
    for kind, mid, sha in zip(*(t.column(c).to_pylist() for c in t.column_names), strict=True):
        if kind in ("message-seen", "message-deleted"):
            last[mid] = kind
        if kind == "message-seen":
            shas.setdefault(mid, set()).add(sha)
    ids = {mid for mid, kind in last.items() if kind == "message-seen"}
    for mid in ids:
        for sha in shas[mid]:
            blobs.get(sha)  # raises when a stored message's blob is missing or wrong
    return log.last_seq(), ids


def case_disk_full(b: Bench, rng: random.Random, op: str | None = None) -> str:
    op = op or rng.choice(["import", "import", "compact", "purge", "replay"])
    mnt = b.work / f"tmpfs-{b.n}"
    b.n += 1
    with tmpfs(mnt, "16m"):
        store = mnt / "store"
        src = b.work / "noise"
        if not src.exists():
            _noise_maildir(src, 1500, seed=rng.randrange(1 << 30))  # ~9 MB of mail
        expected = source_ids(maildir_raws(src))
        if op != "import":  # a store to work on, made while there is room
            code, out = run_cli(
                cli_argv(store, "import", "maildir", str(src), "--batch-size", "25"),
                b.work / "prep.out",
            )
            _require(code == 0, f"preparing the store failed: {out[-300:]}")
            if op == "purge":
                from pipeline.store import MessageStore

                with MessageStore.open(store, create=False) as st:
                    for mid in rng.sample(sorted(st.message_ids()), 40):
                        st.delete(mid, reason="torture")
        room = {"import": 6 << 20, "compact": 48 << 10, "purge": 600 << 10, "replay": 600 << 10}
        leave = rng.randrange(0, room[op])
        filler = _fill(mnt, leave)
        args = {
            "import": ["import", "maildir", str(src), "--batch-size", "20"],
            "compact": ["compact", "--target-rows", "500"],
            "purge": ["compact", "--purge", "--target-rows", "1"],
            "replay": ["replay"],
        }[op]
        before = _log_state(store) if op != "import" else (0, set())
        code, out = run_cli(cli_argv(store, *args), b.work / "full.out")
        _no_traceback(out)
        if code == 0:
            outcome = "completed (there was room enough)"
        else:
            _require(code == 1, f"{op} on a full disk: exit {code}: {out[-400:]}")
            _require(
                "No space left" in out and str(mnt) in out,
                f"{op} on a full disk did not name the file and the cause: {out[-400:]}",
            )
            outcome = "failed cleanly: " + out.strip().splitlines()[-1][-160:]
        if (store / "store.json").exists():
            seq, ids = _log_state(store)  # whole at once, blobs of every event present
            _require(seq >= before[0] and before[1] <= ids, "events committed before were lost")
        # space comes back: the same command completes, verify passes
        filler.unlink()
        _grow(mnt, "64m")
        code, out = run_cli(cli_argv(store, *args), b.work / "again.out")
        _require(code == 0, f"{op} after space came back: exit {code}: {out[-400:]}")
        if op == "import":
            code, out = run_cli(cli_argv(store, "find", "subject", "noise"), b.work / "f.out")
        code, out = run_cli(cli_argv(store, "verify"), b.work / "verify.out")
        _require(code == 0, f"verify after the fault: {out[-400:]}")
        from pipeline.store import MessageStore

        with MessageStore.open(store, create=False) as st:
            held = set(st.message_ids())
        if op in ("import", "compact", "replay"):
            _require(held == expected, f"{len(expected - held)} messages missing after re-run")
    return f"{op} with {leave >> 10} KiB free: {outcome}"


CASES: dict[str, Callable[[Bench, random.Random], str]] = {
    "truncated-log": case_truncated_log,
    "corrupt-log": case_corrupt_log,
    "corrupt-log-mtime-kept": case_corrupt_log_mtime_kept,
    "blob": case_blob,
    "projections": case_projections,
    "disk-full": case_disk_full,
}
_WEIGHTS = {
    "truncated-log": 3,
    "corrupt-log": 4,
    "corrupt-log-mtime-kept": 1,
    "blob": 3,
    "projections": 1,
    "disk-full": 3,
}


def main(trials: int = FULL_TRIALS, seed: int = SEED, workdir: Path | None = None) -> Result:
    """Run ``trials`` storage faults (each case at least once); print the figures."""
    result = Result("storage")
    t0 = time.monotonic()
    rng = random.Random(seed)
    names = list(CASES)
    plan = names[:trials] + rng.choices(
        names, weights=[_WEIGHTS[n] for n in names], k=max(0, trials - len(names))
    )
    counts: dict[str, dict[str, int]] = {
        n: {"trials": 0, "detected": 0, "benign": 0} for n in CASES
    }
    with tempfile.TemporaryDirectory(prefix="mailledger-storage-", dir=workdir) as tmp:
        bench = Bench(Path(tmp), random.Random(rng.randrange(1 << 30)))
        for i, name in enumerate(plan):
            c = counts[name]
            c["trials"] += 1
            result.trials += 1
            trial_rng = random.Random(rng.randrange(1 << 30))
            try:
                what = CASES[name](bench, trial_rng)
            except MountError as exc:
                result.skipped.append(f"{name}: cannot mount a tmpfs ({exc}); case skipped")
                c["trials"] -= 1
                result.trials -= 1
                continue
            except Fault as exc:
                result.fail(f"trial {i} {name}: {exc}")
                continue
            except Exception as exc:
                result.fail(f"trial {i} {name}: {type(exc).__name__}: {exc}")
                continue
            if "benign" in what:
                c["benign"] += 1
            else:
                if "verify only" in what:
                    c["verify_only"] = c.get("verify_only", 0) + 1
                c["detected"] += 1
                result.faults += 1
            print(f"storage {i:3} {name:22} {what}", flush=True)
    for name, c in counts.items():
        print(
            f"storage {name:22} trials={c['trials']:3} detected/handled={c['detected']:3}"
            f" benign={c['benign']}"
            + (f" found-by-verify-only={c['verify_only']}" if "verify_only" in c else ""),
            flush=True,
        )
    for busy in BUSY_MOUNTS:
        print(f"storage NOTE {busy}", file=sys.stderr)
    for s in dict.fromkeys(result.skipped):
        print(f"storage SKIPPED {s}", file=sys.stderr)
    result.figures = counts
    result.seconds = time.monotonic() - t0
    return result


if __name__ == "__main__":
    cli_main(main, FULL_TRIALS, SEED)

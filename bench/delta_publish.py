"""The dependency checks of deltalake in our processes (issue 34): threads at import,
fork safety, exit status after a write, and the peak memory of ``publish delta``
over a large shard, chunk size by chunk size. ``python -m bench.delta_publish``
(``make delta-checks``); figures go to docs/scale-out.md ("Delta publish").

Every check runs in a fresh interpreter (``python -c`` / ``python -m pipeline``) so
that nothing this process imported or started is counted.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

_THREADS = """
import os, sys, json
def n(): return len(os.listdir('/proc/self/task'))
out = {'start': n()}
import pyarrow; out['pyarrow'] = n()
import pipeline.cluster.publish; out['pipeline.cluster.publish'] = n()
import deltalake; out['deltalake'] = n()
from pipeline.cluster.publish import publish_delta
publish_delta([('store', sys.argv[1])], sys.argv[2], chunk_rows=100)
out['after a publish'] = n()
print(json.dumps(out))
"""

# A process that imported deltalake (and, in the second case, wrote through it,
# starting delta-rs's tokio runtime) forks; the child publishes to its own table.
_FORK = """
import os, sys, json
from pipeline.cluster.publish import publish_delta
store, dest, wrote_first = sys.argv[1], sys.argv[2], sys.argv[3] == '1'
import deltalake
if wrote_first:
    publish_delta([('store', store)], dest + '-parent', chunk_rows=100)
pid = os.fork()
if pid == 0:
    try:
        publish_delta([('store', store)], dest + '-child', chunk_rows=100)
        os._exit(0)
    except BaseException as exc:
        print(repr(exc)[:200], file=sys.stderr)
        os._exit(7)
import time
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        print(json.dumps({'child_status': os.waitstatus_to_exitcode(status)}))
        break
    time.sleep(0.05)
else:
    os.kill(pid, 9); os.waitpid(pid, 0)
    print(json.dumps({'child_status': 'hung (killed after 60 s)'}))
"""


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAILLEDGER_")}
    env["PYTHONPATH"] = str(REPO)
    return env


def _python(code: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True, text=True, env=_env(), timeout=timeout, check=False,
    )  # fmt: skip


def _publish_rss(store: Path, dest: Path, chunk_rows: int) -> dict[str, Any]:
    """Wall time, exit status and peak RSS of ``mailledger publish delta`` in a child
    (its own rusage, from ``wait4``)."""
    out = dest.with_suffix(".out")
    t0 = time.monotonic()
    with open(out, "w") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pipeline", "--store", str(store), "publish", "delta",
             str(dest), "--chunk-rows", str(chunk_rows), "--json"],
            stdout=fh, stderr=subprocess.STDOUT, text=True, env=_env(),
        )  # fmt: skip
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.monotonic() - t0
    text = out.read_text()
    report = json.loads(text) if proc.returncode == 0 else {}
    return {
        "chunk_rows": chunk_rows,
        "exit": proc.returncode,
        "output": "" if report else text[-300:],
        "seconds": round(seconds, 1),
        "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 1),
        "peak_rss_mib": round(usage.ru_maxrss / 1024),
        "rows": report.get("rows"),
        "commits": sum(s["commits"] for s in report.get("shards", [])),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--chunks", default="10000,50000,200000")
    ap.add_argument("--exits", type=int, default=5, help="publish runs whose exit status is kept")
    args = ap.parse_args(argv)
    from testkit.eventlogs import append_events

    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="mailledger-delta-checks-") as tmp:
        root = Path(tmp)
        small = root / "small"
        append_events(small, 1_000, batch=100)
        done = _python(_THREADS, str(small), str(root / "threads"))
        figures["threads"] = json.loads(done.stdout) if done.returncode == 0 else done.stderr
        for wrote in ("0", "1"):
            done = _python(_FORK, str(small), str(root / f"fork{wrote}"), wrote, timeout=120)
            key = "fork after a write" if wrote == "1" else "fork after import only"
            figures[key] = (done.stdout.strip() + " " + done.stderr[-300:]).strip()
        statuses = []
        for i in range(args.exits):
            done = subprocess.run(
                [sys.executable, "-m", "pipeline", "--store", str(small), "publish", "delta",
                 str(root / f"exit{i}"), "--chunk-rows", "50", "--optimize", "--retention-hours",
                 "0"],
                capture_output=True, text=True, env=_env(), timeout=300, check=False,
            )  # fmt: skip
            statuses.append(done.returncode)
        figures["exit statuses (publish + optimize)"] = statuses
        big = root / "big"
        t0 = time.monotonic()
        append_events(big, args.events, batch=5_000)
        figures["events"] = args.events
        figures["log files"] = len(list((big / "log").glob("*.parquet")))
        figures["log bytes"] = sum(p.stat().st_size for p in (big / "log").glob("*.parquet"))
        figures["generate seconds"] = round(time.monotonic() - t0, 1)
        figures["publish"] = [
            _publish_rss(big, root / f"table-{c}", int(c)) for c in args.chunks.split(",")
        ]
    print(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

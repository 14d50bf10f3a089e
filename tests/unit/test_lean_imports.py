"""What every sync and import loads: the full-text extraction without the search
language, and the cursor snapshot's note of the folders a fold touched without
Arrow's query engine; and that note is the same as a group-by's. pyarrow's Parquet
module without its remote filesystems, the log still written and read."""

from __future__ import annotations

import subprocess
import sys

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from projections.snapshot import _places
from stores.arrow import REMOTE_FILESYSTEMS


def _printed_by(probe: str) -> str:
    """What ``probe`` prints when run by a fresh interpreter (which must exit 0)."""
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


_VALUES = st.sampled_from(["imap:a", "imap:b", "import:x", "INBOX", "Archive", "é", None])


def test_the_text_extraction_and_a_fold_watch_load_no_search_grammar_nor_acero() -> None:
    probe = (
        "import sys\n"
        "import pyarrow as pa\n"
        "from projections.fulltext.extract import extract\n"
        "from projections.snapshot import Touched\n"
        "extract(b'Subject: x\\r\\n\\r\\nbody\\r\\n')\n"
        "chunk = pa.table({'source': ['imap:a'], 'folder': ['INBOX'], 'type': ['message-seen']})\n"
        "w = Touched()\n"
        "list(w.watch([chunk]))\n"
        "assert w.places == {('imap:a', 'INBOX')}, w.places\n"
        "print(sorted(m for m in ('projections.search.language', 'projections.search.nodes',\n"
        "    'projections.search.printing', 'pyarrow.acero', 'pyarrow.dataset')\n"
        "    if m in sys.modules))\n"
    )
    assert _printed_by(probe) == "[]"


def test_the_log_writes_and_reads_parquet_without_pyarrows_remote_filesystems() -> None:
    probe = (
        "import sys, tempfile, pathlib\n"
        "from datetime import UTC, datetime\n"
        "from stores.events import MessageSeen\n"
        "from stores.log import EventLog\n"
        "import pyarrow.fs\n"
        "log = EventLog(pathlib.Path(tempfile.mkdtemp()) / 'log', durable=False)\n"
        "log.append([MessageSeen(run_id='r', recorded_at=datetime.now(UTC), source='s',\n"
        "    folder='f', message_id='a@x', sha256='0' * 64, size=1, uidl='1',\n"
        "    headers=(('Subject', 'x'),))])\n"
        "assert log.read().column('message_id').to_pylist() == ['a@x']\n"
        "try:\n"
        "    pyarrow.fs.S3FileSystem\n"
        "except ImportError:\n"
        "    pass\n"
        "else:\n"
        "    raise AssertionError('S3FileSystem is there')\n"
        f"print(sorted(m for m in {REMOTE_FILESYSTEMS!r} if sys.modules.get(m) is not None))\n"
    )
    assert _printed_by(probe) == "[]"


@given(st.lists(st.tuples(_VALUES, _VALUES), max_size=40))
def test_the_places_of_a_chunk_are_its_distinct_pairs_nulls_included(
    rows: list[tuple[str | None, str | None]],
) -> None:
    chunk = pa.table(
        {
            "source": pa.array([s for s, _ in rows], pa.string()),
            "folder": pa.array([f for _, f in rows], pa.string()),
        }
    )
    grouped = chunk.group_by(["source", "folder"]).aggregate([])
    sources, folders = grouped.column("source"), grouped.column("folder")
    expected = set(zip(sources.to_pylist(), folders.to_pylist(), strict=True))
    assert _places(chunk) == expected == set(rows)

"""What every sync and import loads: the full-text extraction without the search
language, and the cursor snapshot's note of the folders a fold touched without
Arrow's query engine; and that note is the same as a group-by's."""

from __future__ import annotations

import subprocess
import sys

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from projections.snapshot import _places

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
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"


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

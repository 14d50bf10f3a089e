"""Real GDBM files for the legacy-store tests: made with ``dbm.gnu`` where this
Python has it, else with ``gdbm_load`` (Debian package ``gdbmtool``) from a dump."""

from __future__ import annotations

import base64
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

__all__ = ["have_gnu", "make_gdbm"]


def have_gnu() -> bool:
    try:
        import dbm.gnu  # noqa: F401
    except ImportError:
        return False
    return True


def make_gdbm(path: Path, records: Sequence[tuple[bytes, bytes]]) -> Path:
    """A real GDBM file holding ``records`` (key bytes, value bytes as stored)."""
    if have_gnu():
        import dbm.gnu

        with dbm.gnu.open(str(path), "n") as db:
            for k, v in records:
                db[k] = v
        return path
    tool = shutil.which("gdbm_load")
    if tool is None:
        pytest.skip("neither dbm.gnu nor gdbm_load: apt-get install gdbmtool (.ci/run does)")
    lines = ["# GDBM dump file created by mailledger's tests", "#:version=1.1",
             "#:format=standard", "# End of header"]  # fmt: skip
    for k, v in records:
        for datum in (k, v):
            b64 = base64.b64encode(datum).decode()
            lines.append(f"#:len={len(datum)}")
            lines.extend([b64[i : i + 76] for i in range(0, len(b64), 76)] or [""])
    lines += [f"#:count={len(records)}", "# End of data"]
    dump = path.with_suffix(".dump")
    dump.write_text("\n".join(lines) + "\n")
    subprocess.run([tool, str(dump), str(path)], check=True, capture_output=True)
    dump.unlink()
    return path

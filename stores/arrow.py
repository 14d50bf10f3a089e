"""pyarrow's ``compute`` and ``parquet`` modules, imported when first needed, and
pyarrow without its remote filesystems.

``pyarrow.compute`` costs every command 0.1 s to import, and most commands
(find, show, stats) never use it; the log reads and writes Parquet only when a
command touches it.

``pyarrow.parquet`` imports ``pyarrow.fs``, which loads every remote filesystem
pyarrow was built with: S3 (the AWS SDK), Google Cloud Storage, Azure and HDFS.
mailledger reads and writes local files only. ``leave_out_remote_filesystems``
marks their modules as absent before ``pyarrow.fs`` is first imported, which
pyarrow supports as a build without them (``pyarrow.fs`` catches the ImportError
and its ``S3FileSystem`` then says so). Importing ``pyarrow.parquet`` then peaks
at 53 MiB, not 57 (20 runs each), and a one-message sync into 1,000,000 messages
at 161-162 MiB, not 165-168 (its peak RSS, the page cache dropped before); no
process registers pyarrow's S3 finalizer with ``atexit`` (GH-38364: crashes at
shutdown). It changes nothing once ``pyarrow.fs`` is loaded: a program that
imported it first keeps what it has.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

__all__ = ["REMOTE_FILESYSTEMS", "compute", "leave_out_remote_filesystems", "parquet"]

REMOTE_FILESYSTEMS = ("pyarrow._s3fs", "pyarrow._gcsfs", "pyarrow._azurefs", "pyarrow._hdfs")


def leave_out_remote_filesystems() -> None:
    """Have ``pyarrow.fs`` load without its remote filesystems (see the module's
    docstring); nothing when it is loaded already."""
    if "pyarrow.fs" in sys.modules:
        return
    for name in REMOTE_FILESYSTEMS:
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]  # None: "absent"


def compute() -> ModuleType:
    """``pyarrow.compute``."""
    return importlib.import_module("pyarrow.compute")


def parquet() -> ModuleType:
    """``pyarrow.parquet``."""
    return importlib.import_module("pyarrow.parquet")

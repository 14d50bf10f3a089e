"""pyarrow's ``compute`` and ``parquet`` modules, imported when first needed.

``pyarrow.compute`` costs every command 0.1 s to import, and most commands
(find, show, stats) never use it; the log reads and writes Parquet only when a
command touches it.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["compute", "parquet"]


def compute() -> ModuleType:
    """``pyarrow.compute``."""
    return importlib.import_module("pyarrow.compute")


def parquet() -> ModuleType:
    """``pyarrow.parquet``."""
    return importlib.import_module("pyarrow.parquet")

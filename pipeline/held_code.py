"""The code a run started with: every module of mailledger read when a writing run
starts and, whenever the run first imports one, executed from that reading.

A run imports much of its code late, on purpose: an idle sync never loads DuckDB
or pyarrow, a worker process only what it runs. An upgrade under a running sync
(``pip install -U`` during a cron sync) would then have the run import the new
version's modules beside the old ones it holds, and fail at its end with an
``ImportError``. Read at the start (the bytes only: nothing is executed, no
library is loaded, a few milliseconds), the run's modules all come from one
version whenever they are imported.

Worker processes start from the files on disk; before starting them a run checks
that those are still the files it read, and stops with ``InstallChanged`` (by
name, nothing lost: run it again) when they are not.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import marshal
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import CodeType, ModuleType

from stores.errors import MailledgerError

__all__ = [
    "PACKAGES",
    "HeldCode",
    "InstallChanged",
    "check_install",
    "held_code",
    "install_changed",
]

PACKAGES: tuple[str, ...] = ("stores", "projections", "pipeline")
"""mailledger's packages: every module in them is held."""

_Signature = tuple[int, int, int]


class InstallChanged(MailledgerError):
    """mailledger's files changed on disk while a run ran (an upgrade, a reinstall)."""


@dataclass(frozen=True)
class _Module:
    origin: str  # the .py file
    package: bool
    data: bytes  # the body of a valid .pyc (marshalled code), else the source
    compiled: bool


def _signature(path: str) -> _Signature | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def _cached_code(origin: str, st: os.stat_result) -> bytes | None:
    """The marshalled code of ``origin``'s .pyc when it is the one Python would use
    (timestamp-checked, made from this very source), else None."""
    try:
        with open(importlib.util.cache_from_source(origin), "rb") as f:
            data = f.read()
    except OSError:
        return None
    header_ok = (
        data[:4] == importlib.util.MAGIC_NUMBER
        and int.from_bytes(data[4:8], "little") == 0
        and int.from_bytes(data[8:12], "little") == int(st.st_mtime) & 0xFFFFFFFF
        and int.from_bytes(data[12:16], "little") == st.st_size & 0xFFFFFFFF
    )
    return data[16:] if header_ok else None


def _package_dirs(name: str) -> list[str]:
    loaded = sys.modules.get(name)
    if loaded is not None:
        return list(getattr(loaded, "__path__", []))
    spec = importlib.util.find_spec(name)  # (a top-level name: nothing is executed)
    return list(spec.submodule_search_locations or []) if spec else []


class HeldCode(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """A finder, first on ``sys.meta_path`` while a run runs, that imports the modules
    of ``PACKAGES`` from what was read when it was made."""

    def __init__(self, packages: Sequence[str] = PACKAGES) -> None:
        self._modules: dict[str, _Module] = {}
        self._seen: dict[str, _Signature | None] = {}
        for name in packages:
            for root in _package_dirs(name):
                self._read_package(name, Path(root))

    def _read_package(self, name: str, root: Path) -> None:
        for path in sorted(root.iterdir()):
            if path.is_dir():
                if (path / "__init__.py").is_file():
                    self._read_package(f"{name}.{path.name}", path)
            elif path.suffix == ".py":
                stem = path.stem
                self._read(name if stem == "__init__" else f"{name}.{stem}", str(path))

    def _read(self, fullname: str, origin: str) -> None:
        package = origin.endswith("__init__.py")
        try:
            st = os.stat(origin)
            self._seen[origin] = (st.st_ino, st.st_mtime_ns, st.st_size)
            if fullname in sys.modules:
                return  # loaded already: only its file is watched
            code = _cached_code(origin, st)
            data = code if code is not None else Path(origin).read_bytes()
        except OSError:
            return  # (gone as it was read: the import finds what is there)
        self._modules[fullname] = _Module(origin, package, data, code is not None)

    def changed(self) -> list[str]:
        """The files read (or watched) at the start that are not the same file now."""
        return [path for path, seen in self._seen.items() if _signature(path) != seen]

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        module = self._modules.get(fullname)
        if module is None:
            return None
        spec = importlib.machinery.ModuleSpec(
            fullname, self, origin=module.origin, is_package=module.package
        )
        spec.has_location = True  # (__file__ is the file it was read from)
        if module.package:
            spec.submodule_search_locations = [os.path.dirname(module.origin)]
        return spec

    def exec_module(self, module: ModuleType) -> None:
        held = self._modules[module.__name__]
        code: CodeType = (
            marshal.loads(held.data)
            if held.compiled
            else compile(held.data, held.origin, "exec", dont_inherit=True)
        )
        exec(code, module.__dict__)


@contextlib.contextmanager
def held_code(packages: Sequence[str] = PACKAGES) -> Iterator[HeldCode]:
    """Hold mailledger's code for the run inside the ``with`` (see the module)."""
    finder = HeldCode(packages)
    sys.meta_path.insert(0, finder)
    try:
        yield finder
    finally:
        sys.meta_path.remove(finder)


def install_changed() -> InstallChanged | None:
    """The error to raise when a run holds its code (``held_code``) and the files it
    read have changed since, else None."""
    for finder in sys.meta_path:
        if isinstance(finder, HeldCode) and (changed := finder.changed()):
            return InstallChanged(
                f"mailledger's files changed while this run ran (an upgrade or a "
                f"reinstall? {len(changed)} changed, {changed[0]} among them); what "
                "was committed is kept: run it again"
            )
    return None


def check_install() -> None:
    """Raise ``install_changed()``'s error, if any: called before starting processes,
    which would run the files on disk beside the code this run holds."""
    error = install_changed()
    if error is not None:
        raise error

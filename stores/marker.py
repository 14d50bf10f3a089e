"""``STORE/store.json``: what makes a directory a mailledger store, and its
creation, safe against other processes creating the same store at once."""

from __future__ import annotations

import json
from pathlib import Path

from stores.atomic import create_once, unique_name
from stores.errors import NotFoundError, UsageError

__all__ = ["check_marker"]

_FORMAT = {"format": "mailledger-store", "version": 1}


def check_marker(root: Path, *, create: bool) -> None:
    """Refuse what is not a store (or create one, when ``create``)."""
    marker = root / "store.json"
    if not marker.exists():
        if not create:
            raise NotFoundError(f"{root}: no mailledger store here")
        _create_marker(root, marker)
    meta = json.loads(marker.read_text())
    if meta.get("format") != _FORMAT["format"] or meta.get("version") != 1:
        raise UsageError(f"{marker}: unknown store format {meta!r}")


def _is_marker_temp(name: str) -> bool:
    """A creator's temporary marker (``store.json.tmp`` of older versions,
    ``store.json.{pid}.{random}.tmp`` now): left alone by a crash before its link."""
    return name.startswith("store.json.") and name.endswith(".tmp")


def _create_marker(root: Path, marker: Path) -> None:
    """Make ``root`` a store by publishing its ``store.json``, safe against other
    processes creating the same store at the same moment.

    The marker is written in full under a name of this process's own, fsynced,
    then hard-linked to ``store.json``: the link succeeds for exactly one creator,
    and every other one finds the winner's complete marker and opens that store.
    Nothing else of the store exists before its marker, so a directory holding
    anything but markers (or a winner's marker) is someone else's and refused.
    """
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    if any(not (p.name == marker.name or _is_marker_temp(p.name)) for p in root.iterdir()):
        if not marker.exists():  # (a concurrent creator may have won meanwhile)
            raise UsageError(f"{root}: exists, is not empty and is not a mailledger store")
        return
    # (a name _is_marker_temp knows: a crash before the link leaves a file that
    # does not make the directory someone else's)
    tmp = unique_name(marker, prefix=f"{marker.name}.")
    create_once(marker, (json.dumps(_FORMAT) + "\n").encode(), tmp=tmp)

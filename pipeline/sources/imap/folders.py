"""Which of an account's folders a sync takes: the scope rules of the
``folders`` and ``exclude`` settings over a LIST answer. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence

from pipeline.sources.imap.response import FolderInfo

__all__ = [
    "DEFAULT_EXCLUDED",
    "gone_folders",
    "missing_attributes",
    "missing_folders",
    "select_folders",
]

# SPECIAL-USE folders a sync leaves alone unless the config names them.
DEFAULT_EXCLUDED = frozenset({"\\Junk", "\\Trash", "\\Drafts"})


def select_folders(
    folders: Sequence[FolderInfo], wanted: Sequence[str], exclude: Sequence[str] = ()
) -> list[FolderInfo]:
    """The folders an account's scope names, in server order, each once.

    An entry with a leading backslash names a SPECIAL-USE attribute (``\\All``
    finds Gmail's ``[Gmail]/Wszystkie`` whatever the UI language), ``*`` every
    selectable folder, any other entry a folder name (``INBOX``
    case-insensitively). Junk, Trash and Drafts are left out unless an entry
    names them; ``exclude`` removes more.

    A folder named by its name is always taken, whatever its SPECIAL-USE: the
    user asked for that very folder (``folders = ["Trash"]`` on a server that
    marks it ``\\Trash``), so only an ``exclude`` entry naming it by name
    leaves it out. Attribute exclusions, the default ones included, apply to
    folders picked up by an attribute or by ``*``.
    """
    wanted_attrs = {w.lower() for w in wanted if w.startswith("\\")}
    wanted_names = {w for w in wanted if not w.startswith("\\") and w != "*"}
    every = "*" in wanted
    excl_attrs = {e.lower() for e in exclude if e.startswith("\\")}
    excl_names = {e for e in exclude if not e.startswith("\\")}
    default_excl = {a.lower() for a in DEFAULT_EXCLUDED}
    out: list[FolderInfo] = []
    for f in folders:
        if not f.selectable:
            continue
        attrs = {a.lower() for a in f.attributes}
        by_name = _named(f.name, wanted_names)
        by_attr = bool(attrs & wanted_attrs)
        if not (by_name or by_attr or every):
            continue
        if _named(f.name, excl_names):
            continue
        if not by_name:
            if attrs & excl_attrs:
                continue
            defaulted = attrs & default_excl
            if defaulted and not (defaulted & wanted_attrs):
                continue
        out.append(f)
    return out


def _named(name: str, names: set[str]) -> bool:
    """Whether ``names`` holds the folder name ``name`` (``INBOX`` in any case)."""
    return name in names or (name.upper() == "INBOX" and any(n.upper() == "INBOX" for n in names))


def missing_folders(folders: Sequence[FolderInfo], wanted: Sequence[str]) -> list[str]:
    """The folder names in ``wanted`` (not ``\\Attributes``, not ``*``) that the
    server does not list as selectable: deleted, renamed or mistyped."""
    names = {f.name for f in folders if f.selectable}
    has_inbox = any(n.upper() == "INBOX" for n in names)
    return [
        w
        for w in wanted
        if not w.startswith("\\")
        and w != "*"
        and w not in names
        and not (w.upper() == "INBOX" and has_inbox)
    ]


def missing_attributes(folders: Sequence[FolderInfo], wanted: Sequence[str]) -> list[str]:
    """The SPECIAL-USE attributes in ``wanted`` that no selectable folder carries
    (a server without that folder, or without SPECIAL-USE at all): an entry
    that takes nothing, reported like a missing folder name, never dropped."""
    held = {a.lower() for f in folders if f.selectable for a in f.attributes}
    return [w for w in wanted if w.startswith("\\") and w.lower() not in held]


def gone_folders(folders: Sequence[FolderInfo], known: Sequence[str]) -> list[str]:
    """Of the ``known`` folder names (those the store holds a cursor for), the
    ones LIST no longer shows as selectable: renamed or deleted on the server.

    ``folders`` must be a LIST that was read in full. A LIST without INBOX,
    which every IMAP server has, is no such answer: nothing is taken for gone.
    """
    names = {f.name for f in folders if f.selectable}
    if not any(n.upper() == "INBOX" for n in names):
        return []
    return [k for k in known if not _named(k, names)]

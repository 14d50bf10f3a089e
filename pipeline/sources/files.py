"""Any tree of one-message files: a notmuch mail root that is not Maildir, MH
folders, a folder of saved ``.eml`` files. Every regular file below the root is a
message, walked as ``notmuch new`` walks its root, but for what mail programs and
search engines keep beside the mail.

The walk, the rule of what is not mail and the source are Maildir's
(``pipeline.sources.tree``); what this tree adds:

- directories not walked: hidden ones (``.notmuch``, mu's ``.mu``, ``.git``, and so
  Maildir++ ``.Sub.Folder`` too: ``import maildir`` reads those), ``tmp/`` (Maildir's
  deliveries in progress), and a Xapian database (a ``xapian/`` directory, or one
  holding Xapian's ``iamglass``/``iamchert``/... version file: mu's and notmuch's);
- MH bookkeeping (``.mh_sequences``, nmh's ``context``, ...) named as not mail;
- a symlink whose target is outside the root is named as not mail and never read;
  a symlinked directory is not followed (no loop; one inside the tree is walked
  where it is).

The folder is the directory's path relative to the root (``.`` for the root; a
Maildir's ``cur/`` and ``new/`` are their parent's), the location the file's name
there (a Maildir ``:2,FLAGS`` suffix cut: no flags are recorded), so a re-run
adds nothing and a message moved within the tree is a new location of content
already held, never a second blob.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pipeline.importing import run_import
from pipeline.ingest import RunCounts
from pipeline.sources.tree import TreeSource, Walk, not_mail_name
from pipeline.store import MessageStore
from stores.errors import UsageError

__all__ = ["FilesSource", "check_files", "import_files"]

# MH: the sequences of each folder, nmh's context (the current folder) in the mail
# root, the profile, xmh's and Claws Mail's caches
_MH_BOOKKEEPING = frozenset({".mh_sequences", "context", ".mh_profile", ".xmhcache", ".mh_cache"})
# the version file every Xapian database holds, one per backend (notmuch, mu)
_XAPIAN_MARKERS = frozenset({"iamglass", "iamchert", "iamflint", "iamhoney", "iambrass"})


def _skip_dir(name: str) -> str | None:
    if name.startswith("."):
        return "hidden directory"
    if name == "tmp":
        return "Maildir tmp/: deliveries in progress"
    if name == "xapian":
        return "search database"
    return None


def _skip_listing(names: Sequence[str]) -> str | None:
    return "Xapian database" if _XAPIAN_MARKERS.intersection(names) else None


def _not_mail(name: str) -> str | None:
    return "MH bookkeeping" if name in _MH_BOOKKEEPING else not_mail_name(name)


_FILES = Walk(
    skip_dir=_skip_dir,
    folder=lambda rel: rel,
    not_mail=_not_mail,
    skip_listing=_skip_listing,
    contained=True,
)


def check_files(root: Path) -> None:
    """Refuse (UsageError) what is not a directory: a file of mail is ``import mbox``'s."""
    if not root.is_dir():
        raise UsageError(f"{root}: not a directory; nothing imported")


class FilesSource(TreeSource):
    """The messages of a tree of files (a :class:`~pipeline.sources.MessageSource`),
    by the rules of :class:`~pipeline.sources.tree.TreeSource` and this module's."""

    def __init__(self, root: Path) -> None:
        super().__init__(root, "files", _FILES, check_files)


def import_files(store: MessageStore, root: Path, **options: Any) -> RunCounts:
    """Import every message of a tree of files; returns the run counts. ``options``
    are ``run_import``'s (``batch_size``, ``progress``, ``workers``), as for
    ``import_maildir``: the same driver, the same source but for its rules."""
    return run_import(store, FilesSource(root), **options)

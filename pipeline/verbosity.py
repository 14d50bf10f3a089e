"""How much mailledger says on stderr: one level for the whole run.

The contract for everything that prints besides a command's answer (progress
displays, notes, the IMAP conversation): the level of the ``mailledger`` logger
is the verbosity of the run. ``ERROR`` under ``-q``, ``WARNING`` by default,
``INFO`` under ``-v``, ``DEBUG`` under ``--debug``. :func:`progress_wanted` says
whether a progress display may be drawn. The CLI sets the level
(:class:`LogSetup`); worker processes get the same level from their parent.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from pipeline.terminal import terminal_text

__all__ = ["LogSetup", "level", "progress_wanted"]


def level() -> int:
    """The verbosity of this run: the effective level of the ``mailledger`` logger."""
    return logging.getLogger("mailledger").getEffectiveLevel()


def progress_wanted(stream: Any = None) -> bool:
    """Whether progress may be shown on ``stream`` (default stderr): it is a
    terminal and the run is not ``-q`` (the ``mailledger`` logger lets WARNING through)."""
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty()) and level() <= logging.WARNING


class _TerminalFormatter(logging.Formatter):
    """A log line as the terminal may show it: a folder, a file name or a header
    quoted in a message is mail's text, passed through ``terminal_text`` (lines
    and tabs kept: a traceback has them)."""

    def format(self, record: logging.LogRecord) -> str:
        return terminal_text(super().format(record), newlines=True, tabs=True)


class LogSetup:
    """Logging to stderr at ``level``: the ``mailledger`` logger at that level, the
    ``imapclient`` logger (the IMAP conversation; imapclient masks the LOGIN and
    AUTHENTICATE lines itself) at DEBUG only under ``--debug``, every other library
    at WARNING (ERROR under ``-q``), every line safe for a terminal
    (``pipeline.terminal``). ``undo()`` removes the handler and puts the
    levels back, so the CLI's ``main()`` can run again in the same process."""

    def __init__(self, level: int) -> None:
        fmt = "%(message)s"  # what a warning always looked like
        if level <= logging.DEBUG:
            fmt = "%(asctime)s %(process)d %(name)s %(levelname)s: %(message)s"
        self.handler = logging.StreamHandler(sys.stderr)
        self.handler.setFormatter(_TerminalFormatter(fmt))
        self.levels = {
            "": max(level, logging.WARNING),
            "mailledger": level,
            "imapclient": level if level <= logging.DEBUG else max(level, logging.WARNING),
        }
        self.saved = {name: logging.getLogger(name).level for name in self.levels}
        for name, lvl in self.levels.items():
            logging.getLogger(name).setLevel(lvl)
        logging.getLogger().addHandler(self.handler)

    def undo(self) -> None:
        logging.getLogger().removeHandler(self.handler)
        for name, lvl in self.saved.items():
            logging.getLogger(name).setLevel(lvl)

"""Dispatch: hand stored messages to handlers by To/Cc address (README, "Dispatch to handlers").

The ``[dispatch]`` table of the config file::

    [dispatch]
    default = "handlers.inbox:process"        # optional: what no route takes
    import_path = ["~/mail-handlers"]         # optional: more directories for imports
    [[dispatch.routes]]
    to = "jobs@example.org"                   # an address, or a glob, or a list of them
    handler = "handlers.jobs:process_jobs"
    [[dispatch.routes]]
    to = ["*@lists.example.org", "*@lists.example.net"]
    handler = "handlers.lists:process"

Routing: a message's addresses are its To and Cc addr-specs (lowercased, as the
primary record holds them); the first route with a pattern matching any of
them wins (``fnmatch`` globs, case-insensitive); a message no route matches
goes to ``default``, or stays where it is when there is none.

A handler is ``module:function``. Modules are imported with the config file's
directory first on ``sys.path``, then the ``import_path`` directories
(relative ones are relative to the config file), then the usual ``sys.path``;
the additions are removed again when the dispatch ends. Every handler is
imported before any is called: a handler that cannot be imported is a
configuration error (exit 2) and nothing runs.

Each handler gets ONE call with a list of ``(msg_id, email.message.EmailMessage)``
pairs (``msg_id`` as the store keeps it: no angle brackets) and returns the
Message-IDs it finished (any iterable; angle brackets optional). Two modes:

- ``mailledger dispatch`` (the legacy program's flow): every message currently in the
  store; what a handler finished is deleted through the store
  (``message-deleted``, actor = the handler, reason ``dispatched``).
- ``mailledger dispatch --consumer NAME``: non-destructive. Only the messages
  stored since the consumer's checkpoint are handed over, and nothing is
  deleted; the checkpoint advances past what the handlers acknowledged (see
  :class:`Consumer`).

A handler that raises (or returns something that is not a list of ids) loses
nothing: its messages stay (or stay pending), the error is reported with the
handler's name, the other handlers still run, and the exit code is 1.
"""

from __future__ import annotations

from pipeline.config.dispatch import DispatchConfig, Route, parse_dispatch
from pipeline.dispatch.checkpoint import Consumer, consume
from pipeline.dispatch.handlers import DispatchReport, HandlerResult, dispatch, load_handlers

__all__ = [
    "Consumer",
    "DispatchConfig",
    "DispatchReport",
    "HandlerResult",
    "Route",
    "consume",
    "dispatch",
    "load_handlers",
    "parse_dispatch",
]

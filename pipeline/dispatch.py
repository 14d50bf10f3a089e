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

import contextlib
import errno
import fcntl
import fnmatch
import importlib
import json
import os
import re
import sys
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from email.message import EmailMessage
from pathlib import Path
from typing import Any

from pipeline.config import show_value
from pipeline.store import MessageStore
from projections.normalize import normalize_msgid
from stores.atomic import replace_file
from stores.errors import ConfigError, MailledgerError

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

Handler = Callable[[list[tuple[str, EmailMessage]]], Iterable[str] | None]

_HANDLER_SPEC = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*\Z")
_CONSUMER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*\Z")
_KEYS = ("default", "routes", "import_path")
_ROUTE_KEYS = ("to", "handler")


# -- the configuration -----------------------------------------------------------


@dataclass(frozen=True)
class Route:
    """Messages to or Cc ``patterns`` (lowercase globs) go to ``handler``."""

    patterns: tuple[str, ...]
    handler: str
    key: str  # where it is in the file, for messages: dispatch.routes[0]

    def matches(self, addresses: Iterable[str]) -> bool:
        return any(fnmatch.fnmatchcase(a.lower(), p) for a in addresses for p in self.patterns)


@dataclass(frozen=True)
class DispatchConfig:
    routes: tuple[Route, ...]
    default: str | None
    import_path: tuple[Path, ...]
    config_file: Path | None = None

    def handler_for(self, addresses: Sequence[str]) -> str | None:
        """The handler of the first route matching one of ``addresses``, else the default."""
        for route in self.routes:
            if route.matches(addresses):
                return route.handler
        return self.default

    def handlers(self) -> list[str]:
        """Every handler named, in the order of the file (each once)."""
        names = [r.handler for r in self.routes]
        if self.default:
            names.append(self.default)
        return list(dict.fromkeys(names))

    def where(self, handler: str) -> str:
        """The key naming ``handler`` first, for error messages."""
        for r in self.routes:
            if r.handler == handler:
                return f"{r.key}.handler"
        return "dispatch.default"


def parse_dispatch(
    raw: Mapping[str, Any], config_file: Path | None, env: Mapping[str, str] | None = None
) -> DispatchConfig:
    """Check the raw ``[dispatch]`` table; ConfigError naming the file and key otherwise."""
    prefix = f"{config_file}: " if config_file else ""
    problems: list[str] = []

    def bad(key: str, message: str) -> None:
        problems.append(f"{prefix}{key}: {message}")

    def spec(key: str, value: Any) -> str | None:
        if not isinstance(value, str) or not _HANDLER_SPEC.match(value.strip()):
            example = '"handlers.jobs:process"'
            bad(key, f"must be module:function (e.g. {example}), got {show_value(value)}")
            return None
        return value.strip()

    for k in raw:
        if k not in _KEYS:
            bad(f"dispatch.{k}", f"unknown key; known keys: {', '.join(_KEYS)}")

    default = spec("dispatch.default", raw["default"]) if "default" in raw else None

    routes: list[Route] = []
    raw_routes = raw.get("routes", [])
    if not isinstance(raw_routes, list):
        bad("dispatch.routes", "must be an array of tables ([[dispatch.routes]])")
        raw_routes = []
    for i, r in enumerate(raw_routes):
        key = f"dispatch.routes[{i}]"
        if not isinstance(r, dict):
            bad(key, f"must be a table with to and handler, got {show_value(r)}")
            continue
        for k in r:
            if k not in _ROUTE_KEYS:
                bad(f"{key}.{k}", f"unknown key; known keys: {', '.join(_ROUTE_KEYS)}")
        if "to" not in r:
            bad(f"{key}.to", "missing (an address or a glob such as *@lists.example.org)")
        if "handler" not in r:
            bad(f"{key}.handler", 'missing ("module:function")')
        to = r.get("to")
        items = to if isinstance(to, list) else [to]
        patterns: list[str] = []
        for item in items if "to" in r else []:
            if not isinstance(item, str) or not item.strip() or any(c.isspace() for c in item):
                bad(
                    f"{key}.to",
                    f"must be an address or glob (or a list of them), got {show_value(to)}",
                )
                break
            patterns.append(item.strip().lower())
        if isinstance(to, list) and not to:
            bad(f"{key}.to", "must not be an empty list")
        handler = spec(f"{key}.handler", r["handler"]) if "handler" in r else None
        if patterns and handler:
            routes.append(Route(tuple(patterns), handler, key))

    base = config_file.resolve().parent if config_file else Path.cwd()
    paths: list[Path] = [base]
    raw_paths = raw.get("import_path", [])
    if isinstance(raw_paths, str):
        raw_paths = [raw_paths]
    if not isinstance(raw_paths, list) or not all(isinstance(p, str) and p for p in raw_paths):
        bad("dispatch.import_path", f"must be a list of directories, got {show_value(raw_paths)}")
        raw_paths = []
    home = (env or {}).get("HOME") or str(Path.home())
    for p in raw_paths:
        if p == "~" or p.startswith("~/"):
            p = home + p[1:]
        path = Path(p) if Path(p).is_absolute() else base / p
        if not path.is_dir():
            bad("dispatch.import_path", f"no such directory: {path}")
        paths.append(path)

    if not problems and not routes and default is None:
        bad("dispatch", "no routes and no default: add [[dispatch.routes]] or dispatch.default")
    if problems:
        raise ConfigError("\n".join(problems))
    return DispatchConfig(tuple(routes), default, tuple(paths), config_file)


@contextlib.contextmanager
def _import_path(paths: Sequence[Path]) -> Iterator[None]:
    added = [str(p) for p in paths if str(p) not in sys.path]
    sys.path[:0] = added
    importlib.invalidate_caches()
    try:
        yield
    finally:
        for p in added:
            with contextlib.suppress(ValueError):
                sys.path.remove(p)


def load_handlers(cfg: DispatchConfig) -> dict[str, Handler]:
    """Import every handler named in ``cfg`` (ConfigError if one cannot be)."""
    out: dict[str, Handler] = {}
    problems: list[str] = []
    prefix = f"{cfg.config_file}: " if cfg.config_file else ""
    with _import_path(cfg.import_path):
        for name in cfg.handlers():
            module_name, _, attr = name.partition(":")
            try:
                obj: Any = importlib.import_module(module_name)
                for part in attr.split("."):
                    obj = getattr(obj, part)
            except Exception as exc:  # an import runs the module: anything can happen
                problems.append(
                    f"{prefix}{cfg.where(name)}: cannot load {name}:"
                    f" {type(exc).__name__}: {exc} (searched the config's directory,"
                    " dispatch.import_path, then sys.path)"
                )
                continue
            if not callable(obj):
                problems.append(f"{prefix}{cfg.where(name)}: {name} is not callable")
                continue
            out[name] = obj
    if problems:
        raise ConfigError("\n".join(problems))
    return out


# -- the consumer checkpoint -----------------------------------------------------


class Consumer:
    """A named, non-destructive reader of the messages stored since its checkpoint.

    Its state is ``STORE/consumers/NAME.json``: ``seq``, the log position up to
    which every stored message was acknowledged, and ``acked``, the positions
    above it acknowledged out of order (they are not handed over again). The
    file is replaced atomically (temporary file, fsync, rename, directory
    fsync), so a checkpoint commit happens exactly once or not at all; a
    consumer killed at any point resumes from its last commit and hands over
    again only what was not yet acknowledged (at-least-once at the handler).

    Why a file and not an event in the log: a checkpoint is where one reader
    is, not a fact about mail. Writing it into the log would add an event type
    to the shared schema, grow the log with every acknowledgement and make
    the truth depend on reader bookkeeping; ``replay``, ``compact`` and
    ``purge`` never need it. Seqs never change (compaction keeps them), so the
    file stays valid across those. Losing the file only means handing
    everything over again, never losing a message.

    A "new stored message" is a primary record whose winning ``message-seen``
    has a seq above the checkpoint: a later sighting of the same Message-ID
    (a new location) is not new; a message deleted and seen again is.
    Only one process may use a consumer at a time (an flock on ``NAME.lock``).
    """

    def __init__(self, store: MessageStore, name: str) -> None:
        if not _CONSUMER_NAME.match(name):
            raise MailledgerError(f"consumer name {name!r}: use letters, digits, '.', '_' and '-'")
        self.store = store
        self.name = name
        self.dir = store.root / "consumers"
        self.path = self.dir / f"{name}.json"
        self._lock_fd: int | None = None
        self.seq = 0
        self.acked: set[int] = set()

    # -- lifecycle
    def __enter__(self) -> Consumer:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open(self) -> None:
        self.dir.mkdir(mode=0o700, exist_ok=True)
        fd = os.open(self.dir / f"{self.name}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise MailledgerError(
                    f"consumer {self.name!r} is in use by another process"
                ) from None
            raise
        self._lock_fd = fd
        self._load()

    def close(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None

    def _load(self) -> None:
        try:
            state = json.loads(self.path.read_text())
        except FileNotFoundError:
            self.seq, self.acked = 0, set()
            return
        except (OSError, ValueError) as exc:
            raise MailledgerError(f"{self.path}: unreadable checkpoint: {exc}") from None
        self.seq = int(state.get("seq", 0))
        self.acked = {int(s) for s in state.get("acked", ()) if int(s) > self.seq}

    def _save(self) -> None:
        state = {"name": self.name, "seq": self.seq, "acked": sorted(self.acked)}
        replace_file(self.path, (json.dumps(state) + "\n").encode())

    # -- reading
    def pending(self) -> tuple[int, list[dict[str, Any]]]:
        """``(bound, messages)``: the log's last seq when asked, and every stored
        message above the checkpoint not yet acknowledged, oldest first (each a
        dict of ``seq``, ``message_id``, ``to_addrs``)."""
        if self._lock_fd is None:
            raise MailledgerError(f"consumer {self.name!r} is not open")
        bound = self.store.log.last_seq()
        rows = self.store.query(
            "SELECT seq, message_id, to_addrs FROM messages WHERE seq > ? ORDER BY seq",
            [self.seq],
        ).to_pylist()
        return bound, [r for r in rows if r["seq"] not in self.acked]

    def ack(self, seqs: Iterable[int], delivered: Sequence[int], bound: int) -> int:
        """Acknowledge ``seqs`` and commit the checkpoint; returns the new ``seq``.

        ``delivered`` are the seqs of every message ``pending`` returned with
        ``bound``: the checkpoint moves to just before the first of them still
        unacknowledged, or to ``bound`` when none is.
        """
        self.acked |= set(seqs)
        open_seqs = (s for s in delivered if s > self.seq and s not in self.acked)
        first_open = min(open_seqs, default=None)
        new = bound if first_open is None or first_open > bound else first_open - 1
        self.seq = max(self.seq, new)
        self.acked = {s for s in self.acked if s > self.seq}
        self._save()
        return self.seq

    def messages(self) -> Iterator[tuple[str, EmailMessage]]:
        """Yield each new stored message once; a message is acknowledged when the
        loop asks for the next one (a crash or ``break`` in the loop body leaves
        it pending for the next run)."""
        bound, rows = self.pending()
        delivered = [r["seq"] for r in rows]
        for r in rows:
            yield r["message_id"], self.store.message(r["message_id"])
            self.ack([r["seq"]], delivered, bound)
        if not rows and bound > self.seq:
            self.ack([], delivered, bound)


def consume(store: MessageStore, name: str) -> Iterator[tuple[str, EmailMessage]]:
    """``for msg_id, msg in consume(store, "indexer"): ...`` — each new stored
    message exactly once across runs (see :class:`Consumer`)."""
    with Consumer(store, name) as consumer:
        yield from consumer.messages()


# -- the run ---------------------------------------------------------------------


@dataclass
class HandlerResult:
    handler: str
    given: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)  # returned, but not handed to it
    deleted: int = 0
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class DispatchReport:
    run_id: str
    dry_run: bool
    consumer: str | None = None
    handlers: dict[str, HandlerResult] = field(default_factory=dict)
    unrouted: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # messages that could not be read
    checkpoint_from: int | None = None
    checkpoint_to: int | None = None

    @property
    def failed(self) -> bool:
        """A handler failed, or a message could not be read (the CLI exits 1)."""
        return any(h.error for h in self.handlers.values()) or bool(self.errors)

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "dry_run": self.dry_run,
            "consumer": self.consumer,
            "handlers": {k: v.as_dict() for k, v in self.handlers.items()},
            "unrouted": list(self.unrouted),
            "errors": list(self.errors),
            "checkpoint_from": self.checkpoint_from,
            "checkpoint_to": self.checkpoint_to,
        }


def _route(
    cfg: DispatchConfig, rows: Sequence[Mapping[str, Any]], report: DispatchReport
) -> dict[str, list[Mapping[str, Any]]]:
    groups: dict[str, list[Mapping[str, Any]]] = {h: [] for h in cfg.handlers()}
    for row in rows:
        handler = cfg.handler_for(list(row["to_addrs"] or ()))
        if handler is None:
            report.unrouted.append(row["message_id"])
        else:
            groups[handler].append(row)
    return groups


def _finished_ids(result: Any) -> list[str]:
    if result is None:
        raise TypeError("returned None; return the Message-IDs it finished ([] for none)")
    if isinstance(result, str | bytes) or not isinstance(result, Iterable):
        raise TypeError(f"returned {type(result).__name__}; return an iterable of Message-IDs")
    out = []
    for item in result:
        if not isinstance(item, str):
            raise TypeError(f"returned a {type(item).__name__} among the Message-IDs")
        out.append(normalize_msgid(item) or item.strip())
    return out


def dispatch(
    store: MessageStore,
    cfg: DispatchConfig,
    *,
    dry_run: bool = False,
    consumer: str | None = None,
    on_error: Callable[[str], None] | None = None,
) -> DispatchReport:
    """Route, call each handler once, delete (or acknowledge) what it finished."""
    report = DispatchReport(run_id=store.run_id, dry_run=dry_run, consumer=consumer)
    handlers = load_handlers(cfg)
    say = on_error or (lambda text: print(text, file=sys.stderr))
    with contextlib.ExitStack() as stack:
        cons: Consumer | None = None
        bound = 0
        if consumer is not None:
            cons = stack.enter_context(Consumer(store, consumer))
            report.checkpoint_from = report.checkpoint_to = cons.seq
            bound, rows = cons.pending()
        else:
            rows = store.query(
                "SELECT seq, message_id, to_addrs FROM messages ORDER BY seq"
            ).to_pylist()
        delivered = [r["seq"] for r in rows]
        groups = _route(cfg, rows, report)
        for name, members in groups.items():
            report.handlers[name] = HandlerResult(name, [r["message_id"] for r in members])
        if dry_run:
            return report
        stack.enter_context(_import_path(cfg.import_path))  # for imports at call time
        if cons is not None:
            unrouted = {r["seq"] for r in rows if r["message_id"] in set(report.unrouted)}
            report.checkpoint_to = cons.ack(unrouted, delivered, bound)
        for name, members in groups.items():
            if not members:
                continue
            res = report.handlers[name]
            pairs: list[tuple[str, EmailMessage]] = []
            for r in members:
                try:
                    pairs.append((r["message_id"], store.message(r["message_id"])))
                except MailledgerError as exc:
                    report.errors.append(f"{r['message_id']}: {exc}")
                    say(f"mailledger: dispatch: cannot read {r['message_id']}: {exc}")
            handed = {mid for mid, _ in pairs}
            res.given = [mid for mid, _ in pairs]
            try:
                returned = _finished_ids(handlers[name](pairs))
            except Exception as exc:
                res.error = f"{type(exc).__name__}: {exc}"
                say(
                    f"mailledger: dispatch: handler {name} failed; its {len(pairs)} messages"
                    f" stay: {res.error}\n" + "".join(traceback.format_exc()).rstrip()
                )
                continue
            res.finished = [m for m in dict.fromkeys(returned) if m in handed]
            res.ignored = [m for m in dict.fromkeys(returned) if m not in handed]
            if cons is not None:
                by_id = {r["message_id"]: r["seq"] for r in members}
                report.checkpoint_to = cons.ack([by_id[m] for m in res.finished], delivered, bound)
            elif res.finished:
                store.commit(
                    [
                        store.events.deleted(mid, actor=name, reason="dispatched")
                        for mid in res.finished
                    ]
                )
                res.deleted = len(res.finished)
    return report

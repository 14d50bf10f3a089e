"""A dispatch run: the handlers imported, the stored messages routed to them, each
handler called once, and what it finished deleted (or, for a consumer,
acknowledged)."""

from __future__ import annotations

import contextlib
import importlib
import logging
import sys
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from email.message import EmailMessage
from pathlib import Path
from typing import Any

from pipeline.config.dispatch import DispatchConfig
from pipeline.dispatch.checkpoint import Consumer
from pipeline.store import MessageStore
from projections import queries
from projections.normalize import normalize_msgid
from stores.errors import ConfigError, MailledgerError

__all__ = ["DispatchReport", "HandlerResult", "dispatch", "load_handlers"]

Handler = Callable[[list[tuple[str, EmailMessage]]], Iterable[str] | None]


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
    """Route, call each handler once, delete (or acknowledge) what it finished.
    ``on_error``: what is told of a message that cannot be read or a handler that
    failed (default: the ``mailledger.dispatch`` log, at ERROR)."""
    report = DispatchReport(run_id=store.run_id, dry_run=dry_run, consumer=consumer)
    handlers = load_handlers(cfg)
    say = on_error or logging.getLogger("mailledger.dispatch").error  # (stderr, unless told)
    with contextlib.ExitStack() as stack:
        cons: Consumer | None = None
        bound = 0
        if consumer is not None:
            cons = stack.enter_context(Consumer(store, consumer))
            report.checkpoint_from = report.checkpoint_to = cons.seq
            bound, rows = cons.pending()
        else:
            rows = store.projector.read(queries.recipients_after)
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

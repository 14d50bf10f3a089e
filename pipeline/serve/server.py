"""``mailledger serve``: the long-running process that owns a store and answers the
command line over its socket (``pipeline.serve.protocol``).

The process imports what commands need once, opens nothing, and forks workers
(``pipeline.serve.worker``) that open the store as the command line does, write
to the client's own stdout and stderr and answer with the command's exit code; a
worker back from a read keeps the store for the next (``pipeline.serve.warm``).
Commands run side by side as separate processes: the fence serializes writers.

Fork, not threads: DuckDB and pyarrow are not safe to fork once they hold
connections or worker threads, so the parent never opens a store or runs a
query; it is one thread (pyarrow's allocator thread is covered by jemalloc's
fork handlers) on asyncio's loop. So the web app (``--listen``) and the sync
(``--sync``) run in long-lived children it supervises (``pipeline.serve.children``).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import os
import signal
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.serve import protocol
from pipeline.serve.children import Child, describe_group
from pipeline.serve.spares import Idle, SpareSlot
from pipeline.serve.worker import FALLBACK, preload, spare
from stores.atomic import replace_file
from stores.errors import MailledgerError

if TYPE_CHECKING:
    from pipeline.serve.sync_child import SyncChild
    from pipeline.web.running import Listen

__all__ = ["Server", "ServerRunning", "log_path"]

log = logging.getLogger("mailledger-serve")  # (not under "mailledger": a command's logging)

_MESSAGE_TIMEOUT = 5.0  # seconds a client may take to finish a message it began
_KILL_AFTER = 3.0  # seconds a cancelled command has to end before SIGKILL
_SPARE_AFTER = 0.5  # seconds into a command its successor's spare is forked at the latest


class ServerRunning(MailledgerError):
    """The store already has a live server."""


def log_path(env: Mapping[str, str], point: protocol.Endpoint) -> Path:
    """The server's log: ``$XDG_STATE_HOME/mailledger/serve-<key>.log``."""
    home = Path(env.get("HOME", "~")).expanduser()
    base = env.get("XDG_STATE_HOME") or str(home / ".local/state")
    return Path(base) / "mailledger" / f"serve-{point.key}.log"


@dataclass
class Server:
    """A store's server: ``run()`` until stopped, idle for ``idle_exit`` seconds, or
    signalled (SIGTERM, SIGINT)."""

    point: protocol.Endpoint
    log_file: Path
    idle_exit: float | None = None
    keep_warm: float = 0.0  # (--keep-warm: seconds a worker back from a read keeps the store)
    listen: Listen | None = None  # (--listen: the web app in children, ``http_children``)
    http_children: int = 1  # (--http-children: how many)
    sync: SyncChild | None = None  # (--sync: the store's writer in a child, ``sync_child``)
    started: float = field(default_factory=time.time)
    _active: dict[int, asyncio.Future[int]] = field(default_factory=dict)
    _last: float = field(default_factory=time.monotonic)
    _stop: asyncio.Event | None = None
    _spares: SpareSlot | None = None
    _commands: int = 0
    _http: list[Child] = field(default_factory=list)
    _csrf_secret: bytes = field(default_factory=lambda: os.urandom(32))  # (over restarts)

    def describe(self) -> dict[str, Any]:
        """pid, version, store, socket, log and start time (``serve status``)."""
        return {
            "pid": os.getpid(),
            "version": protocol.package_version(),
            "store": self.point.store,
            "socket": self.point.socket,
            "log": str(self.log_file),
            "started": self.started,
            "uptime": round(time.time() - self.started, 3),
            "running": len(self._active),
            "commands": self._commands,
            "keep_warm": self.keep_warm,
            **({"spare": self._spares.describe()} if self._spares is not None else {}),
            **({"listen": self.listen.address} if self.listen is not None else {}),
            **({"http": describe_group(self._http)} if self._http else {}),
            **({"sync": self.sync.describe()} if self.sync is not None else {}),
        }

    def run(self, ready: Callable[[Server], None]) -> None:
        """Serve until stopped; ``ready`` is called once the socket listens. Raises
        ``ServerRunning`` when a live server holds the store already."""
        for _ in range(40):  # (a client checking for a stale socket holds it a moment)
            with self.point.lock_held(wait=False) as taken:
                if taken:
                    self._serve_locked(ready)
                    return
            time.sleep(0.05)
        info = self.point.read_info() or {}
        raise ServerRunning(f"{self.point.store} is served already by pid {info.get('pid', '?')}")

    def _serve_locked(self, ready: Callable[[Server], None]) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.point.socket)  # (a dead server's: the lock was free)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        web = self._bind_web()
        try:
            listener.bind(self.point.socket)
            os.chmod(self.point.socket, 0o600)
            listener.listen(64)
            listener.setblocking(False)
            preload()
            if web:
                from pipeline.serve.http_child import preload_web

                preload_web()
            gc.freeze()  # (the workers share these pages: the collector would copy them all)
            replace_file(Path(self.point.info), json.dumps(self.describe()).encode(), durable=False)
            log.info("serving %s on %s (pid %d)", self.point.store, self.point.socket, os.getpid())
            ready(self)
            asyncio.run(self._main(listener, web))
        finally:
            listener.close()
            for sock in web:
                sock.close()
            for path in (self.point.socket, self.point.info):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
            log.info("stopped")

    def _bind_web(self) -> list[socket.socket]:
        """``--listen``'s sockets (one per web child), bound here once (an address
        in use: an error now, exit 1); each web child serves its own, and a
        restarted one the same."""
        if self.listen is None:
            return []
        from pipeline.web.running import bind

        try:
            return bind(self.listen, self.http_children)
        except OSError as exc:
            why = exc.strerror or exc
            raise MailledgerError(f"--listen {self.listen.address}: {why}") from None

    def _start_children(self, web: list[socket.socket]) -> list[Child]:
        """The web app's children and the sync's, started and supervised."""
        assert self._stop is not None
        loop = asyncio.get_running_loop()
        children: list[Child] = []
        if web and self.listen is not None:
            from pipeline.serve.http_child import http_children

            heard, tell = os.pipe()
            os.set_blocking(heard, False)
            os.set_blocking(tell, False)

            def activity() -> None:  # (a request came to the web app)
                with contextlib.suppress(BlockingIOError):
                    if os.read(heard, 4096):
                        self._last = time.monotonic()

            loop.add_reader(heard, activity)
            self._http = http_children(
                self.listen,
                web,
                Path(self.point.store),
                self.point,
                tell,
                csrf_secret=self._csrf_secret,
                sync=self.sync is not None,
                keep_warm=self.keep_warm,
            )
            children.extend(self._http)
        if self.sync is not None:
            children.append(self.sync.child)
        for child in children:
            child.start(self._stop)
        return children

    def _sync_now(self) -> dict[str, Any]:
        """Wake the sync child (SIGUSR1): its next run begins at once."""
        if self.sync is None:
            return {"ok": False, "reason": "this server does not sync (serve --sync)"}
        pid = self.sync.child.signal(signal.SIGUSR1)
        if pid is None:
            return {"ok": False, "reason": "the sync is not running now (starting again soon)"}
        log.info("sync: asked to run now (pid %d)", pid)
        return {"ok": True, "pid": pid}

    async def _main(self, listener: socket.socket, web: list[socket.socket]) -> None:
        loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stop.set)
        tasks: set[asyncio.Task[None]] = set()

        def accept() -> None:
            with contextlib.suppress(BlockingIOError, InterruptedError):
                conn, _ = listener.accept()
                task = loop.create_task(self._connection(conn))
                tasks.add(task)
                task.add_done_callback(tasks.discard)

        loop.add_reader(listener.fileno(), accept)
        self._spares = SpareSlot(self._fork_spare, self._spare_ended)
        self._keep_spare()
        children = self._start_children(web)
        idle = loop.create_task(self._idle_watch()) if self.idle_exit else None
        await self._stop.wait()
        loop.remove_reader(listener.fileno())
        if idle is not None:
            idle.cancel()
        if children:  # SIGTERM each, SIGKILL after its grace
            await asyncio.gather(*(child.stop() for child in children))
        if tasks:  # the commands under way end as they would have
            log.info("stopping: %d command(s) to finish", len(tasks))
            await asyncio.wait(tasks)
        self._spares.drop()

    async def _idle_watch(self) -> None:
        assert self.idle_exit is not None and self._stop is not None
        while True:
            await asyncio.sleep(min(1.0, self.idle_exit / 4))
            if not self._active and time.monotonic() - self._last >= self.idle_exit:
                log.info("idle for %.0f s: stopping", self.idle_exit)
                self._stop.set()
                return

    async def _connection(self, conn: socket.socket) -> None:
        fds: list[int] = []
        try:
            conn.settimeout(_MESSAGE_TIMEOUT)
            await _readable(conn)
            hello, _ = protocol.recv_msg(conn)
            refusal = _refusal(hello)
            if refusal:
                log.warning("refused a client: %s", refusal)
                protocol.send_msg(conn, {"ok": False, "reason": refusal})
                return
            protocol.send_msg(conn, {"ok": True, "pid": os.getpid()})
            await _readable(conn)
            request, fds = protocol.recv_msg(conn, max_fds=3)
            op = request.get("op")
            if op == "status":
                protocol.send_msg(conn, self.describe())
            elif op == "sync":
                protocol.send_msg(conn, self._sync_now())
            elif op == "stop":
                log.info("asked to stop")
                protocol.send_msg(conn, {"ok": True, "pid": os.getpid()})
                assert self._stop is not None
                self._stop.set()
            elif op == "run" and len(fds) == 3:
                reply = await self._run(conn, request, fds)
                fds = []
                if reply is not None:  # (else the worker answered the client)
                    with contextlib.suppress(OSError):
                        protocol.send_msg(conn, reply)
            else:
                protocol.send_msg(conn, {"ok": False, "reason": f"unknown request {op!r}"})
        except (OSError, protocol.ProtocolError, KeyError, TypeError, ValueError) as exc:
            log.warning("a client's request failed: %s", exc)
        finally:
            for fd in fds:
                os.close(fd)
            conn.close()
            self._last = time.monotonic()

    def _fork_spare(self) -> Idle:
        """A worker forked now, to wait for a command (``worker.spare``)."""
        for handler in log.handlers:
            handler.flush()
        ours, theirs = socket.socketpair()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            ours.close()
            for handler in list(log.handlers):
                log.removeHandler(handler)
            spare(theirs, Path(self.point.store), self.keep_warm)
        theirs.close()
        return Idle(pid, ours)

    def _spare_ended(self, idle: Idle, status: int) -> None:
        """An idle worker ended (a warm one's keep is over, or it died)."""
        if idle.warm and os.waitstatus_to_exitcode(status) == 0:
            log.info("pid %d: idle for --keep-warm, let go of the store", idle.pid)
        else:
            log.warning("idle worker %d ended: %s", idle.pid, _ended(status))
        asyncio.get_running_loop().call_soon(self._keep_spare)

    def _stop_set(self) -> bool:
        return self._stop is None or self._stop.is_set()

    def _keep_spare(self) -> None:
        if self._spares is not None and not self._stop_set():
            self._spares.keep()

    def _hand_over(self, request: Mapping[str, Any], fds: list[int], conn: socket.socket) -> Idle:
        """Give ``request``, the client's descriptors (closed here) and its connection
        (``conn``: the worker answers on it) to the spare worker (a warm one first)."""
        assert self._spares is not None
        try:
            for _ in range(2):  # (a spare that died meanwhile: another, once)
                worker = self._spares.take()
                try:
                    protocol.send_msg(worker.channel, request, fds=[*fds, conn.fileno()])
                    return worker
                except OSError as exc:
                    worker.channel.close()
                    _kill(worker.pid, signal.SIGKILL)
                    _, status = os.waitpid(worker.pid, 0)
                    log.warning(
                        "worker %d would not take the command: %s (%s)",
                        worker.pid,
                        exc,
                        _ended(status),
                    )
            raise OSError("no worker would take the command")
        finally:
            for fd in fds:
                os.close(fd)

    async def _run(
        self, conn: socket.socket, request: Mapping[str, Any], fds: list[int]
    ) -> dict[str, Any] | None:
        """Hand the command to a worker, cancel it when the client asks (or goes), and
        answer its exit code, unless the worker answered the client itself (None).

        A worker answers the client itself as the command ends, before its own exit
        (``worker.answer``: DuckDB's threads and a large process's pages take
        milliseconds to tear down) and without this process in between; it tells
        this process first, on its channel, so that the client closing its end then
        is not taken for a client gone mid-command."""
        loop = asyncio.get_running_loop()
        worker = self._hand_over(request, fds, conn)
        pid, channel = worker.pid, worker.channel
        channel.setblocking(False)
        answered: list[dict[str, Any]] = []

        def worker_answered() -> bool:
            if not answered:
                with contextlib.suppress(OSError, protocol.ProtocolError):
                    answered.append(protocol.recv_msg(channel)[0])
            return bool(answered)

        def heard() -> None:  # the worker's answer: it ends, or stays for another command
            if not worker_answered():
                loop.remove_reader(channel.fileno())  # (it died: ``ended`` tells)
            elif answered[0].get("again") and not done.done():
                loop.remove_reader(channel.fileno())
                done.set_result(int(answered[0]["exit"]))

        self._commands += 1
        # The next command's spare is forked when this one ends (or, when it runs
        # long, a moment after it began): its warm-up (DuckDB's instance, 20-50 ms of
        # CPU) beside the command slowed the command on two cores (p50 of a served
        # count at 100,000 messages 10-30 ms slower, commands back to back or not).
        spare_later = loop.call_later(_SPARE_AFTER, self._keep_spare)
        log.info("pid %d: %s", pid, " ".join(request["argv"])[:200])
        done: asyncio.Future[int] = loop.create_future()
        self._active[pid] = done
        pidfd = os.pidfd_open(pid)
        kill: asyncio.TimerHandle | None = None
        killed = False

        def ended() -> None:
            loop.remove_reader(pidfd)
            _, status = os.waitpid(pid, 0)
            if not done.done():
                done.set_result(os.waitstatus_to_exitcode(status))

        def cancel() -> None:  # the client sent "cancel", or went away
            nonlocal kill
            loop.remove_reader(conn.fileno())
            if done.done():  # (ended already: its pid may be another process's by now)
                return
            if worker_answered():  # (the client has its answer and closed: no cancel)
                return
            with contextlib.suppress(OSError, protocol.ProtocolError):
                protocol.recv_msg(conn)
            log.info("pid %d: cancelled", pid)
            interrupt(_KILL_AFTER)

        def interrupt(left: float) -> None:
            # SIGINT once a second, as a person would press Ctrl-C again (one that
            # lands while DuckDB opens a file is taken by it and lost), then SIGKILL
            nonlocal kill, killed
            if done.done():
                return
            if left <= 0:
                log.warning("pid %d: still running, killed", pid)
                killed = True
                _kill(pid, signal.SIGKILL)
                return
            _kill(pid, signal.SIGINT)
            kill = loop.call_later(1.0, interrupt, left - 1.0)

        loop.add_reader(pidfd, ended)
        loop.add_reader(conn.fileno(), cancel)
        loop.add_reader(channel.fileno(), heard)
        kept = False
        try:
            code = await done
            worker_answered()  # (read before the channel is closed)
            kept = bool(answered and answered[0].get("again"))
        finally:
            for fd in (conn.fileno(), pidfd, channel.fileno()):
                with contextlib.suppress(ValueError, OSError):
                    loop.remove_reader(fd)
            os.close(pidfd)
            if kill is not None:
                kill.cancel()
            del self._active[pid]
            spare_later.cancel()
            if kept and self._spares is not None and not self._stop_set():
                self._spares.give_back(worker)  # (the store kept: the next read's)
            else:
                channel.close()
                if kept:  # (stopping: it is not waited for)
                    _kill(pid, signal.SIGTERM)
                    os.waitpid(pid, 0)
            loop.call_soon(self._keep_spare)  # (after the answer is sent)
        log.info("pid %d: exit %d%s", pid, code, " (kept)" if kept else "")
        if answered:
            return None
        if code == FALLBACK:
            return {"fallback": "another store"}
        if killed:  # (cancelled: the client says so, as the command would have)
            return {"exit": 130, "killed": True}
        return {"exit": code}


def _ended(status: int) -> str:
    """How a worker ended (its wait status), said for the log."""
    code = os.waitstatus_to_exitcode(status)
    return f"exit {code}" if code >= 0 else f"killed by {signal.Signals(-code).name}"


def _kill(pid: int, sig: int = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def _refusal(hello: Mapping[str, Any]) -> str | None:
    """Why a client that said ``hello`` may not talk to this server, or None."""
    mine = protocol.hello()
    for key in ("op", "protocol", "version", "store_format"):
        if hello.get(key) != mine[key]:
            return f"{key} {hello.get(key)!r}, this server's is {mine[key]!r}"
    return None


async def _readable(conn: socket.socket) -> None:
    """Wait until ``conn`` has something to read (or was closed)."""
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(conn.fileno(), wake)
    try:
        await asyncio.wait_for(ready, _MESSAGE_TIMEOUT * 6)
    finally:
        loop.remove_reader(conn.fileno())

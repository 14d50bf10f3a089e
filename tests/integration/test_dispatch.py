"""`mailledger dispatch`: routes by To/Cc to real handler modules (tests/handlers/).

The handlers are imported the way a user's are: by ``module:function`` from the
config's directory / ``dispatch.import_path``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pipeline.cli import main
from pipeline.dispatch import Consumer, DispatchConfig, consume, parse_dispatch
from pipeline.store import MessageStore
from stores.errors import ConfigError, MailledgerError

HANDLERS_DIR = Path(__file__).resolve().parent  # holds the `handlers` package

ROUTES = f"""
[dispatch]
default = "handlers.lists:inbox"
import_path = ["{HANDLERS_DIR}"]
[[dispatch.routes]]
to = "jobs@example.org"
handler = "handlers.jobs:process_jobs"
[[dispatch.routes]]
to = ["*@lists.example.org", "*@lists.example.net"]
handler = "handlers.lists:process"
"""

ACCOUNT = """
[accounts.pop]
type = "pop3"
host = "127.0.0.1"
tls = "none"
username = "me"
password_env = "NOT_NEEDED_FOR_DISPATCH"
"""


def _mail(n: int, to: str, subject: str, *, cc: str = "") -> bytes:
    cc_line = f"Cc: {cc}\r\n" if cc else ""
    return (
        f"From: someone@example.net\r\nTo: {to}\r\n{cc_line}Subject: {subject}\r\n"
        f"Date: Wed, 0{1 + n % 9} Jul 2026 09:00:00 +0000\r\n"
        f"Message-ID: <d{n}@example.net>\r\n\r\nbody {n}\r\n"
    ).encode()


MAILS = [
    _mail(1, "Jobs@Example.org", "job: python dev"),  # route 1 (case-insensitive)
    _mail(2, "Ann <ann@example.com>", "job: keep me", cc="jobs@example.org"),  # route 1 by Cc
    _mail(3, "debian-devel@lists.example.org", "list post"),  # route 2, glob
    _mail(4, "jobs@example.org, x@lists.example.net", "job and list"),  # first route wins
    _mail(5, "me@example.com", "hello"),  # default
]


@pytest.fixture(autouse=True)
def _fresh_handlers() -> Iterator[None]:
    from handlers import jobs, lists

    for calls in (jobs.CALLS, lists.CALLS, lists.DEFAULT_CALLS):
        calls.clear()
    yield


class Env:
    def __init__(self, tmp: Path, dispatch: str = ROUTES) -> None:
        self.tmp = tmp
        self.store = tmp / "store"
        self.config = tmp / "config.toml"
        self.config.write_text(ACCOUNT + dispatch)
        with MessageStore.open(self.store) as st:
            for i, raw in enumerate(MAILS):
                st.add(f"u{i}", raw)

    def run(self, *args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
        code = main(
            ["--store", str(self.store), "dispatch", "--config", str(self.config), *args],
            env={"HOME": str(self.tmp)},
        )
        out, err = capsys.readouterr()
        return code, out, err

    def open(self) -> MessageStore:
        return MessageStore.open(self.store, create=False)


@pytest.fixture
def env(tmp_path: Path) -> Env:
    return Env(tmp_path)


# -- the configuration --------------------------------------------------------------


def test_routes_parse_and_route_first_match_wins(tmp_path: Path) -> None:
    import tomllib

    cfg = parse_dispatch(tomllib.loads(ROUTES)["dispatch"], tmp_path / "c.toml")
    assert isinstance(cfg, DispatchConfig)
    assert cfg.handler_for(["jobs@example.org"]) == "handlers.jobs:process_jobs"
    assert cfg.handler_for(["JOBS@example.ORG"]) == "handlers.jobs:process_jobs"
    assert cfg.handler_for(["a@lists.example.net"]) == "handlers.lists:process"
    assert cfg.handler_for(["a@lists.example.net", "jobs@example.org"]) == (
        "handlers.jobs:process_jobs"
    )
    assert cfg.handler_for(["me@example.com"]) == "handlers.lists:inbox"
    assert cfg.handler_for([]) == "handlers.lists:inbox"
    assert cfg.import_path == (tmp_path, HANDLERS_DIR)
    no_default = parse_dispatch({"routes": [{"to": "a@b", "handler": "m:f"}]}, None)
    assert no_default.handler_for(["x@y"]) is None


@pytest.mark.parametrize(
    ("table", "key", "says"),
    [
        ({"routes": [{"to": "a@b", "handler": "nocolon"}]}, "dispatch.routes[0].handler",
         "module:function"),
        ({"routes": [{"handler": "m:f"}]}, "dispatch.routes[0].to", "missing"),
        ({"routes": [{"to": "a@b", "hadnler": "m:f"}]}, "dispatch.routes[0].hadnler",
         "unknown key"),
        ({"routes": [{"to": "a b@c", "handler": "m:f"}]}, "dispatch.routes[0].to", "glob"),
        ({"routes": {"to": "a@b"}}, "dispatch.routes", "array of tables"),
        ({"defualt": "m:f"}, "dispatch.defualt", "unknown key"),
        ({"default": 3}, "dispatch.default", "module:function"),
        ({"default": "m:f", "import_path": ["nowhere"]}, "dispatch.import_path", "no such"),
        ({}, "dispatch", "no routes and no default"),
    ],
)  # fmt: skip
def test_config_mistakes_name_the_file_and_the_key(
    tmp_path: Path, table: dict[str, Any], key: str, says: str
) -> None:
    with pytest.raises(ConfigError) as info:
        parse_dispatch(table, tmp_path / "config.toml")
    text = str(info.value)
    assert f"{tmp_path / 'config.toml'}: {key}:" in text and says in text


def test_a_handler_that_cannot_be_imported_is_a_config_error_and_nothing_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = Env(tmp_path, ROUTES.replace("handlers.lists:process", "handlers.lists:nope"))
    code, _, err = env.run(capsys=capsys)
    assert code == 2
    assert "dispatch.routes[1].handler: cannot load handlers.lists:nope" in err
    assert str(env.config) in err
    from handlers import jobs

    assert jobs.CALLS == []  # not even the good handler ran
    with env.open() as st:
        assert len(st.message_ids()) == 5


def test_handler_modules_are_found_in_the_config_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "mlhandler_local.py").write_text(
        "def take_all(pairs):\n    return [mid for mid, _ in pairs]\n"
    )
    env = Env(tmp_path, '[dispatch]\ndefault = "mlhandler_local:take_all"\n')
    code, out, _ = env.run(capsys=capsys)
    assert code == 0 and "given=5 finished=5 deleted=5" in out
    assert str(tmp_path) not in sys.path  # the addition is undone


# -- destructive dispatch (the seed's flow) -----------------------------------------------


def test_each_handler_gets_one_call_and_finished_messages_are_deleted(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    from handlers import jobs, lists

    code, out, err = env.run(capsys=capsys)
    assert code == 0, err
    assert [sorted(m for m, _ in call) for call in jobs.CALLS] == [
        ["d1@example.net", "d2@example.net", "d4@example.net"]
    ]
    assert [[m for m, _ in call] for call in lists.CALLS] == [["d3@example.net"]]
    assert [[m for m, _ in call] for call in lists.DEFAULT_CALLS] == [["d5@example.net"]]
    assert "dispatch handlers.jobs:process_jobs: given=3 finished=2 deleted=2" in out
    with env.open() as st:
        assert st.message_ids() == ["d2@example.net"]  # "keep me": not finished, stays
        deleted = st.query(
            "select message_id, actor, reason from events where type = 'message-deleted'"
            " order by message_id"
        ).to_pylist()
    assert deleted == [
        {"message_id": "d1@example.net", "actor": "handlers.jobs:process_jobs",
         "reason": "dispatched"},
        {"message_id": "d3@example.net", "actor": "handlers.lists:process",
         "reason": "dispatched"},
        {"message_id": "d4@example.net", "actor": "handlers.jobs:process_jobs",
         "reason": "dispatched"},
        {"message_id": "d5@example.net", "actor": "handlers.lists:inbox",
         "reason": "dispatched"},
    ]  # fmt: skip

    jobs.CALLS.clear()
    code, out, _ = env.run(capsys=capsys)
    assert code == 0 and [[m for m, _ in c] for c in jobs.CALLS] == [["d2@example.net"]]


def test_a_failing_handler_loses_nothing_and_the_others_still_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = Env(tmp_path)
    with MessageStore.open(env.store) as st:
        st.add("u9", _mail(9, "x@lists.example.org", "boom"))
    code, out, err = env.run(capsys=capsys)
    assert code == 1
    assert "handler handlers.lists:process failed" in err and "the list archive is down" in err
    assert "Traceback" in err
    assert "FAILED: RuntimeError" in out
    with env.open() as st:
        ids = st.message_ids()
    assert {"d3@example.net", "d9@example.net"} <= set(ids)  # the failed handler's stay
    assert "d1@example.net" not in ids and "d5@example.net" not in ids  # others finished


def test_a_handler_returning_none_deletes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = Env(tmp_path, '[dispatch]\ndefault = "handlers.jobs:forgetful"\n'
              f'import_path = ["{HANDLERS_DIR}"]\n')  # fmt: skip
    code, _, err = env.run(capsys=capsys)
    assert code == 1 and "returned None" in err
    with env.open() as st:
        assert len(st.message_ids()) == 5


def test_without_a_default_unrouted_messages_stay(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = Env(tmp_path, ROUTES.replace('default = "handlers.lists:inbox"\n', ""))
    code, out, _ = env.run(capsys=capsys)
    assert code == 0 and "unrouted: 1" in out
    with env.open() as st:
        assert st.message_ids() == ["d2@example.net", "d5@example.net"]


def test_dry_run_shows_the_routing_and_calls_nothing(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    from handlers import jobs, lists

    code, out, err = env.run("--dry-run", "--json", capsys=capsys)
    assert code == 0
    report = json.loads(out)
    assert report["dry_run"] is True
    given = {k: sorted(v["given"]) for k, v in report["handlers"].items()}
    assert given == {
        "handlers.jobs:process_jobs": ["d1@example.net", "d2@example.net", "d4@example.net"],
        "handlers.lists:process": ["d3@example.net"],
        "handlers.lists:inbox": ["d5@example.net"],
    }
    assert "dispatch handlers.lists:process: given=1" in err
    assert jobs.CALLS == lists.CALLS == lists.DEFAULT_CALLS == []
    with env.open() as st:
        assert len(st.message_ids()) == 5


# -- the non-destructive consumer -----------------------------------------------------


def test_consumer_hands_each_new_message_over_once_and_deletes_nothing(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    from handlers import jobs

    code, out, _ = env.run("--consumer", "crm", capsys=capsys)
    assert code == 0 and "consumer crm: checkpoint 0->1" in out
    assert sorted(m for m, _ in jobs.CALLS[0]) == [
        "d1@example.net", "d2@example.net", "d4@example.net"
    ]  # fmt: skip
    with env.open() as st:
        assert len(st.message_ids()) == 5  # nothing deleted
    state = json.loads((env.store / "consumers" / "crm.json").read_text())
    # "keep me" (seq 2) was not acknowledged: the checkpoint stops before it;
    # what was acknowledged above it is remembered, not handed over again
    assert state == {"name": "crm", "seq": 1, "acked": [3, 4, 5]}

    jobs.CALLS.clear()
    code, out, _ = env.run("--consumer", "crm", capsys=capsys)
    assert code == 0 and [[m for m, _ in c] for c in jobs.CALLS] == [["d2@example.net"]]

    # a new message: only it is handed over; another consumer has its own checkpoint
    with MessageStore.open(env.store) as st:
        st.add("u7", _mail(7, "jobs@example.org", "job: new"))
        st.add("u1-again", MAILS[0])  # a new location of a known message: not new
    jobs.CALLS.clear()
    code, out, _ = env.run("--consumer", "crm", capsys=capsys)
    assert [[m for m, _ in c] for c in jobs.CALLS] == [["d2@example.net", "d7@example.net"]]
    jobs.CALLS.clear()
    code, out, _ = env.run("--consumer", "audit", capsys=capsys)
    assert code == 0 and len(jobs.CALLS[0]) == 4


def test_consumer_with_a_failing_handler_stalls_and_retries(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from handlers import lists

    env = Env(tmp_path)
    with MessageStore.open(env.store) as st:
        st.add("u9", _mail(9, "x@lists.example.org", "boom"))
    code, out, err = env.run("--consumer", "c", capsys=capsys)
    assert code == 1 and "handlers.lists:process failed" in err
    assert "checkpoint 0->1" in out  # seq 2 (keep me) and 3 (the failed list) stay open
    lists.CALLS.clear()
    code, _, _ = env.run("--consumer", "c", capsys=capsys)
    assert [sorted(m for m, _ in c) for c in lists.CALLS] == [["d3@example.net", "d9@example.net"]]


def test_consumer_generator_resumes_after_kill_9(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    with MessageStore.open(store_dir) as st:
        for i in range(8):
            st.add(f"u{i}", _mail(i, "me@example.com", f"n{i}"))
    seen = tmp_path / "seen.txt"
    script = textwrap.dedent(
        f"""
        import os, signal
        from pipeline.dispatch import consume
        from pipeline.store import MessageStore
        store = MessageStore.open({str(store_dir)!r}, create=False)
        for n, (mid, msg) in enumerate(consume(store, "indexer"), 1):
            with open({str(seen)!r}, "a") as fh:
                fh.write(mid + "\\n"); fh.flush(); os.fsync(fh.fileno())
            if n == 3 and os.environ.get("DIE"):
                os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    run = [sys.executable, "-c", script]
    died = subprocess.run(run, env={**os.environ, "DIE": "1"}, capture_output=True)
    assert died.returncode == -9
    state = json.loads((store_dir / "consumers" / "indexer.json").read_text())
    assert state["seq"] == 2  # two acknowledged; the third was in the loop body
    done = subprocess.run(run, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    lines = seen.read_text().split()
    assert sorted(set(lines)) == sorted(f"d{i}@example.net" for i in range(8))
    assert len(lines) == 9 and lines.count("d2@example.net") == 2  # at-least-once: one again
    with MessageStore.open(store_dir) as st:
        assert list(consume(st, "indexer")) == []  # caught up: nothing more


def test_a_consumer_is_used_by_one_process_at_a_time(store: MessageStore) -> None:
    first = Consumer(store, "one")
    first.open()
    with pytest.raises(MailledgerError, match="in use"), Consumer(store, "one"):
        pass
    first.close()
    with Consumer(store, "one") as again:
        assert again.seq == 0
    with pytest.raises(MailledgerError, match="consumer name"):
        Consumer(store, "../escape")


def test_checkpoint_moves_over_the_contiguous_acknowledged_prefix(store: MessageStore) -> None:
    for i in range(5):
        store.add(f"u{i}", _mail(i, "me@example.com", f"n{i}"))
    with Consumer(store, "c") as c:
        bound, rows = c.pending()
        delivered = [r["seq"] for r in rows]
        assert (bound, delivered) == (5, [1, 2, 3, 4, 5])
        assert c.ack([2], delivered, bound) == 0
        assert c.ack([1], delivered, bound) == 2
        assert c.ack([4, 5], delivered, bound) == 2 and c.acked == {4, 5}
        assert c.ack([3], delivered, bound) == 5 and c.acked == set()
    store.delete("d0@example.net")  # an event that is no new message: passed over
    with Consumer(store, "c") as c:
        bound, rows = c.pending()
        assert (c.seq, rows) == (5, [])
        assert c.ack([], [], bound) == 6

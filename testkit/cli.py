"""``mailledger sync`` run in-process against a loopback Dovecot's users."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pipeline.cli import main
from pipeline.store import MessageStore

__all__ = ["SyncEnv"]


class SyncEnv:
    """A config file for some Dovecot users, a store, and a way to run the CLI."""

    def __init__(self, tmp: Path, dovecot: Any, users: dict[str, dict[str, object]]) -> None:
        self.dv = dovecot
        self.store = tmp / "store"
        self.config = tmp / "config.toml"
        self.metrics = tmp / "metrics.prom"
        self.config.write_text("\n".join(dovecot.account_toml(u, **kw) for u, kw in users.items()))
        self.env = {**dovecot.password_env(), "HOME": str(tmp)}

    def sync(self, *args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
        code = main(
            [
                "--store",
                str(self.store),
                "sync",
                "--config",
                str(self.config),
                "--json",
                "--metrics-file",
                str(self.metrics),
                *args,
            ],
            env=self.env,
        )
        out, err = capsys.readouterr()
        assert out.strip(), f"exit {code}, no JSON report; stderr:\n{err}"
        return code, json.loads(out)

    def open(self) -> MessageStore:
        return MessageStore.open(self.store, create=False)

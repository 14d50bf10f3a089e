"""``pipeline.serve.protocol``'s messages on a real socket pair."""

from __future__ import annotations

import os
import socket
from typing import Any

import pytest

from pipeline.serve import protocol


def test_a_message_sent_whole_with_its_descriptors_is_not_followed_by_an_empty_send() -> None:
    # A worker reads its command and closes the channel at once: an empty send after
    # the whole message was EPIPE to the server, which then killed the worker that had
    # taken the command and ran it again in another (1 command in 6 of a loop).
    pair = socket.socketpair()
    theirs = pair[1]

    class PeerReadsAndCloses(socket.socket):
        def sendmsg(self, *args: Any) -> int:
            sent = super().sendmsg(*args)
            message, fds = protocol.recv_msg(theirs, max_fds=3)
            assert message == {"op": "run"} and len(fds) == 1
            os.close(fds[0])
            theirs.close()
            return sent

    r, w = os.pipe()
    with PeerReadsAndCloses(fileno=pair[0].detach()) as ours:
        protocol.send_msg(ours, {"op": "run"}, fds=[w])  # (raised BrokenPipeError)
    assert theirs.fileno() == -1  # (the peer did read it all and close)
    os.close(r)
    os.close(w)


def test_a_message_and_its_descriptors_arrive_whole() -> None:
    ours, theirs = socket.socketpair()
    r, w = os.pipe()
    with ours, theirs:
        protocol.send_msg(ours, {"op": "run", "argv": ["search", "x" * 100_000]}, fds=[w])
        message, fds = protocol.recv_msg(theirs, max_fds=3)
        assert message["argv"] == ["search", "x" * 100_000] and len(fds) == 1
        os.write(fds[0], b"through the passed descriptor")
        os.close(fds[0])
    os.close(w)
    with os.fdopen(r, "rb") as printed:
        assert printed.read() == b"through the passed descriptor"


def test_the_thin_json_writes_and_reads_what_json_does() -> None:
    # (the thin client encodes and scans with CPython's _json, not the json module)
    import json

    messages = [
        protocol.hello(),
        {
            "op": "run",
            "argv": ["search", 'subject:"Grüße" -from:x', "\x00\x1f\u2028\ud7ff", "🙂"],
            "env": {"LANG": "de_DE.UTF-8", "EMPTY": "", "PATH": "/usr/bin:/bin"},
            "umask": 0o077,
            "stdio": {"stdout": {"encoding": "utf-8", "errors": None, "line_buffering": True}},
        },
        {"exit": 0},
        {"uptime": 12.5, "big": 2**70, "neg": -1, "list": [[], {}, [None]]},
    ]
    for message in messages:
        text = protocol.dumps(message)
        assert text == json.dumps(message)
        assert protocol.loads(text) == message == json.loads(text)
    assert protocol.loads(' {"a": 1}\n') == {"a": 1}
    for broken in ("", "{", '{"a": 1} {}', "[1,]"):
        with pytest.raises(ValueError):
            protocol.loads(broken)

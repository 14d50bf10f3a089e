"""``pipeline.serve.protocol``'s messages on a real socket pair."""

from __future__ import annotations

import os
import socket
from typing import Any

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

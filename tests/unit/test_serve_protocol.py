"""``pipeline.serve.protocol``'s messages on a real socket pair."""

from __future__ import annotations

import os
import socket

from pipeline.serve import protocol


def test_a_message_sent_whole_with_its_descriptors_is_not_followed_by_an_empty_send() -> None:
    # A worker reads its command and closes the channel at once: an empty send after
    # the whole message was EPIPE to the server, which then killed the worker that had
    # taken the command and ran it again in another (1 command in 6 of a loop).
    ours, theirs = socket.socketpair()
    r, w = os.pipe()
    real_send_fds = socket.send_fds

    def send_then_peer_reads_and_closes(sock: socket.socket, *args: object) -> int:
        sent = real_send_fds(sock, *args)  # type: ignore[arg-type]
        message, fds = protocol.recv_msg(theirs, max_fds=3)
        assert message == {"op": "run"} and len(fds) == 1
        for fd in fds:
            os.close(fd)
        theirs.close()
        return sent

    try:
        socket.send_fds = send_then_peer_reads_and_closes  # type: ignore[assignment]
        protocol.send_msg(ours, {"op": "run"}, fds=[w])  # (raised BrokenPipeError)
    finally:
        socket.send_fds = real_send_fds  # type: ignore[assignment]
        ours.close()
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

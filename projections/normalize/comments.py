"""RFC 5322 comments, ``(...)`` nested to any depth: the one rule the Message-ID,
List-Id and address scanners share for skipping them token by token."""

from __future__ import annotations

__all__ = ["comment_depth"]


def comment_depth(depth: int, token: str) -> int:
    """The nesting after ``token`` inside a comment ``depth`` deep (0: it closed).

    A scanner that opened a comment passes each token here until the depth is
    back to 0; the token itself is part of the comment and dropped."""
    if token == "(":
        return depth + 1
    if token == ")":
        return depth - 1
    return depth

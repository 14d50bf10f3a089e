"""The synthetic corpus generator gives realistic, deterministic mail (testkit/corpus.py)."""

from __future__ import annotations

import email
import mailbox
import re
from collections import Counter
from pathlib import Path

import pytest

from testkit.corpus import (
    MAX_SIZE,
    MIN_SIZE,
    absent_message_ids,
    generate_messages,
    write_maildir,
    write_mbox,
)

N = 300
SEED = 1
_ID_RE = re.compile(r"<[^<>\s]+>")


@pytest.fixture(scope="module")
def corpus() -> list[tuple[str, bytes]]:
    return list(generate_messages(N, SEED))


@pytest.fixture(scope="module")
def parsed(corpus: list[tuple[str, bytes]]) -> list[email.message.Message]:
    return [email.message_from_bytes(data) for _, data in corpus]


def test_same_seed_gives_same_bytes_and_names(corpus: list[tuple[str, bytes]]) -> None:
    assert list(generate_messages(N, SEED)) == corpus
    assert list(generate_messages(N, SEED + 1)) != corpus
    assert len(corpus) == N


def test_sizes_are_in_range_with_lf_line_endings(corpus: list[tuple[str, bytes]]) -> None:
    sizes = [len(data) for _, data in corpus]
    assert min(sizes) >= MIN_SIZE and max(sizes) <= MAX_SIZE
    assert 9 * 1024 < sum(sizes) / len(sizes) < 13 * 1024
    assert not any(b"\r" in data for _, data in corpus)


def test_names_are_unique_and_sort_by_delivery(corpus: list[tuple[str, bytes]]) -> None:
    names = [name for name, _ in corpus]
    assert len(set(names)) == N
    assert all(re.fullmatch(r"\d{10}\.M\d+P\d+\.bench", name) for name in names)
    epochs = [int(name.split(".")[0]) for name in names]
    assert epochs == sorted(epochs)


def test_every_message_parses_with_the_promised_headers(
    parsed: list[email.message.Message],
) -> None:
    for msg in parsed:
        for header in ("From", "To", "Subject", "MIME-Version", "Content-Type", "Received"):
            assert msg[header], header
        assert not msg.defects
    assert sum(1 for m in parsed if m["Message-ID"]) >= N - 5
    assert sum(1 for m in parsed if m["Date"]) >= N - 5
    assert 0.15 < sum(1 for m in parsed if m["List-Id"]) / N < 0.45
    types = Counter(m.get_content_type() for m in parsed)
    assert types["text/plain"] > N / 2
    assert types["multipart/alternative"] > 0 and types["multipart/mixed"] > 0
    raw_headers = "".join(f"{m['From']} {m['To']} {m['Subject']}" for m in parsed)
    assert "=?UTF-8?B?" in raw_headers and "=?ISO-8859-1?Q?" in raw_headers
    senders = {m["From"] for m in parsed}
    assert len(senders) > 50


def test_replies_reference_generated_or_deliberately_absent_ids(
    parsed: list[email.message.Message],
) -> None:
    present = {m["Message-ID"] for m in parsed if m["Message-ID"]}
    absent = absent_message_ids(N, SEED)
    assert absent and not absent & {i.strip("<>") for i in present}
    replies = [m for m in parsed if m["In-Reply-To"]]
    assert len(replies) > N / 3
    for m in replies:
        refs = _ID_RE.findall(m["References"])
        assert 1 <= len(refs) <= 20
        assert refs[-1] == m["In-Reply-To"]
        for ref in refs:
            assert ref in present or ref.strip("<>") in absent, ref
        subject = m["Subject"]
        assert re.match(r"(Re|RE|AW|Odp|Fwd|RE\[\d+\]): ", subject), subject


def test_duplicate_ids_and_byte_identical_copies_occur(corpus: list[tuple[str, bytes]]) -> None:
    copies = Counter(data for _, data in corpus)
    assert max(copies.values()) >= 2
    by_id: dict[bytes, set[bytes]] = {}
    for _, data in corpus:
        found = re.search(rb"^Message-ID: (<[^>]+>)$", data, re.MULTILINE)
        if found:
            by_id.setdefault(found.group(1), set()).add(data)
    assert any(len(bodies) > 1 for bodies in by_id.values())


def test_write_maildir_makes_maildirpp_folders_holding_n_files(tmp_path: Path) -> None:
    root = tmp_path / "Maildir"
    total = write_maildir(root, N, SEED)
    folders = [root, root / ".Archive", root / ".lists.dev"]
    files = []
    for folder in folders:
        for sub in ("cur", "new", "tmp"):
            assert (folder / sub).is_dir()
        assert not any((folder / "tmp").iterdir())
        files += [p for sub in ("cur", "new") for p in (folder / sub).iterdir()]
    assert len(files) == N
    assert total == sum(p.stat().st_size for p in files)
    in_cur = [p.name for p in files if p.parent.name == "cur"]
    assert all(re.fullmatch(r"\d{10}\.M\d+P\d+\.bench:2,[FRS]*", name) for name in in_cur)
    assert sum(name.endswith(":2,S") for name in in_cur) > len(in_cur) / 2
    counts = {f.name: sum(1 for p in files if f in p.parents) for f in folders[1:]}
    assert all(counts.values())
    assert sum(1 for p in files if p.parent.parent == root) > N / 2


def test_write_mbox_quotes_from_lines_and_holds_n_messages(tmp_path: Path) -> None:
    path = tmp_path / "all.mbox"
    total = write_mbox(path, N, SEED)
    raw = path.read_bytes()
    assert total == len(raw)
    assert raw.startswith(b"From ") and b"\n>From what I can tell" in raw
    assert len(mailbox.mbox(path)) == N

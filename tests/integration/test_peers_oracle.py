"""notmuch as the oracle of the search language: on a small generated Maildir
indexed by a real ``notmuch new`` and imported into a real store, every probe of
``testkit.peers`` that must agree (``make bench`` prints them all, on corpora of
any size) counts what ``notmuch count`` counts."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from pipeline.sources.maildir import import_maildir
from pipeline.store import MessageStore
from projections.queries import compile_query
from projections.search import parse
from projections.search.terms import FIELDS
from testkit.corpus import write_maildir
from testkit.peers import CORPUS_REASONS, SAMPLE_SQL, Notmuch, Probe, Sample, probes
from tests.conftest import StepClock

MESSAGES = 50

# The probes by what they cover; their values that need the corpus (a Message-ID,
# a thread) are filled in from the store by the fixture.
_SHAPES = probes(Sample("", "", ""))
AGREEING = [
    p.covers for p in _SHAPES if p.notmuch is not None and p.differs in {"", *CORPUS_REASONS}
]

pytestmark = pytest.mark.skipif(
    shutil.which("notmuch") is None,
    reason="notmuch not installed (apt-get install -y notmuch; .ci/run does this)",
)


@dataclass(frozen=True)
class Indexed:
    notmuch: Notmuch
    store: MessageStore
    files: int
    probes: dict[str, Probe]


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Indexed]:
    root = tmp_path_factory.mktemp("peers")
    maildir = root / "maildir"
    write_maildir(maildir, MESSAGES, seed=1)
    files = sum(1 for p in maildir.rglob("*") if p.is_file())
    notmuch = Notmuch(maildir, root / "notmuch")
    notmuch.setup()
    subprocess.run(notmuch.index_command(), env=notmuch.env, check=True, capture_output=True)
    with MessageStore.open(root / "store", clock=StepClock(), run_id="test-run") as store:
        import_maildir(store, maildir)
        sample = Sample(**store.query(SAMPLE_SQL).to_pylist()[0])
        yield Indexed(notmuch, store, files, {p.covers: p for p in probes(sample)})


def _mailledger_count(store: MessageStore, query: str) -> int:
    # (notmuch counts relative dates back from the clock: so does this; they round
    # to a day or coarser, so the two agree but across a midnight)
    now = datetime.now(UTC)
    count: int = store.search(compile_query(parse(query, now=now)), "count").column(0)[0].as_py()
    return count


def test_every_field_of_the_language_has_a_probe() -> None:
    probed = {f for f in FIELDS for p in _SHAPES if f"{f}:" in p.mailledger}
    assert probed == set(FIELDS)
    operators = " ".join(p.mailledger for p in _SHAPES)
    for op in (" AND ", " OR ", "NOT ", " -", "(", "*", '"'):
        assert op in operators


def test_the_small_corpus_holds_one_file_a_message_id(indexed: Indexed) -> None:
    # so that a difference on purpose that needs two files of one Message-ID
    # (CORPUS_REASONS) cannot occur here: those probes must agree too
    every = indexed.probes["every message"]
    assert indexed.notmuch.count(every) == indexed.files == MESSAGES
    assert _mailledger_count(indexed.store, every.mailledger) == MESSAGES


def test_the_probes_find_something_in_the_small_corpus(indexed: Indexed) -> None:
    counts = [indexed.notmuch.count(indexed.probes[c]) for c in AGREEING]
    found = [c for c, n in zip(AGREEING, counts, strict=True) if n and n < MESSAGES]
    assert len(found) >= len(AGREEING) // 2, found


@pytest.mark.parametrize("covers", AGREEING)
def test_mailledger_counts_what_notmuch_counts(indexed: Indexed, covers: str) -> None:
    probe = indexed.probes[covers]
    expected = indexed.notmuch.count(probe)
    assert _mailledger_count(indexed.store, probe.mailledger) == expected, (
        f"{probe.mailledger!r} (notmuch: {probe.notmuch!r})"
    )


def test_the_peers_work_apart_from_the_corpus(indexed: Indexed) -> None:
    maildir = indexed.notmuch.maildir
    assert not any(p.name.startswith((".notmuch", ".mu")) for p in Path(maildir).iterdir())


# -- real mail: the notmuch corpus (Carl Worth's, signed, S/MIME, inline HTML) ---
# (mailledger's query, notmuch's when it is spelled otherwise)
REAL_MAIL: list[tuple[str, str]] = [
    ('from:"Carl Worth"', ""),
    ("from:Carl", ""),
    ("from:carl*", ""),
    ("from:worth", ""),
    ('from:"Keith Packard" or from:Carl', ""),
    ('to:"Carl Worth"', ""),
    ("carl", ""),  # (a bare word: the names and addresses too)
    ('"Carl Worth"', ""),
    ("cworth", ""),
    ("boost or python", ""),
    ("from:carl and not subject:notmuch", ""),  # (0: each of his is about notmuch)
    ("cworth and not from:carl", ""),
    ("has:attachment", "tag:attachment"),  # (8 detached signatures, 4 S/MIME envelopes)
    ("filename:signature.asc", "attachment:signature.asc"),
    ("hunter2", ""),  # (an inline text/html file with a name: body text)
    ("date:..10y from:carl", ""),
    ("date:..200M from:keith", ""),
    ("date:..204M", ""),  # (to the end of the month 204 months back: 74 of them)
]
# (not a question of the whole corpus: two of its files notmuch leaves out, one
# without a Message-ID, which mailledger stores)


@pytest.fixture(scope="module")
def real_mail(
    tmp_path_factory: pytest.TempPathFactory, notmuch_corpus: Path
) -> Iterator[tuple[Notmuch, MessageStore]]:
    root = tmp_path_factory.mktemp("real-mail")
    notmuch = Notmuch(notmuch_corpus, root / "notmuch")  # (the corpus read in place)
    notmuch.setup()
    subprocess.run(notmuch.index_command(), env=notmuch.env, check=True, capture_output=True)
    with MessageStore.open(root / "store", clock=StepClock(), run_id="test-run") as store:
        import_maildir(store, notmuch_corpus)
        yield notmuch, store


@pytest.mark.corpus
@pytest.mark.parametrize(("query", "theirs"), REAL_MAIL, ids=[q for q, _ in REAL_MAIL])
def test_real_mail_counts_what_notmuch_counts(
    real_mail: tuple[Notmuch, MessageStore], query: str, theirs: str
) -> None:
    notmuch, store = real_mail
    expected = notmuch.count(Probe(query, query, theirs or query, None))
    assert _mailledger_count(store, query) == expected


@pytest.mark.corpus
def test_real_mail_finds_carl_worth_by_his_name(real_mail: tuple[Notmuch, MessageStore]) -> None:
    _, store = real_mail
    # (the counts above would agree at 0 too: his mail is there, found by name alone)
    assert _mailledger_count(store, 'from:"Carl Worth"') == 12
    assert _mailledger_count(store, "from:Carl -from:cworth@cworth.org") == 0
    assert _mailledger_count(store, "has:attachment") == 7

"""notmuch and mu beside mailledger: the same Maildir indexed by each, and the same
questions asked in each one's search language.

``probes(sample)`` is the list of queries: every field and operator of
mailledger's language (``projections.search``), each written in notmuch's and
mu's dialect too (``None`` where the tool has no such field). A probe whose
counts are known to differ names the reason (a key of ``REASONS``); every other
probe must count what notmuch counts, which makes notmuch an oracle for the
language on a corpus of any size (``bench.peers`` prints the table;
``tests/integration/test_peers_oracle.py`` asserts the agreeing ones).

``Notmuch`` and ``Mu`` each keep their own configuration and database in a
directory of their own (``NOTMUCH_CONFIG``, ``--muhome``), never the user's, and
read the corpus in place. Both read calendar dates in the process's time zone:
they run with ``TZ=UTC``, as mailledger reads them by default.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "CORPUS_REASONS",
    "REASONS",
    "Mu",
    "Notmuch",
    "Probe",
    "Sample",
    "missing_tools",
    "probes",
]

REASONS: dict[str, str] = {
    "stem": "notmuch and mu stem an unquoted word (`review` also finds `reviewed`,"
    ' `reviews`); mailledger matches the word as written. Quoted (`"review"`), the'
    " word is not stemmed and the counts agree.",
    "dup-id": "two different files with one Message-ID: notmuch indexes the words and"
    " recipients of both under the one message (mu counts either file's size),"
    " mailledger those of the first file it stored (the first `message-seen` of an"
    " id wins).",
}
"""Why a probe's counts differ on purpose, by the key a probe names."""

CORPUS_REASONS = frozenset({"dup-id"})
"""Reasons that apply only where the corpus holds such messages (two files of one
Message-ID): on a corpus without them, a probe naming one of these must agree."""


@dataclass(frozen=True)
class Probe:
    """One question in three dialects. ``notmuch`` / ``mu``: None where that tool
    has no such field; ``mu_related``: mu's ``--include-related`` (its threads).
    ``differs``: a key of ``REASONS`` when the counts are expected to differ from
    notmuch's, "" when they must agree."""

    covers: str
    mailledger: str
    notmuch: str | None
    mu: str | None
    differs: str = ""
    mu_related: bool = False


@dataclass(frozen=True)
class Sample:
    """Values drawn from the corpus that some probes need: a Message-ID, a
    message of the largest thread, and that thread's subject as written."""

    message_id: str
    thread_id: str
    thread_subject: str


SAMPLE_SQL = """
WITH threads AS (
  SELECT n.thread_id, count(*) AS messages, min(m.message_id) AS first_id,
         min(m.subject) FILTER (WHERE lower(m.subject) = m.subject_key) AS subject
  FROM thread_nodes n JOIN messages m USING (message_id)
  GROUP BY n.thread_id)
SELECT (SELECT message_id FROM messages
        WHERE message_id NOT LIKE '%@synthetic.mailledger'
        ORDER BY date_iso DESC NULLS LAST, message_id LIMIT 1) AS message_id,
       first_id AS thread_id, subject AS thread_subject
FROM threads
WHERE subject IS NOT NULL AND subject NOT LIKE '%"%'
ORDER BY messages DESC, thread_id LIMIT 1
"""
"""The values some probes need, drawn from the store (the same for the same corpus):
the newest message, and the largest thread whose first subject has no reply prefix."""


def _ere(text: str) -> str:
    """``text`` as a POSIX extended regular expression matching it literally."""
    return re.sub(r"([.\[\]()*+?{}|^$\\])", r"\\\1", text)


def _quote(text: str) -> str:
    """``text`` inside double quotes, its quotes and backslashes escaped."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


# The reply and forward prefixes the corpus writes (testkit.corpus): notmuch's
# regex must allow them where mailledger's subject key drops them.
_PREFIXES = r"^((Re|RE|AW|Odp|Fwd)(\[[0-9]+\])?: )*"


_DUP = "dup-id"


def probes(sample: Sample) -> list[Probe]:
    """Every field and operator of the language, in the three dialects."""
    mid, tid = sample.message_id, sample.thread_id
    exact = _PREFIXES + _ere(sample.thread_subject) + "$"
    mu_domain = r"from:/example\.org$/"  # mu's from: matches a whole address or name
    return [
        Probe("every message", "*", "*", '""'),
        Probe(
            "from: address",
            "from:alex@home.example.net",
            "from:alex@home.example.net",
            "from:alex@home.example.net",
        ),
        Probe("from: domain", "from:example.org", "from:example.org", mu_domain),
        Probe("from: prefix", "from:alex*", "from:alex*", "from:alex*"),
        Probe(
            "to: address (To and Cc)",
            "to:alex@home.example.net",
            "to:alex@home.example.net",
            "recip:alex@home.example.net",
            _DUP,
        ),
        Probe(
            "cc: address (To and Cc)",
            "cc:alex@home.example.net",
            "to:alex@home.example.net",
            "recip:alex@home.example.net",
            _DUP,
        ),
        Probe("subject: word", "subject:release", "subject:release", "subject:release"),
        Probe(
            "subject: phrase",
            'subject:"meeting notes"',
            'subject:"meeting notes"',
            'subject:"meeting notes"',
        ),
        Probe("subject: prefix", "subject:migrat*", "subject:migrat*", "subject:migrat*"),
        Probe(
            "subject:= exact (reply prefixes dropped)",
            f"subject:={_quote(sample.thread_subject)}",
            f'subject:"/{exact}/"',
            None,
        ),
        Probe("body: word", "body:rollback", "body:rollback", "body:rollback", _DUP),
        Probe(
            "body: phrase", 'body:"the release"', 'body:"the release"', 'body:"the release"', _DUP
        ),
        Probe("bare word (quoted: not stemmed)", '"review"', '"review"', None, _DUP),
        Probe("bare word", "review", "review", "review", "stem"),
        Probe("bare phrase", '"next week"', '"next week"', '"next week"', _DUP),
        Probe("bare prefix", "migrat*", "migrat*", "migrat*", _DUP),
        Probe("bare word also in names", "alex", "alex", "alex"),
        Probe("bare name phrase", '"Alex Morgan"', '"Alex Morgan"', '"Alex Morgan"', _DUP),
        Probe("from: display name", 'from:"Alex Morgan"', 'from:"Alex Morgan"', "from:alex"),
        Probe("from: a name word", "from:Morgan", "from:Morgan", "from:morgan"),
        Probe(
            "from: a non-ASCII name",
            'from:"Jürgen Müller"',
            'from:"Jürgen Müller"',
            "from:jürgen",
        ),
        Probe("to: a name word (To and Cc)", "to:Morgan", "to:Morgan", "recip:morgan", _DUP),
        Probe("filename: word", "filename:pdf", "attachment:pdf", "file:/pdf$/", _DUP),
        Probe("filename: prefix", "filename:report*", "attachment:report*", "file:report*", _DUP),
        Probe("has:attachment", "has:attachment", "tag:attachment", "flag:attach", _DUP),
        Probe("id:", f"id:{mid}", f"id:{_quote(mid)}", f"msgid:{mid}"),
        Probe(
            "thread:ID",
            f"thread:{tid}",
            f"thread:{{id:{_quote(tid)}}}",
            f"msgid:{tid}",
            mu_related=True,
        ),
        Probe(
            "thread:{QUERY}",
            "thread:{subject:release}",
            "thread:{subject:release}",
            "subject:release",
            mu_related=True,
        ),
        Probe(
            "list: id",
            "list:dev.lists.example.org",
            "List:dev.lists.example.org",
            "list:dev.lists.example.org",
        ),
        Probe("list: prefix", "list:python*", "List:python*", "list:python*"),
        Probe("date: year", "date:2024", "date:2024", "date:2024..2024"),
        Probe("date: month", "date:2024-06", "date:2024-06", "date:2024-06..2024-06"),
        Probe("date: day", "date:2024-06-12", "date:2024-06-12", "date:2024-06-12..2024-06-12"),
        Probe(
            "date: range",
            "date:2024-03-01..2024-05-31",
            "date:2024-03-01..2024-05-31",
            "date:2024-03-01..2024-05-31",
        ),
        Probe("date: open end", "date:2025-01-01..", "date:2025-01-01..", "date:2025-01-01.."),
        Probe(
            "date: open start",
            "date:..2023-12-31",
            "date:..2023-12-31",
            "date:..2023-12-31",
        ),
        Probe("date: years back (to the year)", "date:3y..", "date:3y..", "date:3y.."),
        Probe("date: until months back", "date:..30M", "date:..30M", "date:..30m"),
        Probe("date: summed units", "date:2y6M..", "date:2y6M..", None),
        Probe("date: yesterday..today", "date:yesterday..today", "date:yesterday..today", None),
        Probe("date: last week", 'date:"last week"..', 'date:"last week"..', "date:1w.."),
        # (notmuch's date parser reads no instant that its Xapian query parser lets
        # through: `date:"2024-06-12 10:00"..` counts nothing there)
        Probe("date: an instant", "date:2024-06-12T10:00..", None, "date:20240612T1000.."),
        Probe("size: range", "size:10k..12k", None, "size:10k..12k", _DUP),
        Probe("folder: Maildir++ folder", "folder:Archive", "folder:.Archive", "maildir:/.Archive"),
        Probe("folder: the root", "folder:INBOX", 'folder:""', "maildir:/"),
        Probe("folder: prefix", "folder:lists*", 'folder:"/^\\.lists/"', "maildir:/.lists*"),
        Probe("account:", "account:import*", None, None),
        Probe("is:vanished", "is:vanished", None, None),
        # Maildir flags, as notmuch's maildir.synchronize_flags makes them tags
        Probe("is: unread", "is:unread", "tag:unread", "flag:unread"),
        Probe("is: replied", "is:replied", "tag:replied", "flag:replied"),
        Probe("flag: flagged (mu's spelling)", "flag:flagged", "tag:flagged", "flag:flagged"),
        Probe(
            "is: seen and not flagged",
            "is:seen -is:flagged",
            "not tag:unread and not tag:flagged",
            "not flag:unread and not flag:flagged",
        ),
        Probe(
            "AND",
            "subject:release AND from:example.org",
            "subject:release AND from:example.org",
            f"subject:release AND {mu_domain}",
        ),
        Probe(
            "terms side by side",
            "subject:release from:example.org",
            "subject:release from:example.org",
            f"subject:release {mu_domain}",
        ),
        Probe(
            "OR",
            "subject:release OR subject:patch",
            "subject:release OR subject:patch",
            "subject:release OR subject:patch",
        ),
        Probe("NOT", "NOT subject:release", "NOT subject:release", "NOT subject:release"),
        Probe(
            "or, and, not in lower case",
            "subject:release or subject:patch and not from:example.org",
            "subject:release or subject:patch and not from:example.org",
            f"subject:release OR subject:patch AND NOT {mu_domain}",
        ),
        Probe("a quoted operator is a word", '"and"', '"and"', None, _DUP),
        Probe(
            "-term",
            "subject:release -from:example.org",
            "subject:release -from:example.org",
            f"subject:release AND NOT {mu_domain}",
        ),
        Probe(
            "parentheses",
            "(subject:release OR subject:patch) AND date:2024",
            "(subject:release OR subject:patch) AND date:2024",
            "(subject:release OR subject:patch) AND date:2024..2024",
        ),
        Probe(
            "NOT of a group",
            "NOT (folder:Archive OR list:dev*)",
            "NOT (folder:.Archive OR List:dev*)",
            "NOT (maildir:/.Archive OR list:dev*)",
        ),
        Probe(
            "words and fields",
            '"the release" -has:attachment date:2024..',
            '"the release" AND NOT tag:attachment AND date:2024..',
            '"the release" AND NOT flag:attach AND date:2024..',
            _DUP,
        ),
    ]


def missing_tools() -> list[str]:
    """The Debian packages of the peers that are not installed (``notmuch``,
    ``maildir-utils`` for mu)."""
    wanted = {"notmuch": "notmuch", "mu": "maildir-utils"}
    return [pkg for tool, pkg in wanted.items() if shutil.which(tool) is None]


def _tree_bytes(path: Path) -> int:
    """Apparent bytes of every file below ``path``."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


class Notmuch:
    """notmuch over ``maildir``, its configuration and database under ``home``
    (``database.path`` apart from ``mail_root``, notmuch >= 0.32). The List-Id
    header is indexed as the field ``List:`` (``index.header.List``)."""

    name = "notmuch"

    def __init__(self, maildir: Path, home: Path) -> None:
        self.maildir = maildir
        self.home = home
        self.db = home / "db"
        self.env = {**os.environ, "NOTMUCH_CONFIG": str(home / "config"), "TZ": "UTC"}

    def setup(self) -> None:
        """A fresh configuration and an empty database directory."""
        shutil.rmtree(self.home, ignore_errors=True)
        self.db.mkdir(parents=True)
        (self.home / "config").write_text(
            f"[database]\npath={self.db}\nmail_root={self.maildir}\n\n"
            "[new]\ntags=\nignore=.complete\n\n[search]\nexclude_tags=\n\n"
            # (the Maildir flags as tags: is:unread, is:replied, flag:flagged compare)
            "[maildir]\nsynchronize_flags=true\n\n[index]\nheader.List=List-Id\n\n"
            "[user]\nname=Bench\nprimary_email=bench@example.invalid\n"
        )

    def index_command(self) -> list[str]:
        """The whole command that indexes the corpus (run with ``env``)."""
        return ["notmuch", "new", "--quiet"]

    def index_bytes(self) -> int:
        return _tree_bytes(self.db)

    def count(self, probe: Probe) -> int | None:
        """``notmuch count`` of the probe's notmuch query; None when it has none."""
        if probe.notmuch is None:
            return None
        out = subprocess.run(
            ["notmuch", "count", probe.notmuch],
            env=self.env,
            capture_output=True,
            text=True,
            check=True,
        )
        return int(out.stdout.strip())


class Mu:
    """mu (maildir-utils) over ``maildir``, its database under ``home`` (``--muhome``).

    mu indexes every file, a Message-ID held by two files twice: its count
    lists the matches with ``--skip-dups`` (one per Message-ID), as notmuch and
    mailledger count them."""

    name = "mu"

    def __init__(self, maildir: Path, home: Path) -> None:
        self.maildir = maildir
        self.home = home
        self.env = {**os.environ, "TZ": "UTC"}

    def setup(self) -> None:
        """A fresh database (``mu init``; untimed, it only writes the settings)."""
        shutil.rmtree(self.home, ignore_errors=True)
        self.home.mkdir(parents=True)
        subprocess.run(
            ["mu", "init", f"--maildir={self.maildir}", f"--muhome={self.home}", "--quiet"],
            env=self.env,
            capture_output=True,
            check=True,
        )

    def index_command(self) -> list[str]:
        return ["mu", "index", f"--muhome={self.home}", "--quiet"]

    def index_bytes(self) -> int:
        return _tree_bytes(self.home)

    def count(self, probe: Probe) -> int | None:
        """The Message-IDs ``mu find`` lists for the probe's mu query; None when it
        has none. mu exits 4 (and lists nothing) when nothing matches."""
        if probe.mu is None:
            return None
        related = ["--include-related"] if probe.mu_related else []
        out = subprocess.run(
            [
                "mu",
                "find",
                f"--muhome={self.home}",
                "--skip-dups",
                "--fields=i",
                *related,
                "--",
                probe.mu,
            ],
            env=self.env,
            capture_output=True,
            text=True,
            check=False,
        )
        if out.returncode == 4:
            return 0
        if out.returncode != 0:
            raise RuntimeError(f"mu find {probe.mu!r} failed ({out.returncode}): {out.stderr}")
        return len(set(out.stdout.split()))

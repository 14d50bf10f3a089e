"""``terminal_text``: what mail may put on a terminal, and the house rule that every
line the command line writes goes through it (``pipeline/cli/output.py``)."""

from __future__ import annotations

import ast
import json
import sys
import unicodedata
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.cli.output import fit, format_table, print_json, text_width, write_column
from pipeline.terminal import UNSAFE_RANGES, json_escape, re2_class, terminal_text

REPO = Path(__file__).resolve().parents[2]
UNSAFE = {"Cc", "Cf", "Cs", "Zl", "Zp"}


def _unsafe(text: str, allowed: str = "") -> list[str]:
    return [c for c in text if c not in allowed and unicodedata.category(c) in UNSAFE]


def test_each_c0_control_and_del_is_shown_by_its_control_picture() -> None:
    assert terminal_text("\x1b]0;owned\x07") == "␛]0;owned␇"
    assert terminal_text("a\x00b\x1fc\x7f") == "a␀b␟c␡"
    assert terminal_text("a\x1bb") != terminal_text("ab")  # (shown, never dropped)


def test_c1_bidi_and_invisible_format_characters_are_shown_as_code_points() -> None:
    assert terminal_text("\x9b31m") == "<U+009B>31m"
    assert terminal_text("\u202egnp.exe") == "<U+202E>gnp.exe"
    assert terminal_text("\u2066x\u2069") == "<U+2066>x<U+2069>"
    assert terminal_text("z\u200bw\ufeff\u2028") == "z<U+200B>w<U+FEFF><U+2028>"
    assert terminal_text("tag\U000e0041") == "tag<U+E0041>"
    assert terminal_text("bad\udc9b") == "bad<U+DC9B>"  # (an undecodable byte)


def test_tabs_and_newlines_pass_only_where_the_format_has_them() -> None:
    text = "a\tb\nc\rd"
    assert terminal_text(text) == "a␉b␊c␍d"
    assert terminal_text(text, tabs=True) == "a\tb␊c␍d"
    assert terminal_text(text, newlines=True, tabs=True) == "a\tb\nc␍d"  # (CR: never)


def test_text_without_any_comes_back_unchanged() -> None:
    for text in ("plain", "Zażółć gęślą jaźń", "東京 😀 “quoted” — dash", "\u00a0nbsp"):
        assert terminal_text(text) == text


@given(st.text(), st.booleans(), st.booleans())
def test_the_result_holds_no_unsafe_character_and_is_stable(
    text: str, newlines: bool, tabs: bool
) -> None:
    out = terminal_text(text, newlines=newlines, tabs=tabs)
    allowed = ("\n" if newlines else "") + ("\t" if tabs else "")
    assert _unsafe(out, allowed) == []
    assert terminal_text(out, newlines=newlines, tabs=tabs) == out


def test_the_ranges_hold_every_control_format_and_separator_character_of_unicode() -> None:
    """Checked against this Python's Unicode database: each such character is in
    ``UNSAFE_RANGES``, and what else they hold is unassigned here (a newer Unicode's)."""
    listed = {cp for lo, hi in UNSAFE_RANGES for cp in range(lo, hi + 1)}
    cats = {cp: unicodedata.category(chr(cp)) for cp in range(sys.maxunicode + 1)}
    assert {cp for cp, cat in cats.items() if cat in UNSAFE} <= listed
    assert {cats[cp] for cp in listed} <= UNSAFE | {"Cn"}


def test_arrow_finds_the_characters_terminal_text_changes() -> None:
    """``write_column`` asks Arrow (RE2) which lines to pass through ``terminal_text``:
    the two agree on every code point (surrogates cannot be in Arrow's UTF-8)."""
    chars = [chr(cp) for cp in range(sys.maxunicode + 1) if not 0xD800 <= cp <= 0xDFFF]
    flagged = pc.match_substring_regex(pa.array(chars), re2_class(newlines=True, tabs=True))
    changed = [terminal_text(c, newlines=True, tabs=True) != c for c in chars]
    assert flagged.to_pylist() == changed


def test_a_column_of_lines_shows_hostile_lines_and_writes_the_others_whole(
    capsys: pytest.CaptureFixture[str],
) -> None:
    lines = pa.array(["ok\tone\n", "a\x1b]52;c;x\x07\tb\n", "“fine” — ok\n", "\u202eevil\n", "z\n"])
    write_column(pa.chunked_array([lines.slice(1), pa.array(["last\x9b\n"])]))
    out = capsys.readouterr().out
    assert out == "a␛]52;c;x␇\tb\n“fine” — ok\n<U+202E>evil\nz\nlast<U+009B>\n"


def test_a_table_is_measured_and_cut_on_the_text_it_shows() -> None:
    table = format_table(["subject"], [["\u202eab\x1bcd"], ["plain"]], width=10)
    shown = [line.rstrip() for line in table.splitlines()]
    assert shown[2] == "<U+202E>a…" and text_width(shown[2]) == 10
    assert _unsafe(table, "\n") == []
    whole = format_table(["s"], [["a\x1bb"]])
    assert whole.splitlines()[2] == "a␛b"
    assert text_width(terminal_text("\u202e")) == 8 == len(fit("<U+202E>", 8))


def test_json_escapes_every_unsafe_character_and_reads_back_exact(
    capsys: pytest.CaptureFixture[str],
) -> None:
    value = {"s": "\x1b]0;t\x07 \x7f \x9b \u202e \u2066 \u200b \U000e0041 \udc9b ż 😀"}
    print_json(value)
    out = capsys.readouterr().out
    assert _unsafe(out, "\n") == [] and "ż 😀" in out
    assert json.loads(out) == value
    assert json_escape('"plain ż"') == '"plain ż"'


# -- the house rule: only pipeline/cli/output.py writes to stdout or stderr ---------------

# where text for people is made safe (``echo``...) or kept exact on purpose (JSON, raw)
WRITER = REPO / "pipeline" / "cli" / "output.py"


def _direct_writes(source: str) -> list[str]:
    """The calls in ``source`` that write to stdout or stderr without ``output``:
    ``print(...)``, ``sys.stdout.write`` / ``sys.stderr.write`` (``.buffer``
    too), ``os.write(1|2, ...)``, or ``.write`` on a name bound to one of them."""
    tree = ast.parse(source)
    streams = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and "sys.std" in ast.unparse(node.value):
            streams |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func, text = node.func, ast.unparse(node)
        printing = isinstance(func, ast.Name) and func.id == "print"
        if printing or text.startswith(("os.write(1,", "os.write(2,")):
            found.append(text)
        elif isinstance(func, ast.Attribute) and func.attr in ("write", "writelines"):
            receiver = ast.unparse(func.value)
            if receiver.startswith(("sys.std", "sys.__std")) or receiver in streams:
                found.append(text)
    return found


def test_only_the_output_module_writes_to_stdout_or_stderr() -> None:
    """Every other module of ``pipeline`` prints through ``pipeline.cli.output``
    (``echo``: ``terminal_text`` first) or logs (a formatter that applies it): a
    new command that prints mail with a bare ``print`` fails here."""
    found = {
        str(path.relative_to(REPO)): calls
        for path in sorted((REPO / "pipeline").rglob("*.py"))
        if path != WRITER and (calls := _direct_writes(path.read_text()))
    }
    assert found == {}


@pytest.mark.parametrize(
    "planted",
    [
        "print(msg['subject'])",
        "print(f'{subject}', file=sys.stderr)",
        "sys.stdout.write(subject)",
        "sys.stdout.buffer.write(raw)",
        "sys.stderr.write(folder)",
        "out = sys.stderr if json else sys.stdout\nout.write(line)",
        "os.write(1, subject.encode())",
    ],
)
def test_a_planted_direct_write_is_caught(planted: str) -> None:
    source = (REPO / "pipeline" / "cli" / "reading.py").read_text()
    assert _direct_writes(source) == []
    assert _direct_writes(source + "\n" + planted + "\n") != []

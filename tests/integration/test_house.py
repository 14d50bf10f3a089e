"""The layers are kept by a tool, not by care: import-linter's contracts in
pyproject.toml (`make lint`) pass on the tree and fail on a planted violation."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("stores", "projections", "pipeline", "testkit")
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(root / "pyproject.toml"), "--no-cache"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the product's packages and pyproject.toml, to plant violations in."""
    if not LINT_IMPORTS.exists():
        pytest.fail(f"{LINT_IMPORTS} is missing: install the dev extras (import-linter)")
    for name in PACKAGES:
        shutil.copytree(REPO / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def _plant(path: Path, line: str) -> None:
    path.write_text(path.read_text() + f"\n{line}  # planted\n")


def test_the_tree_keeps_every_contract(tree: Path) -> None:
    done = _lint(tree)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


@pytest.mark.parametrize(
    ("where", "line", "contract"),
    [
        ("stores/errors.py", "import projections.tables", "layers"),
        ("projections/normalize/__init__.py", "import pipeline.parse", "layers"),
        (
            "pipeline/sources/pop3.py",
            "import pipeline.cli",
            "sources never import the command line",
        ),
        (
            "stores/log/event_log.py",
            "import testkit.corpus",
            "the product never imports the test kit",
        ),
    ],
)
def test_a_planted_violation_breaks_its_contract(
    tree: Path, where: str, line: str, contract: str
) -> None:
    _plant(tree / where, line)
    done = _lint(tree)
    assert done.returncode != 0, done.stdout
    broken = [ln for ln in done.stdout.splitlines() if ln.endswith("BROKEN")]
    assert any(ln.startswith(contract) for ln in broken), done.stdout


def test_no_product_module_outgrows_a_reading() -> None:
    """A module a newcomer reads in one sitting: none of the product's over 500
    lines, and the store's facade (``MessageStore``) under 300: what grows moves
    into the module that owns the rule."""
    import ast

    long = {
        str(path.relative_to(REPO)): n
        for name in ("stores", "projections", "pipeline")
        for path in sorted((REPO / name).rglob("*.py"))
        if (n := len(path.read_text().splitlines())) > 500
    }
    assert long == {}
    tree = ast.parse((REPO / "pipeline" / "store.py").read_text())
    facade = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "MessageStore")
    assert facade.end_lineno is not None
    assert facade.end_lineno - facade.lineno + 1 < 300

"""The linters inside the one test command: ruff over the tree, mypy strict on every package,
and import-linter's contracts (the architecture of docs/design.md) as CI's `lint-imports`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import early_lint

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.lint, pytest.mark.timeout(300)]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, check=False
    )


def test_ruff_check_is_clean() -> None:
    """ruff finds no lint problems anywhere in the repository."""
    result = _run("ruff", "check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_is_clean() -> None:
    """Every Python file is formatted as ruff format would write it."""
    result = _run("ruff", "format", "--check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_is_clean() -> None:
    """mypy passes on the packages, strict on all of them (started beside the suite when
    this test is selected: tests/helpers/early_lint.py)."""
    code, output = early_lint.run(early_lint.MYPY, timeout=280)
    assert code == 0, output


def test_lint_imports_is_clean() -> None:
    """`lint-imports`, as a maintainer runs it from the checkout, keeps every contract of
    pyproject.toml (tests/unit/test_import_contracts.py runs the same contracts in-process,
    and breaks each kind)."""
    result = subprocess.run(
        [str(Path(sys.executable).parent / "lint-imports"), "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert " 0 broken." in result.stdout, result.stdout

"""The repository's docs stand alone: nothing cites a file outside it.

The design lives in `docs/design.md`; code comments, tests, results and the docs cite
its sections (`docs/design.md §3`), never a design file or seed document elsewhere. The
"Where things are" of `docs/developing.md` names files a maintainer opens; each is in the
tree.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.helpers.headless import ROOT

OUTSIDE = re.compile(r"\bDESIGN\b|\.\./shared|/work/shared|\bseed/|interlock-demo-readme")
# `site`: the docs site as `mkdocs build` writes it, a copy of docs/.
SKIPPED_DIRS = {
    ".git",
    ".venv",
    "node_modules",
    "__pycache__",
    ".mypy_cache",
    ".ruff_cache",
    "site",
}
# A backticked name that is a file of the tree or a folder (`engine/`).
TREE_PATH = re.compile(r"`([A-Za-z0-9_./-]+(?:\.(?:py|tcss|toml|md|json|sh)|/))`")
TEXT = {".py", ".md", ".toml", ".tcss", ".txt", ".json", ".cfg", ".ini", ".yml", ".yaml"}


def _skipped(name: str) -> bool:
    return name in SKIPPED_DIRS or name.startswith(".pytest")


def _text_files() -> list[Path]:
    files = []
    for path in ROOT.rglob("*"):
        parts = set(path.relative_to(ROOT).parts)
        if any(_skipped(p) for p in parts):
            continue
        if path == Path(__file__).resolve():
            continue  # this file names the patterns it looks for
        if path.is_file() and (path.suffix in TEXT or path.parent.name == ".ci"):
            files.append(path)
    return files


def test_nothing_cites_a_file_outside_the_repository() -> None:
    """No comment, test, result or doc points at a design or seed file the repository lacks."""
    hits = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()[:100]}"
        for path in _text_files()
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert hits == [], "cite docs/design.md instead:\n" + "\n".join(hits)


def test_design_sections_cited_exist() -> None:
    """Every `docs/design.md §N` cited somewhere is a section of docs/design.md."""
    design = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    sections = set(re.findall(r"^## (\d+)\. ", design, re.M))
    cited = {
        m
        for path in _text_files()
        for m in re.findall(r"docs/design\.md §(\d+)", path.read_text(errors="replace"))
    }
    assert cited, "nothing cites docs/design.md"
    assert cited <= sections, f"cited sections missing from docs/design.md: {cited - sections}"
    assert "docs/design.md" in (ROOT / "README.md").read_text(encoding="utf-8")


def _threat_model() -> str:
    design = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    start = design.index("### Threat model")
    end = design.index("\n## ", start)
    return design[start:end]


def test_every_test_the_threat_model_names_exists() -> None:
    """Each `test_...` the threat model's table names is a test function in tests/, and
    every row names a test or says it is a gap (so the table stays
    true as tests are renamed)."""
    section = _threat_model()
    rows = [line for line in section.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(rows) > 20, "the threat model lost its table"
    defined = {
        m
        for path in (ROOT / "tests").rglob("test_*.py")
        for m in re.findall(r"^(?:async )?def (test_\w+)", path.read_text(encoding="utf-8"), re.M)
    }
    named = set(re.findall(r"`(test_\w+)`", section))
    assert named, "the threat model names no test"
    assert named <= defined, f"the threat model names tests that do not exist: {named - defined}"
    for row in rows[1:]:
        last = row.rstrip(" |").rsplit("|", 1)[-1]
        assert "`test_" in last or "gap" in last, row


def _tree() -> set[str]:
    """Every file and folder of the checkout, relative to it; folders end in `/`."""
    found: set[str] = set()
    for folder, subfolders, names in os.walk(ROOT):
        subfolders[:] = [d for d in subfolders if not _skipped(d)]
        rel = Path(folder).relative_to(ROOT).as_posix()
        found.add(f"{rel}/")
        found.update(f"{rel}/{name}" if rel != "." else name for name in names)
    return found


def _not_in_tree(section: str, tree: set[str]) -> list[str]:
    # A name is written from its package down (`widgets/column_pane.py`, `tui/`), so it
    # stands when some path of the tree ends with it.
    named = set(TREE_PATH.findall(section))
    return sorted(n for n in named if not any(p == n or p.endswith(f"/{n}") for p in tree))


def test_every_path_the_developing_guide_gives_a_maintainer_is_in_the_tree() -> None:
    guide = (ROOT / "docs" / "developing.md").read_text(encoding="utf-8")
    section = guide.split("\n## Where things are\n", 1)[1].split("\n## ", 1)[0]
    assert len(TREE_PATH.findall(section)) > 50, "the section names the tree's files"
    assert _not_in_tree(section, _tree()) == []


@pytest.mark.parametrize("name", ["engine/launchers.py", "views/tui/panes/", "_gate2.py"])
def test_a_path_that_is_not_in_the_tree_is_named(name: str) -> None:
    assert _not_in_tree(f"moved: `{name}`", _tree()) == [name]

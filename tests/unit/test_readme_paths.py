"""The README's "Where things are" (and its "How a change goes") names files a maintainer
opens; a file moved or renamed without the README following fails here."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# A backticked name that is a file of the tree or a folder (`engine/`).
PATH = re.compile(r"`([A-Za-z0-9_./-]+(?:\.(?:py|tcss|toml|md|json|sh)|/))`")


def _section(readme: str) -> str:
    after = readme.split("\n## Where things are\n", 1)[1]
    return after.split("\n## ", 1)[0]


def _tree() -> set[str]:
    """Every file and folder of the checkout, relative to it; folders end in `/`."""
    found: set[str] = set()
    for folder, subfolders, names in os.walk(ROOT):
        subfolders[:] = [d for d in subfolders if not d.startswith(".") and d != "__pycache__"]
        rel = Path(folder).relative_to(ROOT).as_posix()
        found.add(f"{rel}/")
        found.update(f"{rel}/{name}" if rel != "." else name for name in names)
    return found


def _missing(section: str, tree: set[str]) -> list[str]:
    # A name is written from its package down (`widgets/column_pane.py`, `tui/`), so it
    # stands when some path of the tree ends with it.
    named = set(PATH.findall(section))
    return sorted(n for n in named if not any(p == n or p.endswith(f"/{n}") for p in tree))


def test_every_path_the_readme_gives_a_maintainer_is_in_the_tree() -> None:
    section = _section((ROOT / "README.md").read_text(encoding="utf-8"))
    tree = _tree()
    assert len(PATH.findall(section)) > 50, "the section names the tree's files"
    assert _missing(section, tree) == []


@pytest.mark.parametrize("name", ["engine/launchers.py", "views/tui/panes/", "_gate2.py"])
def test_a_path_that_is_not_in_the_tree_is_named(name: str) -> None:
    assert _missing(f"moved: `{name}`", _tree()) == [name]

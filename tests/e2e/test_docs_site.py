"""The docs site builds strictly, offline, with every page in its navigation and every
public name in its API reference.

`mkdocs build --strict` fails on any warning (a broken link, a page the nav names that is
missing, a docstring griffe cannot read); this test fails on a warning line too, and on a
page of `docs/` the nav leaves out. The built pages load nothing from the internet (the
theme's web fonts are off), so the site reads the same from a file or a laptop on a
plane. The reference renders the public names (`__all__`) of `interlock`, its testing kit
and its integrations, never the private modules behind them.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Module -> its page under docs/api/.
REFERENCE = {
    "interlock": "interlock",
    "interlock.testing": "testing",
    "interlock.mcp": "mcp",
    "interlock.temporal": "temporal",
    "interlock.langchain": "langchain",
    "interlock.pydantic_ai": "pydantic_ai",
    "interlock.openai_agents": "openai_agents",
}
# A URL the page would fetch (a stylesheet, a script, a font, an image), not one it links to.
FETCHED = re.compile(r"<(?:link|script|img)\b[^>]*\b(?:href|src)=\"(?:https?:)?//", re.I)

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The site, built strictly into a fresh folder, and what the build logged."""
    out = tmp_path_factory.mktemp("site")
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}
    # Material's notice about MkDocs 2.0 is a banner, not a build warning.
    env["NO_MKDOCS_2_WARNING"] = "1"
    env["PYTHONPATH"] = str(ROOT)  # the reference reads this checkout's interlock/
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return out, done.stdout + done.stderr


@pytest.mark.timeout(120)
def test_the_site_builds_strictly_with_every_page_in_its_navigation(
    site: tuple[Path, str],
) -> None:
    """No warning, and no page of docs/ left out of the nav (mkdocs says that as INFO)."""
    out, log = site
    assert [line for line in log.splitlines() if "WARNING" in line] == []
    assert 'not included in the "nav"' not in log, log
    pages = sorted(p.relative_to(ROOT / "docs") for p in (ROOT / "docs").rglob("*.md"))
    assert len(pages) >= 20
    for page in pages:
        built = out / page.with_suffix("") / "index.html"
        if page.name == "index.md":
            built = out / page.parent / "index.html"
        assert built.is_file(), page


@pytest.mark.timeout(120)
def test_the_built_pages_fetch_nothing_from_the_internet(site: tuple[Path, str]) -> None:
    out, _ = site
    pages = list(out.rglob("*.html"))
    assert len(pages) >= 20
    fetching = [str(p.relative_to(out)) for p in pages if FETCHED.search(p.read_text())]
    assert fetching == []


def _public_names(module: str) -> list[str]:
    """The module's `__all__`, read from its source: importing an integration would import
    its framework, seconds each."""
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None, module
    for node in ast.parse(Path(spec.origin).read_text(encoding="utf-8")).body:
        target = node.targets[0] if isinstance(node, ast.Assign) else None
        if isinstance(target, ast.Name) and target.id == "__all__":
            return list(ast.literal_eval(node.value))
    raise AssertionError(f"{module} has no __all__")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("module", list(REFERENCE))
def test_the_reference_renders_every_public_name(site: tuple[Path, str], module: str) -> None:
    """Each name of the module's `__all__` has its entry, under its public path."""
    out, _ = site
    html = (out / "api" / REFERENCE[module] / "index.html").read_text()
    names = _public_names(module)
    assert names
    assert [n for n in names if f'id="{module}.{n}"' not in html] == []


def test_a_page_that_fetches_a_font_is_caught() -> None:
    assert FETCHED.search('<link rel="stylesheet" href="https://fonts.googleapis.com/css">')
    assert FETCHED.search('<script src="//cdn.example/x.js"></script>')
    assert not FETCHED.search('<a href="https://github.com/">source</a>')
    assert not FETCHED.search('<link rel="stylesheet" href="../assets/main.css">')

"""The import rules of the architecture, read from the source with `ast` (nothing is imported).

Every module of `interlock`, `interlock_demo`, `workers` and `scenarios` is read (and
`bench`, for the private-name rule only). The rules:

- no cycle between modules;
- `interlock_demo.core` and `interlock_demo.engine` import neither `textual`, `rich` nor
  `interlock_demo.views`, directly or through the imports (lazy ones too) of the modules
  they import (the headless path never needs a screen);
- `interlock` imports nothing of `interlock_demo`, `workers` or `scenarios` (the library
  stands alone), and no string of its code names the demo's folder (`demo/`);
- `workers` imports nothing of `interlock_demo` (a worker is restarted alone, and the demo
  is its caller, not its dependency);
- the widgets import nothing of `interlock_demo.engine` (they read the run model); the
  engine and core never import `doctor` (a command above them); `reports` imports no
  `textual` or `rich` (the screen is `views/tui`'s); the run model (`core.run`) imports no
  payments model (`interlock.testing`). These and the two above are the `LAYERS` table;
- no private name crosses a module boundary outside `tests/`: nobody imports a `_name`
  from another module, and a private module (`pkg._mod`, a third party's too) is imported
  only from inside `pkg` (so `interlock._core.gate` may import `interlock._core.journal`, the demo
  may not, and nobody imports `stripe._request_options`).

What counts as an edge for the cycle rule, exactly:

- every `import` and `from ... import` anywhere in the module counts: at module level,
  inside functions (lazy) and under `if TYPE_CHECKING:`. A lazy import still ties the two
  modules together; it only hides the knot from the interpreter.
- `import a.b.c` is an edge to `a.b.c`, the module named, and not to `a` or `a.b`.
- `from a.b import name` is an edge to `a.b.name` when that is a module of the tree, and to
  `a.b` (its `__init__`) otherwise. Relative imports are resolved first.
- The parent packages Python runs implicitly before a submodule are not edges. So a
  package's `__init__` that imports its own submodules (to re-export their names) forms
  no cycle by itself; it does as soon as one of those submodules imports a name from the
  package itself (`from interlock_demo.engine import X` inside
  `interlock_demo/engine/temporal/`), because that name lives in the `__init__`, which
  imports the submodule back.
- A module importing itself is not a cycle between modules.

Each rule also has a negative test that runs the checker over a small tree written to
`tmp_path` which breaks the rule, so the check cannot pass by not looking.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The packages whose imports the architecture rules govern.
PACKAGES = ("interlock", "interlock_demo", "workers", "scenarios")
# Read for the private-name rule only: the benchmarks are scripts, not part of the layering.
PRIVATE_ONLY = ("bench",)
SCREEN = ("textual", "rich", "interlock_demo.views")
HEADLESS = ("interlock_demo.core", "interlock_demo.engine")
DEMO = ("interlock_demo", "workers", "scenarios")
# Who may not import what (direct imports), and why: one row per rule.
LAYERS: tuple[tuple[tuple[str, ...], tuple[str, ...], str], ...] = (
    (("interlock",), DEMO, "the library imports no demo"),
    (("workers",), ("interlock_demo",), "workers import no demo"),
    (
        ("interlock_demo.views.tui.widgets",),
        ("interlock_demo.engine",),
        "widgets read the run model, never the engine",
    ),
    (
        ("interlock_demo.engine", "interlock_demo.core"),
        ("interlock_demo.doctor",),
        "the venue check is a command above the engine (network words: interlock_demo.network)",
    ),
    (("interlock_demo.reports",), ("textual", "rich"), "reports draw no screen (views/tui does)"),
    (
        ("interlock_demo.core.run",),
        ("interlock.testing",),
        "the run model knows no payments model",
    ),
)


@dataclass(frozen=True)
class Import:
    """One imported module as the source names it, at a line of an importing module."""

    importer: str
    path: Path
    line: int
    target: str  # the module the edge goes to (resolved, see the module docstring)
    names: tuple[str, ...]  # for `from m import a, b`: the names; () for `import m`


def _within(module: str, packages: Iterable[str]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def discover(root: Path, packages: Iterable[str]) -> dict[str, Path]:
    """Every module under the given top-level folders of `root`, by dotted name."""
    modules: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            modules[_module_name(root, path)] = path
    return modules


def _imports(name: str, path: Path, modules: dict[str, Path]) -> Iterator[Import]:
    """The imports of one module, all of them (module level, functions, TYPE_CHECKING)."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(name, path, node.lineno, alias.name, ())
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                # `from . import x` in a package's __init__ is relative to the package itself.
                anchor = name.split(".")
                drop = node.level - 1 if is_package else node.level
                anchor = anchor[: len(anchor) - drop] if drop else anchor
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                target = sub if sub in modules else base
                yield Import(name, path, node.lineno, target, (alias.name,))


def _where(root: Path, imp: Import) -> str:
    return f"{imp.path.relative_to(root)}:{imp.line}"


def _cycles(root: Path, graph: dict[str, list[Import]]) -> list[str]:
    """Each strongly connected group of modules, with every import that ties it (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for edge in graph[v]:
            w = edge.target
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    found = []
    for group in sorted(groups):
        ties = sorted(
            {e for v in group for e in graph[v] if e.target in group},
            key=lambda e: (e.path, e.line, e.target),
        )
        found.append(
            f"cycle between {', '.join(group)}: "
            + "; ".join(f"{_where(root, e)} {e.importer} imports {e.target}" for e in ties)
        )
    return found


def _screen_path(start: str, imports: dict[str, list[Import]]) -> list[Import] | None:
    """The shortest chain of imports from `start` to textual, rich or the views, if any."""
    came_by: dict[str, list[Import]] = {start: []}
    queue = [start]
    while queue:
        module = queue.pop(0)
        for e in imports.get(module, []):
            if _within(e.target, SCREEN):
                return [*came_by[module], e]
            if e.target in imports and e.target not in came_by:
                came_by[e.target] = [*came_by[module], e]
                queue.append(e.target)
    return None


def _headless_breach(root: Path, path: list[Import]) -> str:
    """How a core/engine module reaches the screen, directly or through other modules."""
    first = path[0]
    how = f"imports {first.target}"
    if len(path) > 1:
        chain = " -> ".join(e.target for e in path)
        how += f", which reaches the screen: {chain} ({_where(root, path[-1])})"
    return f"{_where(root, first)} {first.importer} {how}: core/engine must stay headless"


def _layering_breaches(e: Import) -> Iterator[str]:
    """The layering rules (`LAYERS`) this import breaks."""
    for importers, targets, why in LAYERS:
        if _within(e.importer, importers) and _within(e.target, targets):
            yield f"imports {e.target}: {why}"


def _private_breaches(e: Import) -> Iterator[str]:
    """The private names this import takes across a module boundary."""
    parts = e.target.split(".")
    for depth, part in enumerate(parts):
        owner = ".".join(parts[:depth])
        if _is_private(part) and not (owner and _within(e.importer, (owner,))):
            yield f"imports the private module {e.target} from outside {owner or 'it'}"
            return
    for name in e.names:
        # `from pkg import _mod` with `_mod` a module was resolved to `pkg._mod` above.
        if _is_private(name) and not e.target.endswith("." + name):
            yield f"imports the private name {name} from {e.target}"


def check(
    root: Path,
    packages: Iterable[str] = PACKAGES,
    private_only: Iterable[str] = PRIVATE_ONLY,
) -> list[str]:
    """Every broken import rule under `root`, one line each naming the file and the line:
    the cycles first, then the other breaches in file and line order."""
    layered = discover(root, packages)
    modules = {**layered, **discover(root, private_only)}
    imports = [e for name, path in modules.items() for e in _imports(name, path, modules)]
    graph: dict[str, list[Import]] = {name: [] for name in layered}
    for e in imports:
        if e.importer in layered and e.target in layered and e.target != e.importer:
            graph[e.importer].append(e)
    by_module: dict[str, list[Import]] = {name: [] for name in layered}
    for e in imports:
        if e.importer in layered:
            by_module[e.importer].append(e)
    breaches: list[tuple[Path, int, str]] = []
    for name in layered:
        if _within(name, HEADLESS) and (path := _screen_path(name, by_module)):
            breaches.append((path[0].path, path[0].line, _headless_breach(root, path)))
    for e in imports:
        layering = _layering_breaches(e) if e.importer in layered else iter(())
        for why in [*layering, *_private_breaches(e)]:
            breaches.append((e.path, e.line, f"{_where(root, e)} {e.importer} {why}"))
    return _cycles(root, graph) + [line for _, _, line in sorted(breaches)]


def test_the_tree_keeps_the_import_rules() -> None:
    """No cycle, a headless core and engine, a standalone library and workers, no private
    names across modules: every breach is listed with its file and line."""
    found = check(ROOT)
    assert found == [], "\n" + "\n".join(found)


# -- each rule reported on a tree that breaks it -------------------------------------------


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for relative, source in files.items():
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    return tmp_path


def test_a_cycle_through_a_lazy_import_is_reported(tmp_path: Path) -> None:
    """Two modules that import each other, one of them inside a function, form a cycle."""
    root = _tree(
        tmp_path,
        {
            "interlock_demo/__init__.py": "",
            "interlock_demo/a.py": "from interlock_demo.b import thing\n",
            "interlock_demo/b.py": "def f():\n    import interlock_demo.a\n",
        },
    )
    assert check(root) == [
        "cycle between interlock_demo.a, interlock_demo.b: "
        "interlock_demo/a.py:1 interlock_demo.a imports interlock_demo.b; "
        "interlock_demo/b.py:2 interlock_demo.b imports interlock_demo.a"
    ]


def test_a_submodule_importing_its_package_back_is_a_cycle(tmp_path: Path) -> None:
    """A package whose `__init__` imports a submodule that imports a name from the package
    (relatively, under TYPE_CHECKING) is a cycle; the `__init__` alone is not."""
    root = _tree(
        tmp_path,
        {
            "interlock_demo/__init__.py": "",
            "interlock_demo/engine/__init__.py": "from interlock_demo.engine.temporal import T\n",
            "interlock_demo/engine/temporal/__init__.py": (
                "from typing import TYPE_CHECKING\n"
                "from interlock_demo.engine.temporal import launcher\n"
                "if TYPE_CHECKING:\n    from .. import Engine\n"
            ),
            "interlock_demo/engine/temporal/launcher.py": "import os\n",
        },
    )
    found = check(root)
    assert len(found) == 1
    assert found[0].startswith(
        "cycle between interlock_demo.engine, interlock_demo.engine.temporal: "
    )
    assert "interlock_demo/engine/temporal/__init__.py:4" in found[0]
    assert "launcher" not in found[0]


def test_core_or_engine_importing_the_screen_is_reported(tmp_path: Path) -> None:
    """textual, rich and the demo's views are out of bounds for core/ and engine/."""
    root = _tree(
        tmp_path,
        {
            "interlock_demo/__init__.py": "",
            "interlock_demo/core/__init__.py": "import rich.text\n",
            "interlock_demo/engine/__init__.py": "def f():\n    from textual.app import App\n",
            "interlock_demo/engine/x.py": "from interlock_demo.views import tui\n",
            "interlock_demo/views/__init__.py": "import textual\n",
        },
    )
    assert check(root) == [
        "interlock_demo/core/__init__.py:1 interlock_demo.core imports rich.text: "
        "core/engine must stay headless",
        "interlock_demo/engine/__init__.py:2 interlock_demo.engine imports textual.app: "
        "core/engine must stay headless",
        "interlock_demo/engine/x.py:1 interlock_demo.engine.x imports interlock_demo.views: "
        "core/engine must stay headless",
    ]


def test_core_reaching_the_screen_through_another_module_is_reported(tmp_path: Path) -> None:
    """An import of a module that itself imports Textual (lazily) breaks the rule too."""
    root = _tree(
        tmp_path,
        {
            "interlock_demo/__init__.py": "",
            "interlock_demo/core/__init__.py": "",
            "interlock_demo/core/run.py": "import json\nfrom interlock_demo.mcp import desk\n",
            "interlock_demo/mcp/__init__.py": "",
            "interlock_demo/mcp/desk.py": "def show():\n    import textual.app\n",
        },
    )
    assert check(root) == [
        "interlock_demo/core/run.py:2 interlock_demo.core.run imports interlock_demo.mcp.desk"
        ", which reaches the screen: interlock_demo.mcp.desk -> textual.app "
        "(interlock_demo/mcp/desk.py:2): core/engine must stay headless"
    ]


def test_the_library_importing_the_demo_is_reported(tmp_path: Path) -> None:
    """`interlock` imports nothing of interlock_demo, workers or scenarios."""
    root = _tree(
        tmp_path,
        {
            "interlock/__init__.py": "import scenarios\n",
            "interlock/_core/gate.py": "from workers.protocol import KINDS\n",
            "interlock/testing/__init__.py": "from interlock_demo import settings\n",
        },
    )
    assert [line.split(" ", 1)[0] for line in check(root)] == [
        "interlock/__init__.py:1",
        "interlock/_core/gate.py:1",
        "interlock/testing/__init__.py:1",
    ]
    assert all(line.endswith("the library imports no demo") for line in check(root))


def demo_paths(root: Path) -> list[str]:
    """Every string in the library's code that names the demo's folder (`demo`, or a path
    through `demo/`): the library keeps no knowledge of where the demo keeps its files."""
    found = []
    for path in sorted((root / "interlock").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = node.value
                if text == "demo" or "demo/" in text.replace("\\", "/"):
                    found.append(f"{path.relative_to(root)}:{node.lineno} {text[:60]!r}")
    return found


def test_the_library_names_no_demo_folder() -> None:
    """No string of `interlock/` names the demo's folder (its store, logs or cases)."""
    assert demo_paths(ROOT) == []


def test_a_demo_folder_in_the_library_is_reported(tmp_path: Path) -> None:
    """A path under `demo/`, built with `/` or given whole, is named with its line."""
    root = _tree(
        tmp_path,
        {
            "interlock/__init__.py": "",
            "interlock/__main__.py": 'x = 1\nhome = "h" / "demo" / "interlock.sqlite3"\n',
            "interlock/_core/config.py": 'LOGS = ".interlock/demo/logs"\n',
        },
    )
    assert demo_paths(root) == [
        "interlock/__main__.py:2 'demo'",
        "interlock/_core/config.py:1 '.interlock/demo/logs'",
    ]


def test_workers_importing_the_demo_is_reported(tmp_path: Path) -> None:
    """`workers` imports nothing of interlock_demo."""
    root = _tree(
        tmp_path,
        {
            "workers/__init__.py": "",
            "workers/standalone.py": "from interlock_demo.payments import Payments\n",
        },
    )
    assert check(root) == [
        "workers/standalone.py:1 workers.standalone imports interlock_demo.payments: "
        "workers import no demo"
    ]


@pytest.mark.parametrize(
    ("importer", "source", "why"),
    [
        (
            "interlock_demo/views/tui/widgets/strip.py",
            "from interlock_demo.engine.supervisor import describe_exit\n",
            "widgets read the run model, never the engine",
        ),
        (
            "interlock_demo/engine/column.py",
            "from interlock_demo.doctor import live_failure_line\n",
            "the venue check is a command above the engine (network words: interlock_demo.network)",
        ),
        (
            "interlock_demo/reports/screenshots.py",
            "def f():\n    from textual.pilot import Pilot\n",
            "reports draw no screen (views/tui does)",
        ),
        (
            "interlock_demo/core/run.py",
            "from interlock.testing import new_id\n",
            "the run model knows no payments model",
        ),
    ],
)
def test_each_layer_rule_is_reported(tmp_path: Path, importer: str, source: str, why: str) -> None:
    """Each row of `LAYERS` past the first two, broken as the tree once broke it, is named."""
    packages = ("interlock_demo/views/tui/widgets", "interlock_demo/engine")
    packages += ("interlock_demo/reports", "interlock_demo/core")
    files = {f"{p}/__init__.py": "" for p in packages}
    files |= {"interlock_demo/__init__.py": "", "interlock_demo/views/__init__.py": ""}
    files |= {"interlock_demo/views/tui/__init__.py": "", importer: source}
    found = check(_tree(tmp_path, files))
    assert len(found) == 1 and found[0].endswith(why), found


def test_private_names_across_modules_are_reported(tmp_path: Path) -> None:
    """A `_name` from another module, or `pkg._mod` from outside `pkg`, is reported, in the
    benchmarks too; the library's own private modules inside `interlock/` are not."""
    root = _tree(
        tmp_path,
        {
            "interlock/__init__.py": "from interlock._core.gate import Gate\n",
            "interlock/_core/gate.py": "from interlock._core.journal import Journal\n",
            "interlock/_core/journal.py": "from interlock._core.errors import _message\n",
            "interlock/_core/errors.py": "",
            "interlock/_stripe/adapter.py": "",
            "workers/__init__.py": "",
            "workers/temporal_worker.py": "from workers.standalone import _setup\n",
            "workers/standalone.py": "from interlock._stripe import adapter\n",
            "bench/recovery.py": "import interlock._core.config as config\n",
        },
    )
    assert check(root) == [
        "bench/recovery.py:1 bench.recovery "
        "imports the private module interlock._core.config from outside interlock",
        "interlock/_core/journal.py:1 interlock._core.journal "
        "imports the private name _message from interlock._core.errors",
        "workers/standalone.py:1 workers.standalone "
        "imports the private module interlock._stripe.adapter from outside interlock",
        "workers/temporal_worker.py:1 workers.temporal_worker "
        "imports the private name _setup from workers.standalone",
    ]

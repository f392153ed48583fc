"""The architecture's import rules (docs/design.md, "Architecture"), held by import-linter.

The contracts are `[tool.importlinter]` in pyproject.toml, one for every arrow and every
"never" of the picture; `lint-imports` checks them, and so does this test, in-process
(the unit tier starts no process). Each kind of contract is also run over a copy of the
tree with one import added that breaks it, written as the tree once broke it (lazily,
under `TYPE_CHECKING`, relatively), so a contract cannot pass by not looking.

What import-linter cannot say is checked here, small:

- no cycle between modules: `acyclic_siblings` compares the parts of each package, not a
  package with its own submodules, so a submodule importing a name from its package's
  `__init__` (which imports the submodule back) is found here, on import-linter's graph.
  A module's parent packages, which Python runs before it, are not edges; an explicit
  `from pkg import name` is an edge to `pkg`;
- no private name crosses a module: nobody imports a `_name` from another module (outside
  `tests/`, in the benchmarks too), and a private module outside the graph (a third
  party's, or one the benchmarks import) is imported only from inside its package. The
  `private_modules` contract holds that rule inside the four packages;
- no string of the library names the demo's folder.
"""

from __future__ import annotations

import ast
import re
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grimp
import pytest
from importlinter.application import output, use_cases
from importlinter.configuration import configure

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "pyproject.toml"
# The packages the contracts govern: import-linter's root packages.
PACKAGES = ("interlock", "interlock_demo", "workers", "scenarios")
# Read for the private-name rule only: the benchmarks are scripts, not part of the layering.
PRIVATE_ONLY = ("bench",)
# A contract's line in the report: its name and whether it was kept.
VERDICT = re.compile(r"^(.*?)\s*(KEPT|BROKEN)(?: \(\d+ ignored imports?\))?$")


def lint(root: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> str:
    """import-linter's report on the packages under `root` against the repository's
    contracts (as `lint-imports` prints it, one contract a line), or raise if it could not
    run. The packages are found under `root`, whatever this process has imported."""
    monkeypatch.syspath_prepend(str(root))
    for name in PACKAGES:
        monkeypatch.delitem(sys.modules, name, raising=False)
    # Wide enough that each contract's name and verdict stay on one line.
    monkeypatch.setattr(output.console, "width", 400)
    configure()  # what `lint-imports` does first: its file readers and graph builder
    capsys.readouterr()
    use_cases.lint_imports(str(CONFIG), cache_dir=None, no_logo=True, is_debug_mode=True)
    report = capsys.readouterr().out
    assert "Contracts:" in report, report
    return report


def broken(report: str) -> set[str]:
    """The contracts the report names broken."""
    return {m[1] for line in report.splitlines() if (m := VERDICT.match(line)) and m[2] == "BROKEN"}


def test_the_tree_keeps_every_contract(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every contract of pyproject.toml is kept; each breach is listed with its chain."""
    report = lint(ROOT, capsys, monkeypatch)
    assert broken(report) == set(), report
    assert " 0 broken." in report, report


# -- each kind of contract broken on a copy of the tree -----------------------------------


@pytest.fixture(scope="module")
def copy_of_the_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The four packages' sources, as they are, in a folder of their own."""
    root = tmp_path_factory.mktemp("tree")
    for name in PACKAGES:
        shutil.copytree(ROOT / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    return root


@contextmanager
def added(root: Path, relative: str, source: str) -> Iterator[None]:
    """`source` appended to a module of the copy while the block runs, then taken out."""
    path = root / relative
    before = path.read_text()
    path.write_text(before + "\n" + source)
    try:
        yield
    finally:
        path.write_text(before)


# The contracts of pyproject.toml, by name.
LAYERS = (
    "The demo above the scenarios, the scenarios above the workers, all of them above the library"
)
SCENARIOS = "The scenarios name the workers' protocol only"
PROTOCOL = "The demo reaches the workers through workers.protocol only, except its launchers"
SHARED = "workers.protocol is shared, so it imports no worker code"
HEADLESS = "core and engine are headless: they never reach textual, rich or the views"
WIDGETS = "Widgets read the run model, never the engine"
DOCTOR = "The venue check is a command above the engine (network words: interlock_demo.network)"
REPORTS = "Reports draw no screen themselves (views/tui does)"
RUN_MODEL = "The run model knows no payments model"
PRIVATE = "A private module is imported only from inside its package"
ACYCLIC = "No cycle between the parts of a package, at any depth"
CORE = "The library's core imports no store backend, Stripe adapter, integration or test double"
STORES = "The stores and the Stripe adapter import no integration or test double"
ALONE = "Each store backend and the Stripe adapter stand alone: none imports another"
INTEGRATIONS = "The integrations build on the core and never on a test double"
PUBLIC = "interlock's public names hold no test double (interlock.testing may import everything)"


@pytest.mark.parametrize(
    ("relative", "source", "contracts"),
    [
        (
            "interlock/langchain.py",
            "def f():\n    import scenarios\n",
            # The scenarios name crash points, which are the testing kit's.
            (LAYERS, INTEGRATIONS),
        ),
        ("workers/standard.py", "from interlock_demo.errors import UsageError\n", (LAYERS,)),
        ("workers/interlock.py", "def f():\n    import scenarios\n", (LAYERS,)),
        (
            "scenarios/__init__.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from workers import run\n",
            # The demo imports the scenarios: through them, it would reach a worker.
            (SCENARIOS, PROTOCOL),
        ),
        (
            "interlock_demo/views/tui/widgets/story.py",
            "from workers.context import WorkerContext\n",
            (PROTOCOL,),
        ),
        ("workers/protocol/case.py", "def f():\n    from .. import stripe_sdk\n", (SHARED,)),
        ("interlock_demo/engine/column.py", "import rich.text\n", (HEADLESS,)),
        (
            "interlock_demo/views/tui/widgets/verdict_strip.py",
            "from interlock_demo.engine.supervisor import describe_exit\n",
            (WIDGETS,),
        ),
        (
            "interlock_demo/engine/column.py",
            "from interlock_demo.doctor import live_failure_line\n",
            # The doctor asks the Temporal engine's probe: a cycle too.
            (DOCTOR, ACYCLIC),
        ),
        (
            "interlock_demo/reports/sweep.py",
            "def f():\n    from textual.pilot import Pilot\n",
            (REPORTS,),
        ),
        ("interlock_demo/core/run.py", "from interlock.testing import new_id\n", (RUN_MODEL,)),
        ("interlock_demo/cli.py", "from interlock._core.journal import Journal\n", (PRIVATE,)),
        ("workers/stripe_sdk.py", "def f():\n    from workers import process\n", (ACYCLIC,)),
        (
            "interlock/_core/events.py",
            "def f():\n    from interlock._stores.memory import MemoryStore\n",
            # The stores build on the core: a core module importing one closes a cycle.
            (CORE, ACYCLIC),
        ),
        ("interlock/_stores/memory.py", "from interlock.langchain import guard\n", (STORES,)),
        (
            "interlock/_stripe/adapter.py",
            "from interlock._stores.sqlite import SqliteStore\n",
            (ALONE,),
        ),
        (
            "interlock/mcp.py",
            "from interlock.testing.model import PaymentsModel\n",
            (INTEGRATIONS,),
        ),
        (
            "interlock/__init__.py",
            "from interlock.testing import certify\n",
            # The run model imports `interlock`: through it, it would reach the test doubles.
            (PUBLIC, RUN_MODEL),
        ),
    ],
)
def test_each_contract_is_broken_by_an_import_that_breaks_it(
    copy_of_the_tree: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    relative: str,
    source: str,
    contracts: tuple[str, ...],
) -> None:
    """One import added to a copy of the tree breaks the contract of its rule, and those
    it reaches beyond (the chain through it)."""
    with added(copy_of_the_tree, relative, source):
        report = lint(copy_of_the_tree, capsys, monkeypatch)
    assert broken(report) == set(contracts), report


# -- cycles between modules ---------------------------------------------------------------


def cycles(graph: grimp.ImportGraph, packages: tuple[str, ...] = PACKAGES) -> list[str]:
    """Each import from one module of `packages` to another that the second reaches back,
    with the chain that closes the cycle."""
    ours = {m for m in graph.modules if m.split(".")[0] in packages}
    found = []
    for importer in sorted(ours):
        for imported in sorted(graph.find_modules_directly_imported_by(importer) & ours):
            # A module importing itself is not a cycle between modules.
            if imported == importer:
                continue
            if back := graph.find_shortest_chain(importer=imported, imported=importer):
                found.append(f"{importer} -> {' -> '.join(back)}")
    return found


def graph_of(root: Path, monkeypatch: pytest.MonkeyPatch, *packages: str) -> grimp.ImportGraph:
    """import-linter's import graph of `packages` under `root` (lazy and TYPE_CHECKING
    imports included, as the contracts read them)."""
    monkeypatch.syspath_prepend(str(root))
    for name in packages:
        monkeypatch.delitem(sys.modules, name, raising=False)
    return grimp.build_graph(*packages, cache_dir=None)


def test_no_module_is_in_a_cycle(monkeypatch: pytest.MonkeyPatch) -> None:
    """No module of the four packages imports one that imports it back, however far."""
    assert cycles(graph_of(ROOT, monkeypatch, *PACKAGES)) == []


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for relative, source in files.items():
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    return tmp_path


def test_a_cycle_through_a_lazy_import_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two modules that import each other, one of them inside a function, form a cycle."""
    root = _tree(
        tmp_path,
        {
            "interlock_demo/__init__.py": "",
            "interlock_demo/a.py": "from interlock_demo.b import thing\n",
            "interlock_demo/b.py": "def f():\n    import interlock_demo.a\n",
        },
    )
    assert cycles(graph_of(root, monkeypatch, "interlock_demo")) == [
        "interlock_demo.a -> interlock_demo.b -> interlock_demo.a",
        "interlock_demo.b -> interlock_demo.a -> interlock_demo.b",
    ]


def test_a_submodule_importing_its_package_back_is_a_cycle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
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
    assert cycles(graph_of(root, monkeypatch, "interlock_demo")) == [
        "interlock_demo.engine -> interlock_demo.engine.temporal -> interlock_demo.engine",
        "interlock_demo.engine.temporal -> interlock_demo.engine -> interlock_demo.engine.temporal",
    ]


# -- private names ------------------------------------------------------------------------


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(root: Path, path: Path, modules: set[str]) -> Iterator[tuple[int, str, str | None]]:
    """Each import of a module: its line, the module it names (relative imports resolved;
    `from pkg import mod` names `pkg.mod`) and, for `from m import name`, the name."""
    name = _module_name(root, path)
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, None
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")
                drop = node.level - 1 if path.name == "__init__.py" else node.level
                anchor = anchor[: len(anchor) - drop] if drop else anchor
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                yield node.lineno, (sub if sub in modules else base), alias.name


def private_breaches(root: Path) -> list[str]:
    """Every `_name` imported from another module, and every private module outside the
    four packages (a third party's) or imported from the benchmarks, from outside its
    package: one line each, naming the file and the line."""
    paths = [p for d in (*PACKAGES, *PRIVATE_ONLY) for p in sorted((root / d).rglob("*.py"))]
    modules = {_module_name(root, p) for p in paths}
    found = []
    for path in paths:
        importer = _module_name(root, path)
        for line, target, name in _imports(root, path, modules):
            where = f"{path.relative_to(root)}:{line} {importer}"
            if name is not None and _is_private(name) and not target.endswith("." + name):
                found.append(f"{where} imports the private name {name} from {target}")
                continue
            # The private_modules contract holds this among the four packages.
            graphed = target.split(".")[0] in PACKAGES and importer.split(".")[0] in PACKAGES
            parts = target.split(".")
            for depth, part in enumerate(parts):
                owner = ".".join(parts[:depth])
                inside = owner and (importer == owner or importer.startswith(owner + "."))
                if not graphed and _is_private(part) and not inside:
                    found.append(
                        f"{where} imports the private module {target} from outside {owner or 'it'}"
                    )
                    break
    return found


def test_no_private_name_crosses_a_module() -> None:
    """No `_name` from another module, and no third party's private module, anywhere
    outside tests/, the benchmarks included."""
    assert private_breaches(ROOT) == []


def test_private_names_across_modules_are_reported(tmp_path: Path) -> None:
    """A `_name` from another module, or a private module imported from the benchmarks or
    of a third party, is reported; the library's own private modules inside `interlock/`
    are not."""
    root = _tree(
        tmp_path,
        {
            "interlock/__init__.py": "from interlock._gate import Gate\n",
            "interlock/_gate.py": "from interlock._journal import Journal\n",
            "interlock/_journal.py": "from interlock._errors import _message\n",
            "interlock/_errors.py": "",
            "workers/__init__.py": "",
            "workers/temporal_worker.py": "from workers.standalone import _setup\n",
            "workers/standalone.py": "def f():\n    from stripe._request_options import R\n",
            "bench/recovery.py": "import interlock._config as config\n",
        },
    )
    assert private_breaches(root) == [
        "interlock/_journal.py:1 interlock._journal "
        "imports the private name _message from interlock._errors",
        "workers/standalone.py:2 workers.standalone "
        "imports the private module stripe._request_options from outside stripe",
        "workers/temporal_worker.py:1 workers.temporal_worker "
        "imports the private name _setup from workers.standalone",
        "bench/recovery.py:1 bench.recovery "
        "imports the private module interlock._config from outside interlock",
    ]


# -- the library keeps no knowledge of the demo's folder ----------------------------------


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
            "interlock/_config.py": 'LOGS = ".interlock/demo/logs"\n',
        },
    )
    assert demo_paths(root) == [
        "interlock/__main__.py:2 'demo'",
        "interlock/_config.py:1 '.interlock/demo/logs'",
    ]

"""Every process the demo starts gets an environment built by the helpers, read with `ast`.

Every module of `interlock_demo` and `workers` is read (nothing is imported, nothing
runs). The rule, for each call that starts a process:

- `subprocess.Popen`, `run`, `call`, `check_call`, `check_output` and
  `asyncio.create_subprocess_exec` / `_shell` (however imported or aliased) must pass
  `env=`, and that value must be built by one of `HELPERS` (`interlock_demo.settings.environment`,
  and `settings.worker.worker_env` for workers): a call to one, a dict that unpacks one
  (`{**child_env(), ...}`), one `| {...}`, or a name that every assignment in the same
  function sets so. Adding keys to it afterwards (`env["TERM"] = ...`) is allowed: that
  is what the child needs on top, for review to judge.
- `os.exec*`, `os.spawn*`, `os.posix_spawn*`, `os.system`, `os.popen` and `pty.spawn` are
  refused outright: they take the whole environment or a hand-built one.
- A spawn that passes an environment it was given (a parameter, `self.env`) must be one
  of `DELEGATES`, each with its reason; then every call of that delegate in the tree must
  pass an environment built as above.
- A library class that spawns (`LIBRARY_SPAWNERS`: textual-serve's, which copies our
  whole environment) is never instantiated directly, and a subclass overrides each method
  through which it spawns, so that the spawn is ours and meets the rule above.
- Each helper other than `child_env` builds on another helper, so `child_env`'s
  allow-list is the one every environment starts from.

Each part of the rule has a negative test over a small module written to `tmp_path`.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from interlock_demo.settings.environment import (
    KEY_NAMES,
    bench_env,
    child_env,
    demo_env,
    stripe_cli_env,
)

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("interlock_demo", "workers")
HELPERS = frozenset({"child_env", "demo_env", "bench_env", "stripe_cli_env", "worker_env"})
# Where the helpers live: the only modules that may build an environment from scratch.
HELPER_MODULES = ("interlock_demo/settings/environment.py", "interlock_demo/settings/worker.py")
NEEDS_ENV = frozenset(
    {
        "subprocess.Popen",
        "subprocess.run",
        "subprocess.call",
        "subprocess.check_call",
        "subprocess.check_output",
        "asyncio.create_subprocess_exec",
        "asyncio.create_subprocess_shell",
        "asyncio.subprocess.create_subprocess_exec",
        "asyncio.subprocess.create_subprocess_shell",
    }
)
REFUSED_PREFIXES = ("os.exec", "os.spawn", "os.posix_spawn")
REFUSED = frozenset({"os.system", "os.popen", "pty.spawn"})


@dataclass(frozen=True)
class Delegate:
    """A spawn that passes on an environment it was given, and who gives it."""

    callee: str  # how its callers call it, as the source spells the call
    position: int  # the environment's positional index in those calls
    reason: str


DELEGATES: dict[tuple[str, str], Delegate] = {
    ("interlock_demo/engine/supervisor.py", "WorkerProcess._spawn"): Delegate(
        "WorkerProcess",
        1,
        "the supervisor starts the worker its caller built, with the caller's worker_env",
    ),
    ("interlock_demo/engine/forkserver.py", "ForkServer.start"): Delegate(
        "ForkServer",
        1,
        "a column's fork server runs with the environment its caller built (the column's "
        "worker_env, doctor's child_env); each worker it forks gets its own WorkerProcess's",
    ),
    ("interlock_demo/reports/e2e_report.py", "_Children.spawn"): Delegate(
        "children.spawn",
        1,
        "one place starts every report run (so a signal can stop them all); _run_one builds "
        "each run's environment",
    ),
}
# Library classes that start a process themselves, and the methods through which they do.
LIBRARY_SPAWNERS: dict[str, tuple[str, ...]] = {
    "textual_serve.app_service.AppService": ("_open_app_process",),
    "textual_serve.server.Server": ("handle_websocket",),
}


@dataclass(frozen=True)
class Spawn:
    """A call that starts a process (or a delegate's call), where it is and what it passes."""

    path: str
    line: int
    function: str  # the enclosing function's qualified name
    callee: str
    env: ast.expr | None


def _aliases(tree: ast.Module) -> dict[str, str]:
    """What each imported name stands for: `sp` -> `subprocess`, `Popen` -> `subprocess.Popen`."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                names[alias.asname or alias.name.split(".")[0]] = (
                    alias.name if alias.asname else alias.name.split(".")[0]
                )
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def _dotted(node: ast.expr, aliases: dict[str, str]) -> str | None:
    """`a.b.c` with `a` resolved through the imports; None for anything else."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([aliases.get(node.id, node.id), *reversed(parts)])


def _functions(tree: ast.Module) -> Iterator[tuple[str, ast.AST]]:
    """Every function with its qualified name (`Class.method`), and the module as ``."""
    yield "", tree

    def walk(node: ast.AST, prefix: str) -> Iterator[tuple[str, ast.AST]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                yield name, child
                yield from walk(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, f"{prefix}{child.name}.")
            else:
                yield from walk(child, prefix)

    yield from walk(tree, "")


def _own_nodes(scope: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a function (or module) outside the functions nested in it."""
    for child in ast.iter_child_nodes(scope):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        yield child
        yield from _own_nodes(child)


def _keyword(call: ast.Call, name: str, position: int | None = None) -> ast.expr | None:
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    if position is not None and len(call.args) > position:
        return call.args[position]
    return None


def _from_helper(expr: ast.expr, scope: ast.AST) -> bool:
    """Whether `expr` is an environment built by a helper (the module docstring's rule)."""
    if isinstance(expr, ast.Call):
        func = expr.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        return name in HELPERS
    if isinstance(expr, ast.Dict):
        return any(
            k is None and _from_helper(v, scope)
            for k, v in zip(expr.keys, expr.values, strict=True)
        )
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.BitOr):
        return _from_helper(expr.left, scope)
    if isinstance(expr, ast.Name):
        values = list(_assigned(expr.id, scope))
        return bool(values) and all(_from_helper(v, scope) for v in values)
    return False


def _bound(target: ast.expr) -> Iterator[str]:
    """The names an assignment target rebinds (not `env["k"]` or `self.env`: those change
    or set something else)."""
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from _bound(element)
    elif isinstance(target, ast.Starred):
        yield from _bound(target.value)


def _assigned(name: str, scope: ast.AST) -> Iterator[ast.expr]:
    """Every value the function binds to `name`; one it cannot see (unpacked from a tuple,
    a loop's or a `with`'s target) counts as not built by a helper."""
    unseen = ast.Constant(None)
    for node in _own_nodes(scope):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id == name:
                    yield node.value
                elif name in _bound(target):
                    yield unseen
        elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)):
            # A bare annotation (`env: dict[str, str]`) binds nothing.
            if isinstance(node.target, ast.Name) and node.target.id == name and node.value:
                yield node.value
        elif any(name in _bound(target) for target in _loop_targets(node)):
            yield unseen


def _loop_targets(node: ast.AST) -> list[ast.expr]:
    """What a `for` or a `with` binds."""
    if isinstance(node, (ast.For, ast.AsyncFor)):
        return [node.target]
    if isinstance(node, (ast.With, ast.AsyncWith)):
        return [i.optional_vars for i in node.items if i.optional_vars is not None]
    return []


def _parameters(scope: ast.AST) -> set[str]:
    if not isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return set()
    a = scope.args
    return {p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)}


def _passed_on(expr: ast.expr, scope: ast.AST) -> bool:
    """Whether `expr` is an environment the function was given: a parameter, `self.x`."""
    if isinstance(expr, ast.Attribute):
        return isinstance(expr.value, ast.Name) and expr.value.id == "self"
    return (
        isinstance(expr, ast.Name)
        and expr.id in _parameters(scope)
        and not any(True for _ in _assigned(expr.id, scope))
    )


def _modules(root: Path, packages: tuple[str, ...]) -> Iterator[tuple[str, ast.Module]]:
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            yield rel, ast.parse(path.read_text(), filename=rel)


def violations(
    root: Path,
    packages: tuple[str, ...] = PACKAGES,
    delegates: dict[tuple[str, str], Delegate] = DELEGATES,
) -> list[str]:
    """Every spawn that breaks the rule, as `file:line: what is wrong`."""
    found: list[str] = []
    delegate_calls = {d.callee: d for d in delegates.values()}
    seen_delegates: set[tuple[str, str]] = set()
    for rel, tree in _modules(root, packages):
        aliases = _aliases(tree)
        for qualname, scope in _functions(tree):
            for node in _own_nodes(scope):
                if not isinstance(node, ast.Call):
                    continue
                callee = _dotted(node.func, aliases) or ""
                where = f"{rel}:{node.lineno}"
                if callee in REFUSED or callee.startswith(REFUSED_PREFIXES):
                    found.append(f"{where}: {callee} starts a process without the helpers' env")
                elif callee in NEEDS_ENV:
                    env = _keyword(node, "env")
                    if env is None:
                        found.append(
                            f"{where}: {callee} without env= inherits our whole environment"
                        )
                    elif _from_helper(env, scope):
                        pass
                    elif _passed_on(env, scope) and (rel, qualname) in delegates:
                        seen_delegates.add((rel, qualname))
                    else:
                        found.append(
                            f"{where}: {callee} env={ast.unparse(env)} is not built by "
                            f"{', '.join(sorted(HELPERS))}"
                        )
                elif callee in LIBRARY_SPAWNERS:
                    found.append(f"{where}: {callee} spawns with its own environment builder")
                spelled = ast.unparse(node.func)
                if spelled in delegate_calls:
                    env = _keyword(node, "env", delegate_calls[spelled].position)
                    if env is None or not _from_helper(env, scope):
                        shown = "nothing" if env is None else ast.unparse(env)
                        found.append(
                            f"{where}: {spelled} is given {shown}, not an env built by the helpers"
                        )
        found += _library_subclasses(rel, tree, aliases)
    found += [
        f"{rel}: {qualname} is a DELEGATES entry but passes on no environment there"
        for rel, qualname in sorted(set(delegates) - seen_delegates)
    ]
    return found


def _library_subclasses(rel: str, tree: ast.Module, aliases: dict[str, str]) -> Iterator[str]:
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        own = {n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        for base in node.bases:
            spawns = LIBRARY_SPAWNERS.get(_dotted(base, aliases) or "", ())
            for method in spawns:
                if method not in own:
                    yield (
                        f"{rel}:{node.lineno}: {node.name} keeps {ast.unparse(base)}.{method}, "
                        "which starts a process with the library's copy of our environment"
                    )


def helper_problems(root: Path) -> list[str]:
    """Each helper but `child_env` builds on another helper; `child_env` is defined once."""
    problems = []
    defined: dict[str, list[str]] = {}
    for rel, tree in _modules(root, PACKAGES):
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name in HELPERS:
                defined.setdefault(node.name, []).append(rel)
                calls = {
                    n.func.id
                    for n in ast.walk(node)
                    if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                }
                if node.name != "child_env" and not calls & HELPERS:
                    problems.append(f"{rel}:{node.lineno}: {node.name} does not build on child_env")
    for name in sorted(HELPERS):
        places = defined.get(name, [])
        if len(places) != 1 or places[0] not in HELPER_MODULES:
            problems.append(
                f"{name} is defined in {places or 'no module'}, not once in {HELPER_MODULES}"
            )
    return problems


# -- the tree ---------------------------------------------------------------------------


def test_every_spawn_in_the_tree_passes_an_env_built_by_the_helpers() -> None:
    """No process the demo or a worker starts gets our whole environment."""
    assert violations(ROOT) == []


def test_the_helpers_all_start_from_the_one_allow_list() -> None:
    assert helper_problems(ROOT) == []


def test_the_rule_sees_the_spawns_it_governs() -> None:
    """The checker finds the demo's spawns at all (a rule that reads nothing passes too)."""
    callees = set()
    for _, tree in _modules(ROOT, PACKAGES):
        aliases = _aliases(tree)
        callees |= {
            _dotted(n.func, aliases)
            for n in ast.walk(tree)
            if isinstance(n, ast.Call) and _dotted(n.func, aliases) in NEEDS_ENV
        }
    assert {"subprocess.Popen", "subprocess.run", "asyncio.create_subprocess_shell"} <= callees


# -- negative tests: each part of the rule catches a small module that breaks it --------


def _tree(tmp_path: Path, source: str, name: str = "mod.py") -> Path:
    package = tmp_path / "pkg"
    package.mkdir(exist_ok=True)
    (package / name).write_text(source)
    return tmp_path


def _check(
    tmp_path: Path, source: str, delegates: dict[tuple[str, str], Delegate] | None = None
) -> list[str]:
    """The rule over one module `pkg/mod.py`, with only the delegates given (none: the
    tree's would be reported stale there)."""
    return violations(_tree(tmp_path, source), ("pkg",), delegates or {})


def test_a_spawn_without_env_is_reported_with_its_line(tmp_path: Path) -> None:
    found = _check(tmp_path, "import subprocess\n\n\ndef f():\n    subprocess.run(['true'])\n")
    assert found == ["pkg/mod.py:5: subprocess.run without env= inherits our whole environment"]


@pytest.mark.parametrize(
    "source",
    [
        "import os, subprocess\nsubprocess.Popen(['x'], env=dict(os.environ))\n",
        "import os\nfrom subprocess import Popen as P\nP(['x'], env=os.environ.copy())\n",
        "import asyncio as aio\nasync def f(cmd):\n    await aio.create_subprocess_shell(cmd)\n",
        # The helper's env replaced on one path: every assignment must come from a helper.
        "import os, subprocess\nfrom e import child_env\ndef f(x):\n    env = child_env()\n"
        "    if x:\n        env = dict(os.environ)\n    subprocess.run(['x'], env=env)\n",
        # A parameter passed on by a function that is not a delegate.
        "import subprocess\ndef f(env):\n    subprocess.run(['x'], env=env)\n",
        "import os\nos.execv('/bin/true', ['true'])\n",
        "import os\nos.system('true')\n",
    ],
)
def test_a_spawn_whose_env_is_not_from_a_helper_is_reported(tmp_path: Path, source: str) -> None:
    found = _check(tmp_path, source)
    assert len(found) == 1 and found[0].startswith("pkg/mod.py:"), found


@pytest.mark.parametrize(
    "source",
    [
        "import subprocess\nfrom e import child_env\nsubprocess.run(['x'], env=child_env())\n",
        "import subprocess\nfrom e import demo_env\ndef f():\n    env = demo_env(keys=True)\n"
        "    env['TERM'] = 'xterm'\n    subprocess.Popen(['x'], env=env)\n",
        "import subprocess\nfrom e import child_env\n"
        "subprocess.run(['x'], env={**child_env(), 'A': '1'})\n",
        "import subprocess\nimport e\nsubprocess.run(['x'], env=e.bench_env() | {'A': '1'})\n",
    ],
)
def test_a_spawn_with_a_helper_built_env_passes(tmp_path: Path, source: str) -> None:
    assert _check(tmp_path, source) == []


_DELEGATE_SOURCE = """\
import os, subprocess
from e import child_env


class Runner:
    def start(self, argv, env):
        subprocess.Popen(argv, env=env)


def good():
    Runner().start(['x'], child_env())


def bad():
    Runner().start(['x'], dict(os.environ))
"""


def test_a_delegate_passes_and_each_of_its_callers_is_checked(tmp_path: Path) -> None:
    runner = {("pkg/mod.py", "Runner.start"): Delegate("Runner().start", 1, "one place")}
    found = _check(tmp_path, _DELEGATE_SOURCE, delegates=runner)
    assert found == [
        "pkg/mod.py:15: Runner().start is given dict(os.environ), not an env built by the helpers"
    ]


def test_passing_on_an_env_outside_the_delegates_is_reported(tmp_path: Path) -> None:
    found = _check(tmp_path, _DELEGATE_SOURCE, delegates={})
    assert [f.split(":")[:2] for f in found] == [["pkg/mod.py", "7"]]


def test_a_stale_delegate_is_reported(tmp_path: Path) -> None:
    gone = {("pkg/mod.py", "Gone.start"): Delegate("Gone", 1, "was here")}
    found = _check(tmp_path, "x = 1\n", delegates=gone)
    assert found == [
        "pkg/mod.py: Gone.start is a DELEGATES entry but passes on no environment there"
    ]


def test_a_library_spawner_kept_or_used_as_is_is_reported(tmp_path: Path) -> None:
    source = (
        "from textual_serve.app_service import AppService\n"
        "from textual_serve.server import Server\n\n"
        "class Tab(AppService):\n    def stop(self): ...\n\n"
        "Server('cmd').serve()\n"
    )
    found = _check(tmp_path, source)
    assert [f.split(":")[1] for f in found] == ["7", "4"]
    assert "keeps AppService._open_app_process" in found[1]


def test_a_helper_that_does_not_start_from_child_env_is_reported(tmp_path: Path) -> None:
    (tmp_path / "interlock_demo").mkdir()
    (tmp_path / "workers").mkdir()
    (tmp_path / "interlock_demo" / "environment.py").write_text(
        "import os\n\ndef child_env():\n    return {}\n\n"
        "def demo_env():\n    return dict(os.environ)\n"
    )
    found = helper_problems(tmp_path)
    assert "interlock_demo/environment.py:6: demo_env does not build on child_env" in found


# -- what the helpers pass on -----------------------------------------------------------

PARENT = {
    "PATH": "/usr/bin",
    "HOME": "/home/presenter",
    "GITHUB_TOKEN": "ghp_madeUpToken",
    "STRIPE_SECRET_KEY": "sk_test_madeUp",
    "ANTHROPIC_API_KEY": "sk-ant-madeUp",
    "XDG_CONFIG_HOME": "/home/presenter/.cfg",
    "INTERLOCK_CLAIM_TTL": "6",
    # The presenter's own receipt key settings: the demo keeps its own (settings.receipt_key).
    "INTERLOCK_RECEIPT_KEY": "a-receipt-key",
    "INTERLOCK_SIGNING_KEY": "/home/presenter/signing-key.pem",
    "INTERLOCK_VERIFY_KEYS": "/home/presenter/keys.json",
}


def test_the_demo_child_gets_its_settings_and_the_keys_only_when_asked() -> None:
    """A child that is the demo takes its INTERLOCK_ settings, but not the presenter's own
    receipt key settings (an old HMAC secret would stop its gate), and the user's keys only
    when it may run live."""
    plain = demo_env(home=Path("/tmp/h"), parent=PARENT)
    assert plain == {
        "PATH": "/usr/bin",
        "HOME": "/home/presenter",
        "INTERLOCK_CLAIM_TTL": "6",
        "INTERLOCK_HOME": "/tmp/h",
    }
    live = demo_env(keys=True, parent=PARENT)
    assert {k: live[k] for k in KEY_NAMES} == {k: PARENT[k] for k in KEY_NAMES}
    assert live["XDG_CONFIG_HOME"] == PARENT["XDG_CONFIG_HOME"]
    assert "GITHUB_TOKEN" not in live
    assert [k for k in live if "RECEIPT" in k or "SIGNING" in k or "VERIFY_KEYS" in k] == []


def test_a_benchmark_and_a_tool_get_no_key() -> None:
    assert bench_env(PARENT) == {
        "PATH": "/usr/bin",
        "HOME": "/home/presenter",
        "INTERLOCK_CLAIM_TTL": "6",
    }
    assert child_env(PARENT) == {"PATH": "/usr/bin", "HOME": "/home/presenter"}
    assert stripe_cli_env(PARENT) == {
        **child_env(PARENT),
        "XDG_CONFIG_HOME": "/home/presenter/.cfg",
    }

"""The public API of `interlock`: exactly `__all__`, sorted, documented, and light to import."""

from __future__ import annotations

import ast
import inspect
import json
import pkgutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

import interlock

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("textual", "rich", "anthropic")


def _public_names() -> list[str]:
    return [
        name
        for name, value in vars(interlock).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    ]


def test_all_lists_exactly_the_public_names() -> None:
    """`__all__` lists every public attribute that is not a submodule, and nothing else."""
    assert sorted(interlock.__all__) == sorted(_public_names())
    assert len(set(interlock.__all__)) == len(interlock.__all__)


def test_all_is_sorted() -> None:
    """`__all__` is sorted case-insensitively, as httpx's tests/test_exported_members.py has it."""
    assert interlock.__all__ == sorted(interlock.__all__, key=str.casefold)


def _own_doc(value: object) -> str | None:
    doc = vars(value).get("__doc__") if isinstance(value, type) else getattr(value, "__doc__", None)
    if not isinstance(doc, str):
        return None
    # A dataclass without a docstring gets its signature as one: that is not documentation.
    if isinstance(value, type) and doc.startswith(f"{value.__name__}("):
        return None
    return doc.strip() or None


def _documented_constants() -> set[str]:
    """Module-level names in interlock's modules with a comment above or a docstring below."""
    found: set[str] = set()
    for info in pkgutil.iter_modules(interlock.__path__):
        path = Path(interlock.__path__[0]) / f"{info.name}.py"
        source = path.read_text()
        lines = source.splitlines()
        body = ast.parse(source).body
        for i, node in enumerate(body):
            if not isinstance(node, (ast.Assign, ast.AnnAssign)):
                continue
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = {t.id for t in targets if isinstance(t, ast.Name)}
            after = body[i + 1] if i + 1 < len(body) else None
            docstring_below = (
                isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            )
            comment_above = node.lineno >= 2 and lines[node.lineno - 2].lstrip().startswith("#")
            if docstring_below or comment_above:
                found |= names
    return found


@pytest.mark.parametrize("name", interlock.__all__)
def test_every_public_name_is_documented(name: str) -> None:
    """Each public class and function has its own docstring; each constant a comment or one."""
    value = getattr(interlock, name)
    if isinstance(value, type) or callable(value):
        assert _own_doc(value), f"interlock.{name} has no docstring"
    else:
        assert name in _documented_constants(), f"interlock.{name} is not documented"
    if isinstance(value, type):
        for attr, member in vars(value).items():
            if attr.startswith("_"):
                continue
            function = member.fget if isinstance(member, property) else member
            function = getattr(function, "__func__", function)
            if inspect.isfunction(function):
                assert function.__doc__, f"interlock.{name}.{attr} has no docstring"


@pytest.mark.parametrize(
    "module",
    [
        "interlock",
        "interlock.testing",
        "interlock_demo.payments",
        # The worker modules themselves: the `workers` package alone is empty.
        "workers.standalone",
        "workers.run",
        "workers.protocol",
        "workers.agent",
        "scenarios",
        # The run model, the engine and the headless view: a headless or mock run needs
        # no screen and no model SDK.
        "interlock_demo.core.run",
        "interlock_demo.engine",
        "interlock_demo.views.headless",
    ],
)
def test_headless_imports_stay_light(module: str) -> None:
    """Importing a headless module loads none of textual, rich or anthropic."""
    code = (
        f"import json, sys; import {module}; "
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60
    )

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []

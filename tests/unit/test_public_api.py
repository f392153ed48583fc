"""The public API of `interlock`: exactly `__all__`, sorted and documented."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import types
from pathlib import Path

import pytest

import interlock

ROOT = Path(__file__).resolve().parents[2]


def _public_names() -> list[str]:
    # dir(), not vars(): the names loaded on first use count before anyone used them.
    return [
        name
        for name in dir(interlock)
        if not name.startswith("_") and not isinstance(getattr(interlock, name), types.ModuleType)
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
    for path in sorted(Path(interlock.__path__[0]).rglob("*.py")):
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
    ("location", "shown"),
    [
        ("postgresql://u:MadeUpPw@h:5432/db?sslmode=require", "postgresql://u:***@h:5432/db?sslmode=require"),
        ("postgres://u@h/db?password=MadeUpPw", "postgres://u@h/db?password=***"),
        ("postgress://u:MadeUpPw@h/db", "postgress://u:***@h/db"),  # a mistyped scheme too
        ("journals/password=keep.sqlite3", "journals/password=keep.sqlite3"),  # a path as it is
        ("password=keep.sqlite3", "password=keep.sqlite3"),
        (Path("journals/password=keep.sqlite3"), "journals/password=keep.sqlite3"),
    ],
)  # fmt: skip
def test_a_store_location_is_described_without_its_password(
    location: str | Path, shown: str
) -> None:
    """`PostgresStore.describe`, the one door for showing where a store lives: a URL loses
    its password, a path (even one that reads like a DSN's `password=`) is left alone."""
    assert interlock.PostgresStore.describe(location) == shown


def test_which_refunds_count_is_one_set_on_refund() -> None:
    """`Refund.COUNTING_STATUSES` is what `Refund.counts` reads; a failed or canceled
    refund does not count, and the set is not a dataclass field."""
    counting = interlock.Refund.COUNTING_STATUSES
    assert counting == {"pending", "requires_action", "succeeded"}
    for status in ("pending", "requires_action", "succeeded", "failed", "canceled"):
        refund = interlock.Refund("re_1", 100, status, "pi_1")
        assert refund.counts is (status in counting)
    assert "COUNTING_STATUSES" not in {f.name for f in dataclasses.fields(interlock.Refund)}


def test_the_demos_switches_and_crash_points_are_not_the_librarys() -> None:
    """A library user never meets the demo's emulated switches, and the crash points (a
    supervisor's `IN_FLIGHT` among them) are `interlock.testing`'s, where certify uses them."""
    import interlock.testing

    assert not {"Switches", "CrashPoint"} & set(dir(interlock))
    assert {"CrashPoint", "Emulate24h", "NoLookup"} <= set(interlock.testing.__all__)
    assert interlock.testing.CrashPoint.IN_FLIGHT.held

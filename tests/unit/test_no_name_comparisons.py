"""No code outside the tables compares a column, scenario, outage or mode name to a string.

A column, a scenario, an outage action and a mode are each one row of a table
(`interlock_demo.core.columns`, `scenarios`, `scenarios.Outage`, the modes'
`interlock_demo.settings.MODES`), and code asks the row (`column_kind(name).signs_receipts`,
`outage.revokes`, `mode.in_process`) instead of comparing its name: a new row then needs no
edit where the old ones were named. This reads every module of the demo's packages and
names each comparison of a name from those tables with a string, as `==`, `!=`, `in` or
`not in` a literal tuple, list or set.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

from interlock_demo.core.columns import COLUMN_KINDS
from interlock_demo.settings.modes import MODES
from scenarios import SCENARIOS, Outage

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("interlock_demo", "workers", "scenarios")
# Every name a row owns: a comparison with one of these is a branch on the row's name.
NAMES = frozenset({*COLUMN_KINDS, *SCENARIOS, *(o.value for o in Outage), *MODES})
# Comparisons that only share a word with a table, each with why it is not a row's name.
NOT_A_NAME = {
    'interlock_demo/mcp/cli.py: args.mcp_command in ("approve", "revoke")': (
        "the MCP desk's own `revoke` subcommand, not the outage action"
    ),
}


def _literals(node: ast.expr) -> list[str]:
    """The string constants `node` spells: itself, or the items of a literal collection."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return [s for item in node.elts for s in _literals(item)]
    return []


def name_comparisons(path: Path, relative_to: Path) -> list[str]:
    """Each comparison in the module at `path` of something with a table's name, as
    `file:line: the source`."""
    source = path.read_text(encoding="utf-8")
    found = []
    for node in ast.walk(ast.parse(source, filename=str(path))):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        if any(n in NAMES for operand in operands for n in _literals(operand)):
            where = path.relative_to(relative_to).as_posix()
            found.append(f"{where}:{node.lineno}: {ast.get_source_segment(source, node)}")
    return found


def _without_line(hit: str) -> str:
    """`file:line: source` as `file: source`, so that an allowed comparison may move."""
    where, source = hit.split(": ", 1)
    return f"{where.rsplit(':', 1)[0]}: {source}"


def modules(root: Path, packages: Iterable[str]) -> list[Path]:
    """Every Python module of `packages` under `root`."""
    return sorted(p for package in packages for p in (root / package).rglob("*.py"))


def test_no_module_compares_a_table_name_with_a_string() -> None:
    """Every comparison with a column's, scenario's, outage's or mode's name is in the
    tables' rows instead: none is found in the demo, the workers or the scenarios."""
    found = [
        hit
        for path in modules(ROOT, PACKAGES)
        for hit in name_comparisons(path, ROOT)
        if _without_line(hit) not in NOT_A_NAME
    ]
    assert found == [], "ask the row instead of comparing its name:\n" + "\n".join(found)


def test_a_planted_comparison_is_found_and_named(tmp_path: Path) -> None:
    """The scan is not blind: comparisons planted in a module are each named by file and
    line, in every spelling it looks for, while a plain string comparison is not."""
    package = tmp_path / "workers"
    package.mkdir()
    (package / "planted.py").write_text(
        "def f(outage: str, column: str, scenario: str, mode: str) -> int:\n"
        '    if outage == "hand-refund":\n'
        "        return 1\n"
        '    if "checked" != column:\n'
        "        return 2\n"
        '    if scenario in ("revoked", "after-answer"):\n'
        "        return 3\n"
        '    if mode not in {"mock"}:\n'
        "        return 4\n"
        '    return 5 if column == "a column of no table" else 6\n',
        encoding="utf-8",
    )
    assert [
        hit.split(": ", 1)[0]
        for path in modules(tmp_path, ["workers"])
        for hit in name_comparisons(path, tmp_path)
    ] == [
        "workers/planted.py:2",
        "workers/planted.py:4",
        "workers/planted.py:6",
        "workers/planted.py:8",
    ]

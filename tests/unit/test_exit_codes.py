"""The CLI's exit codes are defined once (`interlock_demo.exit_codes`), as the design's
contract states them, and every command returns them from there."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from interlock_demo import cli
from interlock_demo.exit_codes import ExitCode

ROOT = Path(__file__).resolve().parents[2]


def test_the_codes_are_the_designs_contract() -> None:
    """docs/design.md §6 and the enum say the same numbers for the same meanings."""
    design = " ".join((ROOT / "docs" / "design.md").read_text().split())
    contract = re.search(
        r"\*\*CLI exit codes\*\*: (\d) every column ended as the truth table says; (\d) a "
        r"deviation; (\d) bad usage or configuration; (\d) the run could not finish",
        design,
    )
    assert contract is not None, "docs/design.md §6 no longer states the exit codes"
    stated = [int(n) for n in contract.groups()]
    assert stated == [ExitCode.OK, ExitCode.DEVIATION, ExitCode.USAGE, ExitCode.UNFINISHED]


def test_no_module_keeps_its_own_copy() -> None:
    """No module of the demo but exit_codes.py defines an `EXIT_*` name of its own."""
    copies = []
    for path in sorted((ROOT / "interlock_demo").rglob("*.py")):
        if path.name == "exit_codes.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = node.targets if isinstance(node, ast.Assign) else []
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name) and name.id.startswith("EXIT_"):
                        copies.append(f"{path.relative_to(ROOT)}:{node.lineno} {name.id}")
    assert copies == []


def test_the_cli_returns_the_named_codes() -> None:
    """A usage error comes back as `ExitCode.USAGE`, which `sys.exit` takes as 2."""
    code = cli.main(["--json"])
    assert code is ExitCode.USAGE and code == 2

"""Every python block of the README runs as written.

A block runs as a script in a fresh folder, with this venv's `bin/` first on `PATH` (the
commands the README names, such as `interlock-demo`, are the installed ones) and the
environment a reader sets for a block that reads one (`STRIPE_SECRET_KEY`, a made-up test
key, and `INTERLOCK_STRIPE_BASE`, the loopback emulator, as the README says); a block that
defines `test_` functions runs under pytest instead, as a user would put it in their CI. A
block that is deliberately partial starts with the line `# fragment`. One block needs
servers a user starts by hand (Temporal's dev server and the emulator on fixed ports); the
test named for it runs it with both started on free ports; another is an MCP server, which
its test runs as a server and drives with the SDK's client.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from interlock.testing import StripeEmulator
from tests.conftest import TEST_KEY

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
FRAGMENT = "# fragment"
RUN_ELSEWHERE = {
    "### Temporal: a guarded activity": (
        "tests/e2e/test_temporal_helper.py",
        "test_the_readme_example_runs_offline_and_refunds_once",
    ),
    "#### On your own MCP server": (
        "tests/e2e/test_mcp_library.py",
        "test_a_server_killed_mid_refund_is_followed_by_one_that_finds_its_refund",
    ),
}


def _blocks() -> list[tuple[str, str]]:
    """(the heading above it, the block's code) for every python block, in order."""
    heading, found = "", []
    for part in re.split(r"(^```python\n.*?^```$)", README.read_text(), flags=re.S | re.M):
        if part.startswith("```python\n"):
            found.append((heading, part.removeprefix("```python\n").removesuffix("```")))
        else:
            headings = re.findall(r"^#{2,4} .+$", part, flags=re.M)
            heading = headings[-1] if headings else heading
    return found


BLOCKS = _blocks()


@pytest.fixture(scope="module")
def emulator() -> Iterator[StripeEmulator]:
    with StripeEmulator() as running:
        yield running


def test_the_readme_has_python_blocks_and_each_is_run_somewhere() -> None:
    """The parametrized test below covers every block: none is silently dropped, and each
    block run elsewhere names a test that exists."""
    assert len(BLOCKS) >= 4
    for heading, (path, name) in RUN_ELSEWHERE.items():
        assert heading in {h for h, _ in BLOCKS}, heading
        assert f"def {name}(" in (ROOT / path).read_text(), (path, name)


@pytest.mark.e2e
@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    ("heading", "code"), BLOCKS, ids=[f"{i}:{h.lstrip('# ')}" for i, (h, _) in enumerate(BLOCKS)]
)
def test_a_readme_block_runs_as_written(
    heading: str, code: str, emulator: StripeEmulator, tmp_path: Path
) -> None:
    """The block exits 0 (its own asserts and prints are the check), or is a fragment."""
    if code.startswith(FRAGMENT + "\n"):
        pytest.skip("a fragment: the README marks it as deliberately partial")
    if heading in RUN_ELSEWHERE:
        pytest.skip(f"run by {'::'.join(RUN_ELSEWHERE[heading])}, with its servers started")
    tests = re.search(r"^def test_\w+\(", code, flags=re.M) is not None
    script = tmp_path / ("test_readme_block.py" if tests else "readme_block.py")
    script.write_text(code)
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["INTERLOCK_HOME"] = str(tmp_path / ".interlock")
    env["STRIPE_SECRET_KEY"] = TEST_KEY
    env["INTERLOCK_STRIPE_BASE"] = emulator.url
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", script.name]
    done = subprocess.run(
        argv if tests else [sys.executable, script.name],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=200,
        check=False,
    )
    assert done.returncode == 0, f"{heading}\n{done.stdout}\n{done.stderr}"

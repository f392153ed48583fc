"""Every python block of the README runs as written, and prints what the README shows.

A block runs as a script in a fresh folder, with this venv's `bin/` first on `PATH` (the
commands the README names, such as `interlock-demo`, are the installed ones) and the
environment a reader sets for a block that reads one (`STRIPE_SECRET_KEY`, a made-up test
key, and `INTERLOCK_STRIPE_BASE`, the loopback emulator, as the README says); a block that
defines `test_` functions runs under pytest instead, as a user would put it in their CI. A
block that is deliberately partial starts with the line `# fragment`. One block needs
servers a user starts by hand (Temporal's dev server and the emulator on fixed ports); the
test named for it runs it with both started on free ports; another is an MCP server, which
its test runs as a server and drives with the SDK's client.

A block the README follows with a paragraph `It prints ...:` and a ```text block must print
exactly that, line for line, where `...` in a shown line stands for text that differs
from run to run (an id, a time, a hash); every block run here that prints shows its output
so. A block with no shown output only has to exit 0.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

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


# Right after a python block: a paragraph "It prints ...:", then the output as text.
SHOWN = re.compile(r"\A\n\nIt prints(?:[^\n]|\n(?!\n))*:\n\n```text\n(.*?)^```$", flags=re.S | re.M)
PRINTS = re.compile(r"(?<![\w.])print\(")


class Block(NamedTuple):
    """A python block of the README: the heading above it, its code, and the output the
    README shows after it (None when it shows none)."""

    heading: str
    code: str
    shown: str | None


def _blocks() -> list[Block]:
    """Every python block, in order."""
    heading, found = "", []
    for part in re.split(r"(^```python\n.*?^```$)", README.read_text(), flags=re.S | re.M):
        if part.startswith("```python\n"):
            found.append(Block(heading, part.removeprefix("```python\n").removesuffix("```"), None))
        else:
            if found and (shown := SHOWN.match(part)):
                found[-1] = found[-1]._replace(shown=shown.group(1))
            headings = re.findall(r"^#{2,4} .+$", part, flags=re.M)
            heading = headings[-1] if headings else heading
    return found


def _runs_as_a_script(block: Block) -> bool:
    """Run here as a script, its stdout read: not a fragment, a pytest file or a server."""
    return not (
        block.code.startswith(FRAGMENT + "\n")
        or block.heading in RUN_ELSEWHERE
        or re.search(r"^def test_\w+\(", block.code, flags=re.M)
    )


def as_shown(shown: str, printed: str) -> list[str]:
    """The printed lines, each replaced by its shown line when they match, where `...` in
    a shown line matches any text of one or more characters: equal to the shown lines
    exactly when the block printed what the README shows."""
    lines = printed.splitlines()
    # Not strict: a missing or extra line leaves the lists of unequal length, which fails.
    for i, (want, got) in enumerate(zip(shown.splitlines(), lines, strict=False)):
        if re.fullmatch(".+?".join(re.escape(piece) for piece in want.split("...")), got):
            lines[i] = want
    return lines


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
        assert heading in {b.heading for b in BLOCKS}, heading
        assert f"def {name}(" in (ROOT / path).read_text(), (path, name)


def test_every_block_that_prints_shows_its_output() -> None:
    """A block run here that prints is followed by what it prints (so the run checks it),
    and no output is shown after a block whose stdout is not read here."""
    for block in BLOCKS:
        if _runs_as_a_script(block) and PRINTS.search(block.code):
            assert block.shown is not None, f"{block.heading}: prints, but shows no output"
        if not _runs_as_a_script(block):
            assert block.shown is None, f"{block.heading}: shows output nobody checks"
    assert BLOCKS[0].heading == "## Quickstart" and BLOCKS[0].shown


def test_the_comparison_takes_dots_for_varying_text_and_nothing_else() -> None:
    """`...` stands for a run of text within a line; other text, and the line count, must
    be as shown."""
    shown = "refund re_... on pi_...\ndone"
    assert as_shown(shown, "refund re_1Ab on pi_9\ndone\n") == shown.splitlines()
    assert as_shown(shown, "refund re_1Ab on pi_9\nsent\n") != shown.splitlines()
    assert as_shown(shown, "refund re_ on pi_9\ndone\n") != shown.splitlines()
    assert as_shown(shown, "refund re_1 on pi_9\ndone\nmore\n") != shown.splitlines()
    assert as_shown(shown, "refund re_1 on pi_9\n") != shown.splitlines()


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def test_the_first_screen_links_to_sections_that_exist() -> None:
    """The links of the README's top (each framework's guard, the demo) name headings."""
    text = README.read_text()
    slugs = {_slug(h) for h in re.findall(r"^#{1,4} (.+)$", text, flags=re.M)}
    links = re.findall(r"\]\(#([\w-]+)\)", "\n".join(text.splitlines()[:40]))
    assert len(links) >= 6
    assert [a for a in links if a not in slugs] == []


@pytest.mark.e2e
@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    ("heading", "code", "shown"),
    BLOCKS,
    ids=[f"{i}:{b.heading.lstrip('# ')}" for i, b in enumerate(BLOCKS)],
)
def test_a_readme_block_runs_as_written(
    heading: str, code: str, shown: str | None, emulator: StripeEmulator, tmp_path: Path
) -> None:
    """The block exits 0 and prints the output the README shows after it, if any (its own
    asserts are checks too), or is a fragment."""
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
    if shown is not None:
        assert as_shown(shown, done.stdout) == shown.splitlines(), done.stderr

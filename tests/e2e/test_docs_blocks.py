"""Every python block of the README and of the docs site runs as written, and prints what
its page shows.

The pages are README.md, the library's own (`packaging/interlock/README.md`) and every
`docs/**/*.md`. A block runs as a script in a fresh
folder, with this venv's `bin/` first on `PATH` (the commands a page names, such as
`interlock-demo`, are the installed ones) and the environment a reader sets for a block
that reads one (`STRIPE_SECRET_KEY`, a made-up test key, and `INTERLOCK_STRIPE_BASE`, the
loopback emulator, as the pages say); a block that defines `test_` functions runs under
pytest instead, as a user would put it in their CI. A block that is deliberately partial
starts with the line `# fragment`. One block needs servers a user starts by hand
(Temporal's dev server and the emulator on fixed ports); the test named for it runs it
with both started on free ports; another is an MCP server, which its test runs as a server
and drives with the SDK's client.

A block its page follows with a paragraph `It prints ...:` and a ```text block must print
exactly that, line for line, where `...` in a shown line stands for text that differs
from run to run (an id, a time, a hash); every block run here that prints shows its output
so. A block with no shown output only has to exit 0.

The blocks are independent (each its own folder, `INTERLOCK_HOME` and payments; the
emulator serves them all), so they run two at a time, started when the first test asks;
each test then waits for its own block.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

import pytest

from interlock.testing import StripeEmulator
from tests.conftest import TEST_KEY

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
# The library's own page (its wheel's description) shows the quickstart too.
PAGES = [README, ROOT / "packaging/interlock/README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FRAGMENT = "# fragment"
# (page, heading) of a block another test runs, with the servers it needs: that test.
RUN_ELSEWHERE = {
    ("docs/guides/temporal.md", "# Temporal: a guarded activity"): (
        "tests/e2e/test_temporal_helper.py",
        "test_the_guide_example_runs_offline_and_refunds_once",
    ),
    ("docs/guides/mcp.md", "## On your own MCP server"): (
        "tests/e2e/test_mcp_library.py",
        "test_a_server_killed_mid_refund_is_followed_by_one_that_finds_its_refund",
    ),
}
# Two at a time: this machine's two CPUs, most of a block's time being its imports.
PARALLEL = 2
BLOCK_TIMEOUT_S = 200


# Right after a python block: a paragraph "It prints ...:", then the output as text.
SHOWN = re.compile(r"\A\n\nIt prints(?:[^\n]|\n(?!\n))*:\n\n```text\n(.*?)^```$", flags=re.S | re.M)
PRINTS = re.compile(r"(?<![\w.])print\(")
OTHER_FENCE = re.compile(r"^```.*?^```$", flags=re.S | re.M)


class Block(NamedTuple):
    """A python block of a page: the page (relative to the checkout), the heading above
    it, its code, and the output the page shows after it (None when it shows none)."""

    page: str
    heading: str
    code: str
    shown: str | None


def blocks_of(page: Path, root: Path = ROOT) -> list[Block]:
    """Every python block of one page, in order; the page named relative to `root`."""
    name = page.relative_to(root).as_posix()
    heading, found = "", []
    for part in re.split(r"(^```python\n.*?^```$)", page.read_text(), flags=re.S | re.M):
        if part.startswith("```python\n"):
            code = part.removeprefix("```python\n").removesuffix("```")
            found.append(Block(name, heading, code, None))
        else:
            if found and (shown := SHOWN.match(part)):
                found[-1] = found[-1]._replace(shown=shown.group(1))
            headings = re.findall(r"^#{1,4} .+$", OTHER_FENCE.sub("", part), flags=re.M)
            heading = headings[-1] if headings else heading
    return found


def _runs_as_a_script(block: Block) -> bool:
    """Run here as a script, its stdout read: not a fragment, a pytest file or a server."""
    return not (
        block.code.startswith(FRAGMENT + "\n")
        or (block.page, block.heading) in RUN_ELSEWHERE
        or re.search(r"^def test_\w+\(", block.code, flags=re.M)
    )


def _runs_here(block: Block) -> bool:
    """Run by this module: neither a fragment nor a block another test runs."""
    return not (
        block.code.startswith(FRAGMENT + "\n") or (block.page, block.heading) in RUN_ELSEWHERE
    )


def as_shown(shown: str, printed: str) -> list[str]:
    """The printed lines, each replaced by its shown line when they match, where `...` in
    a shown line matches any text of one or more characters: equal to the shown lines
    exactly when the block printed what the page shows."""
    lines = printed.splitlines()
    # Not strict: a missing or extra line leaves the lists of unequal length, which fails.
    for i, (want, got) in enumerate(zip(shown.splitlines(), lines, strict=False)):
        if re.fullmatch(".+?".join(re.escape(piece) for piece in want.split("...")), got):
            lines[i] = want
    return lines


BLOCKS = [block for page in PAGES for block in blocks_of(page)]


def _run(block: Block, folder: Path, emulator_url: str) -> subprocess.CompletedProcess[str]:
    """The block, run in its own folder as a reader runs it: under pytest when it holds
    tests, else as a script."""
    tests = re.search(r"^def test_\w+\(", block.code, flags=re.M) is not None
    folder.mkdir(parents=True)
    script = folder / ("test_docs_block.py" if tests else "docs_block.py")
    script.write_text(block.code)
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["INTERLOCK_HOME"] = str(folder / ".interlock")
    env["STRIPE_SECRET_KEY"] = TEST_KEY
    env["INTERLOCK_STRIPE_BASE"] = emulator_url
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", script.name]
    return subprocess.run(
        argv if tests else [sys.executable, script.name],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=BLOCK_TIMEOUT_S,
        check=False,
    )


@pytest.fixture(scope="module")
def emulator() -> Iterator[StripeEmulator]:
    with StripeEmulator() as running:
        yield running


@pytest.fixture(scope="module")
def runs(
    request: pytest.FixtureRequest,
    emulator: StripeEmulator,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[Block, Future[subprocess.CompletedProcess[str]]]]:
    """Every block run here that this session selected (`-k` picks some), started in page
    order, PARALLEL at a time."""
    selected = {
        item.callspec.params["block"]
        for item in request.session.items
        if item.module is sys.modules[__name__] and hasattr(item, "callspec")
    }
    base = tmp_path_factory.mktemp("docs-blocks")
    with ThreadPoolExecutor(max_workers=PARALLEL, thread_name_prefix="docs-block") as pool:
        yield {
            block: pool.submit(_run, block, base / f"block{i}", emulator.url)
            for i, block in enumerate(BLOCKS)
            if _runs_here(block) and block in selected
        }


def test_the_pages_have_python_blocks_and_each_is_run_somewhere() -> None:
    """The parametrized test below covers every block: none is silently dropped, and each
    block run elsewhere names a test that exists."""
    assert len(BLOCKS) >= 4
    assert {b.page for b in BLOCKS} >= {"README.md", "docs/guides/crash-recovery.md"}
    for where, (path, name) in RUN_ELSEWHERE.items():
        assert where in {(b.page, b.heading) for b in BLOCKS}, where
        assert f"def {name}(" in (ROOT / path).read_text(), (path, name)


def test_every_block_that_prints_shows_its_output() -> None:
    """A block run here that prints is followed by what it prints (so the run checks it),
    and no output is shown after a block whose stdout is not read here."""
    for block in BLOCKS:
        where = f"{block.page} {block.heading}"
        if _runs_as_a_script(block) and PRINTS.search(block.code):
            assert block.shown is not None, f"{where}: prints, but shows no output"
        if not _runs_as_a_script(block):
            assert block.shown is None, f"{where}: shows output nobody checks"
    for page in ("README.md", "packaging/interlock/README.md"):
        first = next(b for b in BLOCKS if b.page == page)
        assert first.heading == "## Quickstart" and first.shown, page


def test_the_comparison_takes_dots_for_varying_text_and_nothing_else() -> None:
    """`...` stands for a run of text within a line; other text, and the line count, must
    be as shown."""
    shown = "refund re_... on pi_...\ndone"
    assert as_shown(shown, "refund re_1Ab on pi_9\ndone\n") == shown.splitlines()
    assert as_shown(shown, "refund re_1Ab on pi_9\nsent\n") != shown.splitlines()
    assert as_shown(shown, "refund re_ on pi_9\ndone\n") != shown.splitlines()
    assert as_shown(shown, "refund re_1 on pi_9\ndone\nmore\n") != shown.splitlines()
    assert as_shown(shown, "refund re_1 on pi_9\n") != shown.splitlines()


def test_a_heading_inside_another_fence_is_not_taken_for_the_page_heading(tmp_path: Path) -> None:
    """A `# comment` in a shell or text block does not rename the python block after it."""
    page = tmp_path / "page.md"
    page.write_text("# Page\n\n```bash\n# a comment\n```\n\n```python\nx = 1\n```\n")
    assert blocks_of(page, tmp_path) == [Block("page.md", "# Page", "x = 1\n", None)]


def test_the_readme_links_to_pages_that_exist() -> None:
    """The README's links (each framework's guard, the demo, the docs) name files of the
    checkout, so they work on the repository's page and in a clone."""
    links = re.findall(r"\]\(([^)#]+)(?:#[\w-]*)?\)", README.read_text())
    assert len(links) >= 10
    assert [link for link in links if not (ROOT / link).is_file()] == []


@pytest.mark.e2e
@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    "block",
    BLOCKS,
    ids=[f"{b.page}:{i}:{b.heading.lstrip('# ')}" for i, b in enumerate(BLOCKS)],
)
def test_a_block_runs_as_written(
    block: Block, runs: dict[Block, Future[subprocess.CompletedProcess[str]]]
) -> None:
    """The block exits 0 and prints the output its page shows after it, if any (its own
    asserts are checks too), or is a fragment."""
    if block.code.startswith(FRAGMENT + "\n"):
        pytest.skip("a fragment: the page marks it as deliberately partial")
    if (block.page, block.heading) in RUN_ELSEWHERE:
        where = "::".join(RUN_ELSEWHERE[(block.page, block.heading)])
        pytest.skip(f"run by {where}, with its servers started")
    done = runs[block].result(timeout=BLOCK_TIMEOUT_S + 30)
    assert done.returncode == 0, f"{block.page} {block.heading}\n{done.stdout}\n{done.stderr}"
    if block.shown is not None:
        assert as_shown(block.shown, done.stdout) == block.shown.splitlines(), done.stderr

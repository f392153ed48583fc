"""The framework guides, read as a user follows them.

Each guide installs the library alone, through its extra (`pip install
'./packaging/interlock[extra]'`), never the whole demo, and that extra brings every
distribution the guide's code imports. Each shows, in its code, what a restarted worker
does first (`gate.recover()`, the MCP desk's `desk.recover()`) and how the framework
resumes a conversation the dead worker left. The restarts themselves run in
`tests/e2e/test_adapter_*.py` and `tests/e2e/test_temporal_helper.py`.
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata as md
import re
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

# Python 3.11's; the library's pyproject is read as pip reads it.
tomllib = pytest.importorskip("tomllib")

ROOT = Path(__file__).resolve().parents[2]
GUIDES = ROOT / "docs" / "guides"
LIBRARY = ROOT / "packaging" / "interlock" / "pyproject.toml"
# Each framework guide and the extra it installs.
EXTRAS = {
    "langchain.md": "langchain",
    "pydantic-ai.md": "pydantic-ai",
    "openai-agents.md": "openai-agents",
    "temporal.md": "temporal",
    "mcp.md": "mcp",
}
INSTALL = re.compile(r"pip install '\./packaging/interlock\[([\w-]+)\]'")
DEMO_INSTALL = re.compile(r"pip install (?:-e )?'?\.(?:\[[\w,-]+\])?'?(?:\s|`)")


def python_blocks(page: Path) -> list[str]:
    """The code of every python block of a page."""
    return re.findall(r"^```python\n(.*?)^```$", page.read_text(), flags=re.S | re.M)


def imported_modules(code: str) -> set[str]:
    """Every module a block imports, as written (`langgraph.checkpoint.sqlite`)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


@functools.cache
def _packages() -> Mapping[str, list[str]]:
    return md.packages_distributions()


@functools.cache
def _files_by_distribution(top: str) -> dict[str, frozenset[str]]:
    return {
        name: frozenset(str(f) for f in md.distribution(name).files or [])
        for name in _packages().get(top, [])
    }


@functools.cache
def _requires(name: str) -> tuple[str, ...]:
    return tuple(md.requires(name) or [])


def distribution_of(module: str) -> str | None:
    """The installed distribution whose files hold `module` (read from the installed
    files' lists, nothing imported); None for the standard library and for interlock."""
    top = module.split(".")[0]
    if top in sys.stdlib_module_names or top == "interlock":
        return None
    path = module.replace(".", "/")
    held = {f"{path}.py", f"{path}/__init__.py"}
    for name, files in _files_by_distribution(top).items():
        if files & held:
            return str(canonicalize_name(name))
    for name, files in _files_by_distribution(top).items():  # a namespace package
        if any(f.startswith(f"{path}/") for f in files):
            return str(canonicalize_name(name))
    raise AssertionError(f"{module} is not installed")


def brought_by(requirements: list[str]) -> set[str]:
    """Every distribution these requirements install, their own dependencies followed
    (as installed here; a dependency behind an extra of theirs is not followed)."""
    seen: set[str] = set()
    todo = [Requirement(r) for r in requirements]
    while todo:
        req = todo.pop()
        name = str(canonicalize_name(req.name))
        if name in seen:
            continue
        seen.add(name)
        for dep in _requires(name):
            sub = Requirement(dep)
            if sub.marker is None or sub.marker.evaluate({"extra": ""}):
                todo.append(sub)
    return seen


def library_extra(extra: str) -> list[str]:
    """The library's core dependencies and those of one of its extras."""
    project = tomllib.loads(LIBRARY.read_text())["project"]
    return [*project["dependencies"], *project["optional-dependencies"][extra]]


@pytest.mark.parametrize("guide", sorted(EXTRAS))
def test_a_guide_installs_the_library_alone_through_its_extra(guide: str) -> None:
    """The install line is the packaging path with the guide's extra; the demo (`pip
    install '.[...]'` at the checkout's root) is not how a guard is installed."""
    text = (GUIDES / guide).read_text()
    assert INSTALL.findall(text)[:1] == [EXTRAS[guide]], f"{guide}: no library install line"
    assert DEMO_INSTALL.search(text.split("\n## ", 1)[0]) is None, f"{guide} installs the demo"


@pytest.mark.parametrize("guide", sorted(EXTRAS))
def test_the_extra_brings_everything_the_guide_imports(guide: str) -> None:
    """Each distribution the guide's python imports comes with the library and its extra
    (LangGraph's SQLite checkpointer, which the LangChain guide resumes from, included)."""
    imports = {m for code in python_blocks(GUIDES / guide) for m in imported_modules(code)}
    needed = {d for m in sorted(imports) if (d := distribution_of(m)) is not None}
    assert needed, f"{guide} imports no framework"
    missing = needed - brought_by(library_extra(EXTRAS[guide]))
    assert missing == set(), f"{guide} imports {missing}, which its extra does not bring"


def test_an_import_outside_the_extra_is_caught() -> None:
    """The check above fails on a distribution the extra lacks."""
    assert distribution_of("langgraph.checkpoint.sqlite") == "langgraph-checkpoint-sqlite"
    assert "langgraph-checkpoint-sqlite" not in brought_by(["langgraph>=1.2"])
    assert "langchain-core" in brought_by(["langchain>=1.5"])
    assert DEMO_INSTALL.search("install it: `pip install '.[langchain]'` first")


# Each guide, the call that finishes what a dead worker left, and the framework's resume
# that must come after it in the same block.
RESTARTS = {
    "langchain.md": ("gate.recover()", "invoke(None, thread"),
    "pydantic-ai.md": ("gate.recover()", "deferred_tool_results="),
    "openai-agents.md": ("gate.recover()", "RunState.from_json("),
    "temporal.md": ("gate.recover()", "Worker("),
    "mcp.md": ("desk.recover()", "server.run("),
}
MODULES = {
    "langchain.md": "langchain.py",
    "pydantic-ai.md": "pydantic_ai.py",
    "openai-agents.md": "openai_agents.py",
    "temporal.md": "temporal.py",
    "mcp.md": "mcp.py",
}


def restart_block(guide: str, page: Path | None = None) -> str | None:
    """The guide's (or `page`'s) first python block that calls the guide's recover
    before its resume."""
    recover, resume = RESTARTS[guide]
    for code in python_blocks(page or GUIDES / guide):
        if recover in code and resume in code and code.index(recover) < code.index(resume):
            return code
    return None


@pytest.mark.parametrize("guide", sorted(RESTARTS))
def test_a_guide_shows_a_restarted_worker_recovering_before_it_resumes(guide: str) -> None:
    """A restarted worker calls recover() first, then resumes the framework's way: the
    guide's code shows both in that order, and its prose and its module say so."""
    recover, _ = RESTARTS[guide]
    assert restart_block(guide) is not None, f"{guide} shows no {recover} before the resume"
    module = (ROOT / "interlock" / MODULES[guide]).read_text()
    docstring = ast.get_docstring(ast.parse(module)) or ""
    assert recover in docstring, f"interlock/{MODULES[guide]} does not say to call {recover}"


def test_the_langgraph_section_shows_both_resume_calls() -> None:
    """A thread a dead worker left is resumed by `invoke(None, thread)` or by sending the
    same `Command(resume=...)` again; the guide's restart block shows both."""
    code = restart_block("langchain.md")
    assert code is not None
    assert "agent.invoke(None, thread" in code
    assert re.search(r"agent\.invoke\(Command\(resume=", code)
    assert "SqliteSaver(" in code  # a checkpointer that outlives the process


def test_a_block_without_recover_before_the_resume_is_not_a_restart(tmp_path: Path) -> None:
    """The check above fails a guide that resumes first, or never recovers."""
    page = tmp_path / "page.md"
    page.write_text("```python\nagent.invoke(None, thread)\ngate.recover()\n```\n")
    assert restart_block("langchain.md", page) is None
    page.write_text("```python\nagent.invoke(None, thread)\n```\n")
    assert restart_block("langchain.md", page) is None
    page.write_text("```python\ngate.recover()\nagent.invoke(None, thread)\n```\n")
    assert restart_block("langchain.md", page) is not None


# -- the Stripe model's faults and hooks, in a public page and the public module ------------


def test_the_models_faults_and_hooks_have_a_public_page_with_an_example() -> None:
    """`docs/guides/testing.md`, in the site's navigation, names every fault kind and
    stage and the hooks, and runs an example (tests/e2e/test_docs_blocks.py runs it)."""
    from interlock.testing import FAULT_KINDS, FAULT_STAGES

    page = GUIDES / "testing.md"
    assert "guides/testing.md" in (ROOT / "mkdocs.yml").read_text()
    text = page.read_text()
    named = set(re.findall(r"`(\w+)`", text))
    stages = {stage for kind in FAULT_STAGES.values() for stage in kind}
    assert set(FAULT_KINDS) | stages <= named, (set(FAULT_KINDS) | stages) - named
    for name in ("PaymentsModel", "add_fault(", "on_start", "on_commit", "`started`", "`ended`"):
        assert name in text, name
    [example] = python_blocks(page)
    assert "from interlock.testing import" in example
    assert "add_fault(" in example and "on_commit=" in example and "stage=" in example


def test_the_models_hooks_are_documented_in_the_public_module() -> None:
    """What a test arms is in the docstrings of `interlock.testing`'s own names, not
    only in a private module's: every kind and stage in `add_fault`'s, the events and
    hooks in `Fault`'s, the hooks and stages named in the package's."""
    import interlock.testing as testing

    add_fault = testing.PaymentsModel.add_fault.__doc__ or ""
    stages = {stage for kind in testing.FAULT_STAGES.values() for stage in kind}
    assert all(f"`{name}`" in add_fault for name in {*testing.FAULT_KINDS, *stages})
    assert "on_commit" in add_fault and "on_start" in add_fault
    fault = testing.Fault.__doc__ or ""
    assert all(f"`{name}`" in fault for name in ("started", "committed", "ended", "on_commit"))
    package = testing.__doc__ or ""
    assert all(name in package for name in ("add_fault", "FAULT_STAGES", "on_commit"))
    assert {"FAULT_KINDS", "FAULT_STAGES"} <= set(testing.__all__)


def test_the_agents_sdk_guide_answers_a_guard_exception_in_the_guards_words() -> None:
    """The SDK's default answer to an exception in a tool says "Please try again"; the
    guide names `failure_error_function` and its guarded tool sets `failure_words`."""
    text = (GUIDES / "openai-agents.md").read_text()
    prose = re.sub(r"^```.*?^```$", "", text, flags=re.S | re.M)
    assert "failure_error_function" in prose and "Please try again" in prose
    [example, *_] = python_blocks(GUIDES / "openai-agents.md")
    assert "@function_tool(needs_approval=True, failure_error_function=failure_words)" in example

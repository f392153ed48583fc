"""`interlock-demo mcp` where the official MCP SDK is not installed, in a subprocess that
hides it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def test_without_the_sdk_every_mcp_command_names_the_demos_extra(tmp_path: Path) -> None:
    """No `mcp` SDK installed: `interlock-demo mcp approve` exits 2 with the one install
    line to run, and creates no store."""
    code = (
        "import sys; sys.modules['mcp'] = None\n"
        "from interlock_demo.cli import main\n"
        "sys.exit(main(['mcp', 'approve', 'pi_MadeUp1', '--cap', '2000']))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
        env={**os.environ, "INTERLOCK_HOME": str(tmp_path / "home")},
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == (
        "interlock-demo mcp needs the official MCP SDK: pip install 'interlock-demo[mcp]'"
    )
    assert not (tmp_path / "home").exists()

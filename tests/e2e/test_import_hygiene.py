"""What an import loads, each probed in a fresh interpreter (this one has loaded everything).

`import interlock` loads the stripe SDK on first use of a Stripe name, and psutil only
where a dead owner is checked off Linux (a restarted worker's first call needs neither
early); none of the framework guards; the headless modules load none of textual, rich or
anthropic.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("textual", "rich", "anthropic")


def _loaded_after(code: str) -> list[str]:
    probe = (
        f"import json, sys; {code}; "
        "print(json.dumps(sorted(m for m in ('stripe', 'psutil') if m in sys.modules)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert done.returncode == 0, done.stderr
    loaded: list[str] = json.loads(done.stdout)
    return loaded


def test_import_interlock_loads_neither_stripe_nor_psutil() -> None:
    """The bare import and a worker's identity load neither."""
    assert _loaded_after("import interlock; interlock.Owner.current()") == []


def test_import_interlock_leaves_verify_the_anchors_and_tls_until_used() -> None:
    """A worker pays no import it does not need: `verify` (and the anchors and TLS it
    brings) loads on first use of its name."""
    probe = (
        "import json, sys, interlock; before = [m for m in WATCH if m in sys.modules]; "
        "interlock.verify; print(json.dumps([before, [m for m in WATCH if m in sys.modules]]))"
    )
    watch = ["interlock._core.verify", "interlock._core.anchors", "ssl", "urllib.request"]
    done = subprocess.run(
        [sys.executable, "-c", f"WATCH = {watch!r}; {probe}"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    before, after = json.loads(done.stdout)
    assert before == []
    assert after == watch


def test_a_stripe_name_loads_the_sdk_on_first_use() -> None:
    """Any of the lazy names brings the SDK; on Linux a dead-owner check reads /proc, no psutil."""
    assert _loaded_after("from interlock import make_stripe_client") == ["stripe"]
    assert _loaded_after("import interlock; interlock.Owner.current().is_gone()") == []


@pytest.mark.parametrize(
    "module",
    [
        "interlock",
        "interlock.testing",
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
    # httpx (langchain-core needs it; stripe imports it when it is installed) loads its
    # optional CLI, and with it rich, whenever click is importable (uvicorn brings click):
    # httpx's import, not this tree's. Hiding click keeps the probe on what we import.
    code = (
        f"import json, sys; sys.modules['click'] = None; import {module}; "
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60
    )

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


def test_import_interlock_loads_no_framework() -> None:
    """The guards are extras: importing the library must not import them or their frameworks,
    nor OpenTelemetry (`interlock.otel` imports it, when a user asks for traces)."""
    code = (
        "import sys, interlock\n"
        "bad = [m for m in ('interlock.pydantic_ai', 'interlock.openai_agents', 'pydantic_ai',"
        " 'agents', 'interlock.otel', 'opentelemetry') if m in sys.modules]\n"
        "print(bad)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"


def test_importing_interlock_does_not_import_the_adapter_or_langchain() -> None:
    """The core stays free of the framework: `import interlock` loads neither."""
    probe = (
        "import sys, interlock; "
        "print(sorted(m for m in sys.modules if m.startswith(('langchain', 'langgraph', "
        "'interlock.langchain'))))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_worker_loads_the_stripe_sdk_without_the_http_libraries_it_never_uses() -> None:
    """A restarted worker's first call needs the SDK, not the requests, httpx or aiohttp it
    would pick a default client from: they are not loaded, the worker's own client still
    talks to Stripe's address, and the libraries stay importable for anything else."""
    probe = (
        "import json, sys\n"
        "import workers.standalone\n"
        "assert 'stripe' not in sys.modules, 'the worker module loaded the SDK early'\n"
        "from workers import stripe_sdk\n"
        "stripe_sdk.load()\n"
        "from interlock import StripePayments, make_stripe_client\n"
        "client = make_stripe_client('sk_test_MadeUp', timeout_s=1, base_url='http://127.0.0.1:9')\n"
        "StripePayments(client).close()\n"
        "loaded = sorted(m for m in stripe_sdk.HELD_BACK if m in sys.modules)\n"
        "import requests, httpx, aiohttp\n"
        "print(json.dumps(loaded))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=60
    )

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []

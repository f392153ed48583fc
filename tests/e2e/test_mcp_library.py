"""`interlock.mcp` on a user's own MCP server: the guide's server, driven by the SDK's client.

The block of `docs/guides/mcp.md` ("On your own MCP server") runs as written as a real stdio
server process, in a fresh folder, with the environment its comments name (`STRIPE_SECRET_KEY`, a
made-up test key; `INTERLOCK_STRIPE_BASE`, the loopback emulator this test runs, so it can
arm faults and refund by hand; the smallest useful timing, claim 6 s, Stripe deadline 1 s).
Approvals go into the server's store the way the guide's approvals block grants them.
Each test checks what ends up at the emulator, not only what the tool said.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest
from mcp import ClientSession, MCPError, StdioServerParameters, stdio_client
from mcp.types import CallToolResult

from interlock import ACTION_METADATA_KEY, REASON_WORLD_CHANGED, SQLiteStore, verify
from interlock.mcp import grant_approval, revoke_approval
from interlock.testing import InProcessPayments, StripeEmulator
from tests.conftest import TEST_KEY
from tests.e2e.test_mcp_server import data, refunds, text, until_settled, wait_event
from tests.helpers.approvals import APPROVER

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "guides" / "mcp.md"
HEADING = "## On your own MCP server"
STORE = "refunds.sqlite3"  # where the guide's server keeps its journal (its cwd)
AMOUNT = 2000
REQUEST_ID = "req-3b9e41d0-library"

pytestmark = pytest.mark.e2e


def guide_server() -> str:
    """The first python block under HEADING in the MCP guide."""
    section = GUIDE.read_text().split(HEADING, 1)[1]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found is not None, f"no python block under {HEADING!r}"
    return found.group(1)


@pytest.fixture
def payment(emulator: StripeEmulator, tmp_path: Path) -> str:
    """A $100 payment at the emulator, approved for $20 in the server's store."""
    pi = InProcessPayments(emulator.model).create_payment(10_000).id
    store = SQLiteStore(tmp_path / STORE)
    try:
        grant_approval(store, pi, AMOUNT, hours=1, by="ana", approver=APPROVER)
    finally:
        store.close()
    (tmp_path / "approvers.pem").write_bytes(APPROVER.public_pem())
    return pi


@pytest.fixture
def connect(emulator: StripeEmulator, payment: str, tmp_path: Path) -> Callable[[], Any]:
    """Opens an MCP session with a fresh process of the guide's server."""
    script = tmp_path / "refund_server.py"
    script.write_text(guide_server())

    @asynccontextmanager
    async def session() -> AsyncIterator[ClientSession]:
        params = StdioServerParameters(
            command=sys.executable,
            args=[str(script)],
            env={
                "STRIPE_SECRET_KEY": TEST_KEY,
                "INTERLOCK_STRIPE_BASE": emulator.url,
                "INTERLOCK_CLAIM_TTL": "6",
                "INTERLOCK_STRIPE_TIMEOUT": "1",
                # The server trusts the tests' approver: its public key only.
                "INTERLOCK_APPROVERS": str(tmp_path / "approvers.pem"),
                "PYTHONUNBUFFERED": "1",
            },
            cwd=str(tmp_path),
        )
        with (tmp_path / "server-stderr.log").open("a") as errlog:
            async with (
                stdio_client(params, errlog=errlog) as (read, write),
                ClientSession(read, write) as client,
            ):
                await client.initialize()
                yield client

    return session


async def refund(client: ClientSession, payment: str) -> CallToolResult:
    """Call issue_refund for $20 under REQUEST_ID."""
    args = {"payment_intent": payment, "amount": AMOUNT, "request_id": REQUEST_ID}
    return await client.call_tool("issue_refund", args)


def _server_process(script: Path) -> psutil.Process:
    """The guide server's process this test spawned."""
    for child in psutil.Process().children(recursive=True):
        if str(script) in child.cmdline():
            return child
    raise AssertionError(f"no process runs {script}")


async def test_a_server_killed_mid_refund_is_followed_by_one_that_finds_its_refund(
    connect: Callable[[], Any],
    emulator: StripeEmulator,
    payment: str,
    release_hold: threading.Event,
    tmp_path: Path,
) -> None:
    """SIGKILL after Stripe made the refund, before the tool answered; the host restarts
    the server and the model retries the same request_id: it gets the first call's refund,
    found at Stripe, and Stripe holds one refund; the receipts verify against Stripe."""
    fault = emulator.model.add_fault("hold", hold_ms=60_000, payment_intent=payment)
    async with connect() as client:
        tools = {t.name for t in (await client.list_tools()).tools}
        assert tools == {"get_payment", "issue_refund"}
        seen = data(await client.call_tool("get_payment", {"payment_intent": payment}))
        assert seen["approval"]["state"] == "live" and seen["approval"]["left"] == AMOUNT
        server = _server_process(tmp_path / "refund_server.py")
        lost: list[BaseException] = []

        async def first_call() -> None:
            try:
                await refund(client, payment)
            except (MCPError, anyio.ClosedResourceError, anyio.BrokenResourceError) as e:
                lost.append(e)

        async with anyio.create_task_group() as tg:
            tg.start_soon(first_call)
            assert await wait_event(fault.committed, 15), "the refund never reached Stripe"
            # The SDK's transport reaps its child; the call ends when the pipe closes.
            server.send_signal(signal.SIGKILL)
        assert lost, "the first call should have lost its answer with the server"
        server.wait(10)  # gone (the SDK's transport reaped it, so psutil sees no code)
        assert not server.is_running()
    release_hold.set()
    async with connect() as client:
        result = await until_settled(lambda: refund(client, payment))
    [at_stripe] = refunds(emulator, payment)
    assert data(result)["status"] == "adopted", text(result)
    assert data(result)["refund_id"] == at_stripe.id and at_stripe.amount == AMOUNT
    assert at_stripe.metadata[ACTION_METADATA_KEY] == data(result)["action_id"]
    assert data(result)["receipt"] is not None
    store = SQLiteStore(tmp_path / STORE)
    try:
        assert verify(store, InProcessPayments(emulator.model)).ok
    finally:
        store.close()


async def test_a_revocation_and_a_hand_refund_after_the_read_are_refused(
    connect: Callable[[], Any], emulator: StripeEmulator, payment: str, tmp_path: Path
) -> None:
    """A person revokes the approval (the guide's approvals block) after the model read:
    refused. Then a fresh approval, and support refunds by hand after the read: refused as
    a change. Only the hand refund is at Stripe."""
    async with connect() as client:
        await client.call_tool("get_payment", {"payment_intent": payment})
        store = SQLiteStore(tmp_path / STORE)
        try:
            revoke_approval(store, payment, by="ana")
            revoked = await refund(client, payment)
            grant_approval(store, payment, AMOUNT, hours=1, by="ana", approver=APPROVER)
        finally:
            store.close()
        await client.call_tool("get_payment", {"payment_intent": payment})
        hand = InProcessPayments(emulator.model).create_refund(payment, AMOUNT)
        changed = await client.call_tool(
            "issue_refund",
            {"payment_intent": payment, "amount": AMOUNT, "request_id": "req-after-hand-1"},
        )
    assert revoked.is_error and data(revoked)["status"] == "refused"
    assert "approval revoked by ana" in text(revoked)
    assert changed.is_error and data(changed)["reason"] == REASON_WORLD_CHANGED
    assert [r.id for r in refunds(emulator, payment)] == [hand.id]


def test_interlock_imports_without_mcp_and_the_module_names_the_extra() -> None:
    """The core never imports the MCP SDK; without it `interlock.mcp` says which extra."""
    code = (
        "import sys; sys.modules['mcp'] = None\n"
        "import interlock\n"
        "assert not [m for m in sys.modules if m.startswith('mcp.')]\n"
        "try:\n"
        "    import interlock.mcp\n"
        "except ImportError as e:\n"
        "    print(e)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "pip install './packaging/interlock[mcp]'" in done.stdout


def test_the_modules_names_are_documented_and_apart_from_the_core() -> None:
    """Each name of `interlock.mcp.__all__` (sorted as ruff's RUF022 has it) is documented,
    and none is also one of `interlock`'s."""
    import inspect

    import interlock
    import interlock.mcp as it

    for name in it.__all__:
        value = getattr(it, name)
        if callable(value):
            assert inspect.getdoc(value), name
    assert not set(it.__all__) & set(interlock.__all__)

"""`interlock-demo mcp` end to end: the MCP SDK's own stdio client against the real server.

Each test spawns `python -m interlock_demo.cli mcp --offline --stripe-base URL` as a real
process, pointed at a loopback emulator this test process runs (so the test can arm its
faults and make a refund by hand), with the smallest useful timing (claim 6 s, Stripe
deadline 1 s), and checks what ends up at the emulator, not only what the tool said.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest
from mcp import ClientSession, MCPError, StdioServerParameters, stdio_client
from mcp.types import CallToolResult

from interlock import ACTION_METADATA_KEY, FileAnchor, KeyList, Refund, SQLiteStore, verify
from interlock.mcp import WORLD_CHANGED_WORDS
from interlock.testing import InProcessPayments, StripeEmulator

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
AMOUNT = 2000
REQUEST_ID = "req-7f3a9c2e-retry"
SETTLE_S = 30.0


def _server_env() -> dict[str, str]:
    return {
        "INTERLOCK_HOME": os.environ["INTERLOCK_HOME"],
        "INTERLOCK_CLAIM_TTL": "6",
        "INTERLOCK_STRIPE_TIMEOUT": "1",
        "PYTHONUNBUFFERED": "1",
    }


@pytest.fixture
def payment(emulator: StripeEmulator) -> str:
    """A $100 payment at the emulator."""
    return InProcessPayments(emulator.model).create_payment(10_000).id


@pytest.fixture
def connect(emulator: StripeEmulator, payment: str, tmp_path: Path) -> Callable[[], Any]:
    """Opens an MCP session with a fresh server process approved for $20 on `payment`."""

    @asynccontextmanager
    async def session(**env: str) -> AsyncIterator[ClientSession]:
        params = StdioServerParameters(
            command=sys.executable,
            args=[
                "-m",
                "interlock_demo.cli",
                "mcp",
                "--offline",
                "--stripe-base",
                emulator.url,
                "--approve",
                payment,
                "--cap",
                str(AMOUNT),
            ],
            env={**_server_env(), **env},
            cwd=str(REPO),
        )
        with (tmp_path / "server-stderr.log").open("a") as errlog:
            async with (
                stdio_client(params, errlog=errlog) as (read, write),
                ClientSession(read, write) as client,
            ):
                await client.initialize()
                yield client

    return session


def refunds(emulator: StripeEmulator, payment: str) -> list[Refund]:
    """The payment's refunds as the emulator holds them (Stripe's truth, not the tool's)."""
    return InProcessPayments(emulator.model).list_refunds(payment)


async def refund(client: ClientSession, payment: str, **extra: Any) -> CallToolResult:
    """Call issue_refund for $20 under REQUEST_ID."""
    args = {"payment_intent": payment, "amount": AMOUNT, "request_id": REQUEST_ID, **extra}
    return await client.call_tool("issue_refund", args)


def data(result: CallToolResult) -> dict[str, Any]:
    """The structured answer of a tool call."""
    assert isinstance(result.structured_content, dict), result
    return result.structured_content


def text(result: CallToolResult) -> str:
    """The words of a tool call's answer."""
    return " ".join(getattr(block, "text", "") for block in result.content)


async def until_settled(call: Callable[[], Awaitable[CallToolResult]]) -> CallToolResult:
    """Repeat a call while it answers `pending`, up to SETTLE_S."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        result = await call()
        if data(result)["status"] != "pending" or time.monotonic() > deadline:
            return result
        await anyio.sleep(0.5)  # a poll interval: each answer is read, not assumed


async def wait_event(event: threading.Event, seconds: float) -> bool:
    """Wait for a threading event without blocking the event loop."""
    return await anyio.to_thread.run_sync(event.wait, seconds)


async def test_tools_show_the_payment_and_the_retry_rule(
    connect: Callable[[], Any], payment: str
) -> None:
    """The tools are listed with the request_id rule, and get_payment shows the approval."""
    async with connect() as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) == {"get_payment", "issue_refund"}
        schema = tools["issue_refund"].input_schema
        assert set(schema["required"]) == {"payment_intent", "amount", "request_id"}
        assert "SAME request_id" in (tools["issue_refund"].description or "")
        seen = data(await client.call_tool("get_payment", {"payment_intent": payment}))
    assert seen["id"] == payment and seen["amount"] == 10_000 and seen["refunds"] == []
    assert seen["refunds_fingerprint"].startswith("sha256:")
    assert seen["approval"]["state"] == "live" and seen["approval"]["left"] == AMOUNT


async def test_a_retried_call_after_a_lost_answer_refunds_once(
    connect: Callable[[], Any], emulator: StripeEmulator, payment: str
) -> None:
    """Stripe's answer to the create is lost (dropped connection) and the client retries.

    The server finds its own refund at Stripe instead of sending another; the client's
    retry of the same request_id gets the same refund back. One refund at Stripe.
    """
    # Twice: the answer and the transport's one resend of it are both lost.
    fault = emulator.model.add_fault("drop", count=2, payment_intent=payment)
    async with connect() as client:
        await client.call_tool("get_payment", {"payment_intent": payment})
        first = await refund(client, payment)
        again = await refund(client, payment)
    assert fault.fired == 2 and fault.committed.is_set()
    at_stripe = refunds(emulator, payment)
    assert len(at_stripe) == 1 and at_stripe[0].amount == AMOUNT
    assert not first.is_error, text(first)
    assert data(first)["status"] in ("adopted", "sent") and data(first)["refunded"] is True
    assert data(first)["refund_id"] == at_stripe[0].id
    assert data(first)["receipt"] is not None
    assert data(again)["retry"] is True and data(again)["refund_id"] == at_stripe[0].id
    assert "nothing was sent again" in text(again)
    assert at_stripe[0].metadata[ACTION_METADATA_KEY] == data(first)["action_id"]


async def test_the_servers_receipts_are_signed_with_the_demos_key_and_anchored(
    connect: Callable[[], Any], emulator: StripeEmulator, payment: str
) -> None:
    """A presenter's old receipt secret in the server's environment stops nothing: the
    receipt is signed with the demo's key, put in the log at the next call, anchored in
    the server's own anchor, and verify with only the public key list and that anchor
    holds."""
    async with connect(INTERLOCK_RECEIPT_KEY="a-presenters-old-secret") as client:
        await client.call_tool("get_payment", {"payment_intent": payment})
        first = await refund(client, payment)
        assert data(first)["status"] == "sent", text(first)
        await client.call_tool("get_payment", {"payment_intent": payment})
    home = Path(os.environ["INTERLOCK_HOME"])
    store = SQLiteStore.open_read_only(home / "mcp" / "interlock.sqlite3")
    try:
        result = verify(
            store,
            keys=KeyList.load(home / "demo" / "receipt-keys.json"),
            anchors=[FileAnchor(home / "mcp" / "anchor" / "heads.jsonl")],
        )
    finally:
        store.close()
    assert result.ok, result.problems
    assert (result.formats, result.log_size, result.anchored) == ({"ed25519": 1}, 1, 1)


async def test_a_retry_through_a_restarted_server_refunds_once(
    connect: Callable[[], Any],
    emulator: StripeEmulator,
    payment: str,
    release_hold: threading.Event,
) -> None:
    """The server is SIGKILLed after Stripe made the refund, before the tool answered.

    The host starts a new server; the model retries with the same request_id and gets the
    refund the first call made (found at Stripe), never a second one.
    """
    fault = emulator.model.add_fault("hold", hold_ms=60_000, payment_intent=payment)
    async with connect() as client:
        await client.call_tool("get_payment", {"payment_intent": payment})
        server = _server_process()
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
    release_hold.set()
    async with connect() as client:
        result = await until_settled(lambda: refund(client, payment))
    at_stripe = refunds(emulator, payment)
    assert len(at_stripe) == 1, at_stripe
    assert data(result)["status"] == "adopted", text(result)
    assert data(result)["refund_id"] == at_stripe[0].id


async def test_a_hand_refund_after_the_read_is_refused_with_the_reason(
    connect: Callable[[], Any], emulator: StripeEmulator, payment: str
) -> None:
    """Support refunds by hand between get_payment and issue_refund: the tool refuses.

    The words tell the model what to do (read again, ask a person); only the hand refund
    is at Stripe.
    """
    async with connect() as client:
        await client.call_tool("get_payment", {"payment_intent": payment})
        hand = InProcessPayments(emulator.model).create_refund(payment, AMOUNT)
        result = await refund(client, payment)
    assert result.is_error
    assert data(result)["status"] == "refused" and data(result)["refunded"] is False
    assert WORLD_CHANGED_WORDS in text(result)
    assert data(result)["receipt"] is not None
    assert [r.id for r in refunds(emulator, payment)] == [hand.id]


async def test_a_revoked_approval_is_refused(
    connect: Callable[[], Any], emulator: StripeEmulator, payment: str
) -> None:
    """A person revokes the approval with `interlock-demo mcp revoke` after the model read.

    The tool refuses, naming the revocation; nothing is refunded.
    """
    async with connect() as client:
        await client.call_tool("get_payment", {"payment_intent": payment})
        revoke = _revoke(payment)
        assert revoke.returncode == 0, revoke.stderr
        result = await refund(client, payment)
    assert result.is_error
    assert data(result)["status"] == "refused"
    assert "approval revoked by ana" in text(result)
    assert refunds(emulator, payment) == []


async def test_a_restart_with_the_flag_does_not_undo_a_revocation(
    connect: Callable[[], Any], emulator: StripeEmulator, payment: str
) -> None:
    """The host restarts the server with the same `--approve` after a person revoked it.

    The flag grants only a first approval, so the revocation stands and the refund is
    refused.
    """
    async with connect() as client:
        before = data(await client.call_tool("get_payment", {"payment_intent": payment}))
    assert before["approval"]["state"] == "live"
    assert _revoke(payment).returncode == 0
    async with connect() as client:
        seen = data(await client.call_tool("get_payment", {"payment_intent": payment}))
        result = await refund(client, payment)
    assert seen["approval"]["state"] == "revoked"
    assert data(result)["status"] == "refused" and "approval revoked" in text(result)
    assert refunds(emulator, payment) == []


async def test_an_ambiguous_answer_is_unknown_being_recovered_never_failed(
    connect: Callable[[], Any],
    emulator: StripeEmulator,
    payment: str,
    release_hold: threading.Event,
) -> None:
    """Stripe does not answer within the deadline (the request is still running there).

    The tool says "unknown, being recovered", not an error; once the refund lands, the
    same request_id reports it (found at Stripe). One refund.
    """
    fault = emulator.model.add_fault("hold", hold_ms=60_000, commit=False, payment_intent=payment)
    async with connect() as client:
        await client.call_tool("get_payment", {"payment_intent": payment})
        first = await refund(client, payment)
        assert not first.is_error, text(first)
        assert data(first)["status"] == "pending" and data(first)["refunded"] is None
        assert text(first).startswith("Unknown, being recovered")
        assert refunds(emulator, payment) == []
        release_hold.set()
        assert await wait_event(fault.committed, 15)
        settled = await until_settled(lambda: refund(client, payment))
    at_stripe = refunds(emulator, payment)
    assert len(at_stripe) == 1
    assert data(settled)["status"] == "adopted", text(settled)
    assert data(settled)["refund_id"] == at_stripe[0].id


def _server_process() -> psutil.Process:
    """The `interlock-demo mcp` process this test spawned."""
    for child in psutil.Process().children(recursive=True):
        if "interlock_demo.cli" in child.cmdline() and "mcp" in child.cmdline():
            return child
    raise AssertionError("no interlock-demo mcp process found")


def _revoke(payment: str) -> subprocess.CompletedProcess[str]:
    """`interlock-demo mcp revoke PAYMENT --by ana`, as a person runs it."""
    return subprocess.run(
        [sys.executable, "-m", "interlock_demo.cli", "mcp", "revoke", payment, "--by", "ana"],
        env={**os.environ, **_server_env()},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "words"),
    [
        ({"amount": "500"}, 'a JSON number, not a string); got "500"'),
        ({"amount": 10**15}, "from 1 to 99,999,999"),
        ({"amount": 9_999_999_999}, "from 1 to 99,999,999"),
        ({"amount": 12.5}, "integer number of cents"),
        ({"payment_intent": 42}, "a string such as pi_"),
        ({"reason": "why\r\n\x1b[2J" + "x" * 1_000_000}, "at most 500 characters"),
        ({"amount": None}, "amount must be an integer number of cents"),  # left out
        ({"request_id": None}, "request_id null is not valid"),  # left out
    ],
)
async def test_bad_arguments_get_an_answer_the_agent_can_act_on(
    connect: Callable[[], Any],
    emulator: StripeEmulator,
    payment: str,
    args: dict[str, Any],
    words: str,
) -> None:
    """A string amount (not coerced), an amount past Stripe's largest, a number id, a 1 MB
    reason with CR/LF and ESC, a required argument left out (None here): each is refused
    with what to send instead, with no traceback and no documentation link, and nothing is
    refunded; the schema still says the types and what is required."""
    async with connect() as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        props = tools["issue_refund"].input_schema["properties"]
        assert props["amount"]["type"] == "integer" and props["amount"]["maximum"] == 99_999_999
        assert props["payment_intent"]["type"] == "string"
        assert set(tools["issue_refund"].input_schema["required"]) == {
            "payment_intent",
            "amount",
            "request_id",
        }
        await client.call_tool("get_payment", {"payment_intent": payment})
        sent = {"payment_intent": payment, "amount": AMOUNT, "request_id": REQUEST_ID, **args}
        result = await client.call_tool(
            "issue_refund", {k: v for k, v in sent.items() if v is not None}
        )
    said = text(result)
    assert result.is_error and words in said, said
    assert "pydantic" not in said and "Traceback" not in said and "http" not in said
    assert len(said) < 1000
    assert refunds(emulator, payment) == []

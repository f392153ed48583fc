"""`interlock.mcp` on one server that many conversations share, over streamable HTTP.

A real `MCPServer` with `add_refund_tools` is served by uvicorn on a loopback socket in this
process, over a desk on the emulator's payments model and a journal store, and the SDK's
own streamable HTTP client opens one MCP session per conversation. What is checked is what
ends up in the payments model, not only what the tools said.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import pytest
import uvicorn
from mcp import ClientSession
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult

from interlock import MemoryStore, Refund, Timing
from interlock._core.journal import ActionState
from interlock.mcp import (
    WORLD_CHANGED_WORDS,
    RefundDesk,
    action_id_for,
    add_refund_tools,
    grant_approval,
)
from interlock.testing import InProcessPayments, StripeEmulator
from tests.e2e.test_mcp_server import data, text
from tests.helpers.approvals import APPROVER, APPROVERS

pytestmark = pytest.mark.e2e

CAP = 2000
REQUEST_ID = "req-5d1c8e2a-shared"


class BarrierStore(MemoryStore):
    """A memory journal whose first two reads of one action meet at a barrier: two calls
    that look their request_id up at once both see it before either goes on."""

    def __init__(self) -> None:
        super().__init__()
        self.watched: str | None = None
        self.barrier = threading.Barrier(2, timeout=30)
        self.met = threading.Event()
        self._reads = 0
        self._count = threading.Lock()

    def action(self, action_id: str) -> ActionState | None:
        state = super().action(action_id)
        if action_id == self.watched:
            with self._count:
                self._reads += 1
                first_two = self._reads <= 2
            if first_two:
                self.barrier.wait()
                self.met.set()
        return state


class RecordingDesk(RefundDesk):
    """A desk that records the sessions it is told have ended."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.ended: list[str] = []
        self.two_ended = threading.Event()

    def end_session(self, session: str) -> None:
        super().end_session(session)
        self.ended.append(session)
        if len(self.ended) >= 2:
            self.two_ended.set()


@dataclass
class Served:
    """The server under test: where it listens, its desk, payments model and journal."""

    url: str
    desk: RecordingDesk
    payments: InProcessPayments
    store: BarrierStore
    payment: str

    @asynccontextmanager
    async def session(self) -> AsyncIterator[ClientSession]:
        """A new MCP session (a new conversation) with the server."""
        async with (
            streamable_http_client(self.url) as (read, write),
            ClientSession(read, write) as client,
        ):
            await client.initialize()
            yield client


@contextmanager
def serve(emulator: StripeEmulator, *, stateless: bool = False) -> Iterator[Served]:
    """The desk's tools on an MCPServer, over streamable HTTP on a loopback port; a $100
    payment approved for refunds up to $20."""
    payments = InProcessPayments(emulator.model)
    store = BarrierStore()
    payment = payments.create_payment(10_000).id
    grant_approval(store, payment, CAP, hours=1, by="ana", approver=APPROVER)
    desk = RecordingDesk(
        payments, store, timing=Timing(claim_ttl_s=6, stripe_timeout_s=1), approvers=APPROVERS
    )
    server = MCPServer("refunds", log_level="WARNING")
    add_refund_tools(server, desk)
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    listening.listen()  # connections wait in the backlog until uvicorn accepts them
    port = listening.getsockname()[1]
    app = server.streamable_http_app(stateless_http=stateless)
    web = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=web.run, kwargs={"sockets": [listening]}, daemon=True)
    thread.start()
    try:
        yield Served(f"http://127.0.0.1:{port}/mcp", desk, payments, store, payment)
    finally:
        web.should_exit = True
        thread.join(30)
        listening.close()
    assert not thread.is_alive(), "the HTTP server did not stop"


@pytest.fixture
def served(emulator: StripeEmulator) -> Iterator[Served]:
    """A server that keeps sessions (streamable HTTP's default)."""
    with serve(emulator) as it:
        yield it


def ask(payment: str, amount: int, request_id: str) -> dict[str, Any]:
    """issue_refund's arguments, without a fingerprint: the server uses the session's read."""
    return {"payment_intent": payment, "amount": amount, "request_id": request_id}


async def test_a_conversation_is_checked_against_its_own_read_never_anothers(
    served: Served,
) -> None:
    """Chat A reads; chat B reads, refunds $5 and reads again; A's $5 on its stale read is
    refused as a change (the old desk checked it against B's last read and sent it), and a
    third chat that never read the payment is told to call get_payment first."""
    pi = served.payment
    async with served.session() as chat_a, served.session() as chat_b:
        await chat_a.call_tool("get_payment", {"payment_intent": pi})
        await chat_b.call_tool("get_payment", {"payment_intent": pi})
        by_b = await chat_b.call_tool("issue_refund", ask(pi, 500, "req-chat-b-0001"))
        await chat_b.call_tool("get_payment", {"payment_intent": pi})
        stale = await chat_a.call_tool("issue_refund", ask(pi, 500, "req-chat-a-0001"))
        async with served.session() as chat_c:
            unread = await chat_c.call_tool("issue_refund", ask(pi, 500, "req-chat-c-0001"))
    assert data(by_b)["status"] == "sent", text(by_b)
    assert stale.is_error and data(stale)["status"] == "refused", text(stale)
    assert WORLD_CHANGED_WORDS in text(stale)
    assert unread.is_error and data(unread)["status"] == "invalid"
    assert f"Call get_payment({pi}) first" in text(unread)
    assert [r.id for r in refunds_of(served)] == [data(by_b)["refund_id"]]


async def test_two_calls_with_one_request_id_and_two_amounts_refund_once_and_say_so(
    served: Served,
) -> None:
    """$10 and $5 under one request_id at once, from two conversations that both read the
    payment: both look the request_id up before either is journaled (the store's barrier).
    One is refunded; the other is told nothing was done for it, and names the refund as
    the other call's, never as its own, in words and in data."""
    pi = served.payment
    served.store.watched = action_id_for(pi, REQUEST_ID)
    results: dict[int, CallToolResult] = {}
    async with served.session() as chat_a, served.session() as chat_b:
        await chat_a.call_tool("get_payment", {"payment_intent": pi})
        await chat_b.call_tool("get_payment", {"payment_intent": pi})

        async def call(client: ClientSession, amount: int) -> None:
            results[amount] = await client.call_tool("issue_refund", ask(pi, amount, REQUEST_ID))

        async with anyio.create_task_group() as tg:
            tg.start_soon(call, chat_a, 1000)
            tg.start_soon(call, chat_b, 500)
    assert served.store.met.is_set(), "the two calls never looked the request_id up together"
    (made,) = refunds_of(served)
    winner = results[made.amount]
    loser = results[1500 - made.amount]
    assert data(winner)["status"] == "sent" and data(winner)["refund_id"] == made.id
    said = text(loser)
    assert loser.is_error and said.startswith("Nothing was done for this call"), said
    assert "Refunded" not in said
    assert f"that call's refund is {made.id}" in said
    assert data(loser)["refunded"] is False and data(loser)["refund_id"] is None
    assert data(loser)["other_call"]["refund_id"] == made.id
    assert data(loser)["other_call"]["amount"] == made.amount


def refunds_of(served: Served) -> list[Refund]:
    """The payment's refunds as the payments model holds them."""
    return served.payments.list_refunds(served.payment)


async def test_reads_end_with_their_session_over_http(served: Served) -> None:
    """Two conversations read the payment and close their sessions: the desk is told each
    one ended and keeps nothing of theirs, so nothing can refund on those reads."""
    pi = served.payment
    async with served.session() as chat_a, served.session() as chat_b:
        await chat_a.call_tool("get_payment", {"payment_intent": pi})
        await chat_b.call_tool("get_payment", {"payment_intent": pi})
    assert await anyio.to_thread.run_sync(served.desk.two_ended.wait, 30)
    assert len(set(served.desk.ended)) == 2
    for n, session in enumerate(served.desk.ended):
        after = served.desk.issue_refund(pi, 500, f"req-ended-{n:04d}", session=session)
        assert after.is_error and f"Call get_payment({pi}) first" in after.text
    assert refunds_of(served) == []


async def test_a_stateless_server_keeps_no_read_so_calls_pass_the_fingerprint(
    emulator: StripeEmulator,
) -> None:
    """A stateless HTTP server has no session to keep a read in: a refund without the
    fingerprint is refused with what to pass, and the same refund with it is sent."""
    with serve(emulator, stateless=True) as served:
        pi = served.payment
        async with served.session() as chat:
            seen = data(await chat.call_tool("get_payment", {"payment_intent": pi}))
            without = await chat.call_tool("issue_refund", ask(pi, 500, "req-stateless-01"))
            fingerprint = {"refunds_fingerprint": seen["refunds_fingerprint"]}
            sent = await chat.call_tool(
                "issue_refund", {**ask(pi, 500, "req-stateless-01"), **fingerprint}
            )
        assert without.is_error and "passing its refunds_fingerprint" in text(without)
        assert data(sent)["status"] == "sent", text(sent)
        assert [r.id for r in refunds_of(served)] == [data(sent)["refund_id"]]


async def test_a_sessionless_client_passes_the_fingerprint(emulator: StripeEmulator) -> None:
    """The SDK's own `Client` speaks the sessionless 2026-07-28 protocol by default (here in
    memory): each request is its own connection, so a refund without the fingerprint is
    refused even right after a read, and the same refund with it is sent."""
    payments = InProcessPayments(emulator.model)
    store = MemoryStore()
    pi = payments.create_payment(10_000).id
    grant_approval(store, pi, CAP, hours=1, by="ana", approver=APPROVER)
    server = MCPServer("refunds", log_level="WARNING")
    desk = RefundDesk(
        payments, store, timing=Timing(claim_ttl_s=6, stripe_timeout_s=1), approvers=APPROVERS
    )
    add_refund_tools(server, desk)
    async with Client(server) as client:
        seen = data(await client.call_tool("get_payment", {"payment_intent": pi}))
        without = await client.call_tool("issue_refund", ask(pi, 500, "req-sessionless-1"))
        fingerprint = {"refunds_fingerprint": seen["refunds_fingerprint"]}
        sent = await client.call_tool(
            "issue_refund", {**ask(pi, 500, "req-sessionless-1"), **fingerprint}
        )
    assert without.is_error and "passing its refunds_fingerprint" in text(without)
    assert data(sent)["status"] == "sent", text(sent)
    assert [r.id for r in payments.list_refunds(pi)] == [data(sent)["refund_id"]]

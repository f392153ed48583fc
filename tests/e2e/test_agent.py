"""The support agent's tool-use loop, on the real `anthropic` SDK and on the scripted proposal.

The real SDK talks to a `httpx2.MockTransport` that answers like the Messages API (the SDK
2.x is built on httpx2), so the test sees every request the SDK sent. Subprocess tests
check that workers import `anthropic` only when a real model must decide: a restarted
worker with a saved decision never does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import pytest

from interlock import (
    Lease,
    SQLiteStore,
    StripePayments,
    Timing,
    make_stripe_client,
    refunds_fingerprint,
)
from interlock.testing import InProcessPayments, PaymentsModel, StripeEmulator
from tests.conftest import TEST_KEY
from tests.helpers.approvals import APPROVER
from tests.helpers.headless import ROOT, SCRUBBED
from workers.agent import (
    MAX_TURNS,
    SYSTEM,
    AgentError,
    AnthropicModel,
    Decision,
    ScriptedModel,
    decide,
    payment_view,
)
from workers.protocol.case import Case

REQUEST = "Could you refund $20 for the item that never arrived?"
MODEL = "claude-test-model"
WORKER_DEADLINE_S = 60.0

Handler = Callable[[dict[str, Any]], list[dict[str, Any]]]


def _message(content: list[dict[str, Any]], model: str = MODEL) -> dict[str, Any]:
    stop = "tool_use" if any(b["type"] == "tool_use" for b in content) else "end_turn"
    return {
        "id": "msg_test",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 10},
    }


def messages_api(body: dict[str, Any]) -> list[dict[str, Any]]:
    """Answers like a model would: read the payment first, then refund the $20 asked for."""
    last = body["messages"][-1]
    content = last["content"]
    results = (
        [] if isinstance(content, str) else [b for b in content if b.get("type") == "tool_result"]
    )
    if not results:
        pi = last["content"].rsplit("Payment: ", 1)[1].strip()
        return [
            {"type": "text", "text": "Let me read the payment."},
            {
                "type": "tool_use",
                "id": "toolu_01",
                "name": "get_payment",
                "input": {"payment_intent": pi},
            },
        ]
    payment = json.loads(results[0]["content"])
    return [
        {"type": "text", "text": "Nothing covers it yet; refunding $20."},
        {
            "type": "tool_use",
            "id": "toolu_02",
            "name": "issue_refund",
            "input": {"payment_intent": payment["id"], "amount": 2000, "reason": "item missing"},
        },
    ]


class RecordingClient:
    """A real `anthropic.Anthropic` whose HTTP goes to a mock transport that records bodies."""

    def __init__(self, answer: Handler = messages_api) -> None:
        self.requests: list[httpx2.Request] = []
        self.bodies: list[dict[str, Any]] = []

        def handler(request: httpx2.Request) -> httpx2.Response:
            self.requests.append(request)
            body = json.loads(request.content)
            self.bodies.append(body)
            return httpx2.Response(200, json=_message(answer(body), body["model"]))

        self.http = httpx2.Client(transport=httpx2.MockTransport(handler))
        self.client = anthropic.Anthropic(
            api_key="sk-ant-test-notARealKey",
            base_url="http://anthropic.test",
            http_client=self.http,
            max_retries=0,
        )


@pytest.fixture
def recording() -> Iterator[RecordingClient]:
    """A recording SDK client, closed afterwards."""
    rec = RecordingClient()
    try:
        yield rec
    finally:
        rec.http.close()


@pytest.fixture
def payments() -> InProcessPayments:
    """The in-memory payments model, called in-process."""
    return InProcessPayments(PaymentsModel())


def test_anthropic_model_tool_use_loop(
    recording: RecordingClient, payments: InProcessPayments
) -> None:
    """Over the real SDK: get_payment, then issue_refund; the decision keeps what it was shown."""
    pi = payments.create_payment(10_000).id
    payments.create_refund(pi, 500)
    shown = payments.get_payment(pi)
    model = AnthropicModel("unused", model=MODEL, client=recording.client)

    decision = decide(model, payments, pi, REQUEST)

    assert len(recording.bodies) == 2
    first, second = recording.bodies
    for body in recording.bodies:
        assert body["model"] == MODEL
        assert body["system"] == SYSTEM
        assert [t["name"] for t in body["tools"]] == ["get_payment", "issue_refund"]
        assert "temperature" not in body
    assert all(r.url.path == "/v1/messages" and r.method == "POST" for r in recording.requests)
    assert "sk-ant-test-notARealKey" in " ".join(recording.requests[0].headers.values())
    assert first["messages"] == [{"role": "user", "content": f"{REQUEST}\n\nPayment: {pi}"}]
    user, assistant, results = second["messages"]
    assert user == first["messages"][0]
    assert assistant["role"] == "assistant"
    assert {"type": "tool_use", "id": "toolu_01", "name": "get_payment"}.items() <= assistant[
        "content"
    ][1].items()
    assert results["role"] == "user"
    (result,) = results["content"]
    assert result["type"] == "tool_result"
    assert result["tool_use_id"] == "toolu_01"
    assert json.loads(result["content"]) == payment_view(shown)
    assert json.loads(result["content"])["amount_refunded"] == 500

    assert decision.refund
    assert decision.amount == 2000
    assert decision.payment_intent == pi
    assert decision.model == MODEL
    assert decision.reason == "item missing"
    assert decision.text == "Nothing covers it yet; refunding $20."
    assert decision.fingerprint == refunds_fingerprint(shown.refunds)
    assert decision.fingerprint != refunds_fingerprint([])
    assert decision.payment_seen == payment_view(shown)
    assert decision.tool_call == {
        "name": "issue_refund",
        "input": {"payment_intent": pi, "amount": 2000, "reason": "item missing"},
    }
    assert Decision.from_dict(json.loads(json.dumps(decision.to_dict()))) == decision


def test_anthropic_model_name_from_environment(
    recording: RecordingClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a model argument the name comes from INTERLOCK_MODEL, and is what the SDK sends."""
    monkeypatch.setenv("INTERLOCK_MODEL", "claude-from-env")
    model = AnthropicModel("unused", client=recording.client)
    assert model.name == "claude-from-env"
    blocks = model.turn([{"role": "user", "content": f"{REQUEST}\n\nPayment: pi_123"}])
    assert recording.bodies[0]["model"] == "claude-from-env"
    assert blocks[1] == {
        "type": "tool_use",
        "id": "toolu_01",
        "name": "get_payment",
        "input": {"payment_intent": "pi_123"},
    }


def test_anthropic_api_error_becomes_agent_error(payments: InProcessPayments) -> None:
    """An error answer from the Messages API surfaces as `AgentError` naming what failed."""
    pi = payments.create_payment(10_000).id

    def handler(request: httpx2.Request) -> httpx2.Response:
        error = {"type": "authentication_error", "message": "invalid x-api-key"}
        return httpx2.Response(401, json={"type": "error", "error": error})

    with httpx2.Client(transport=httpx2.MockTransport(handler)) as http:
        client = anthropic.Anthropic(
            api_key="sk-ant-test-notARealKey", base_url="http://anthropic.test", http_client=http
        )
        model = AnthropicModel("unused", model=MODEL, client=client)
        with pytest.raises(AgentError, match=r"model call failed \(AuthenticationError\).*401"):
            decide(model, payments, pi, REQUEST)


def test_scripted_model_refunds_when_nothing_covers_it(payments: InProcessPayments) -> None:
    """The scripted proposal reads the payment and refunds $20 when no refund covers it."""
    pi = payments.create_payment(10_000).id
    payments.create_refund(pi, 1_000)  # $10 by hand: not enough to cover the $20 asked for
    decision = decide(ScriptedModel(2000), payments, pi, REQUEST)
    assert decision.refund and decision.amount == 2000
    assert decision.model == "scripted"
    assert decision.tool_call["name"] == "issue_refund"
    assert decision.fingerprint == refunds_fingerprint(payments.get_payment(pi).refunds)


def test_scripted_model_declines_when_refunds_cover_it(payments: InProcessPayments) -> None:
    """The scripted proposal answers without a refund when existing refunds cover the request."""
    pi = payments.create_payment(10_000).id
    payments.create_refund(pi, 2_000)
    decision = decide(ScriptedModel(2000), payments, pi, REQUEST)
    assert not decision.refund
    assert decision.amount is None
    assert decision.tool_call == {}
    assert "$20.00 refunded" in decision.text
    assert decision.fingerprint == refunds_fingerprint(payments.get_payment(pi).refunds)


class Script:
    """A model that answers with fixed turns and records the conversation it was shown."""

    name = "script"

    def __init__(self, *turns: list[dict[str, Any]]) -> None:
        self.turns = list(turns)
        self.seen: list[list[dict[str, Any]]] = []

    def turn(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        self.seen.append(json.loads(json.dumps(messages)))
        return self.turns.pop(0) if len(self.turns) > 1 else self.turns[0]


def _use(name: str, tool_id: str, **args: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_id, "name": name, "input": args}


def test_decide_errors_when_the_model_never_decides(payments: InProcessPayments) -> None:
    """A model that keeps reading the payment gets a clear error after the turn limit."""
    pi = payments.create_payment(10_000).id
    model = Script([_use("get_payment", "toolu_x", payment_intent=pi)])
    with pytest.raises(AgentError, match=f"did not decide within {MAX_TURNS} turns"):
        decide(model, payments, pi, REQUEST)
    assert len(model.seen) == MAX_TURNS


def test_decide_errors_when_the_model_answers_without_reading(
    payments: InProcessPayments,
) -> None:
    """A model that answers before reading the payment is an error, not a decision."""
    pi = payments.create_payment(10_000).id
    with pytest.raises(AgentError, match="without reading the payment"):
        decide(Script([{"type": "text", "text": "No refund."}]), payments, pi, REQUEST)


def test_refund_before_reading_and_unknown_tools_get_error_results(
    payments: InProcessPayments,
) -> None:
    """issue_refund before get_payment, or an unknown tool, is answered with an error result."""
    pi = payments.create_payment(10_000).id
    model = Script(
        [_use("issue_refund", "toolu_a", payment_intent=pi, amount=2000)],
        [_use("cancel_order", "toolu_b")],
        [_use("get_payment", "toolu_c", payment_intent=pi)],
        [_use("issue_refund", "toolu_d", payment_intent=pi, amount=1500)],
    )
    decision = decide(model, payments, pi, REQUEST)
    assert decision.amount == 1500
    first_result = model.seen[1][-1]["content"][0]
    assert first_result["tool_use_id"] == "toolu_a" and first_result["is_error"] is True
    assert "get_payment before refunding" in first_result["content"]
    second_result = model.seen[2][-1]["content"][0]
    assert (
        second_result["is_error"] is True
        and "Unknown tool cancel_order" in second_result["content"]
    )


# -- what the workers import -------------------------------------------------------------


def test_worker_modules_do_not_import_anthropic() -> None:
    """Importing the worker modules leaves `anthropic` unimported; building the real model does."""
    probe = (
        "import sys, workers.standalone, workers.run, workers.agent\n"
        "print('anthropic' in sys.modules)\n"
        "workers.agent.AnthropicModel('sk-ant-test-notARealKey')\n"
        "print('anthropic' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if k not in SCRUBBED},
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"]


class FakeMessagesAPI:
    """A loopback HTTP server answering `POST /v1/messages` like the Messages API."""

    def __init__(self, status: int = 200) -> None:
        self.bodies: list[dict[str, Any]] = []
        api = self

        class _H(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                api.bodies.append(body)
                if status == 200:
                    answer = _message(messages_api(body), body["model"])
                else:
                    error = {"type": "authentication_error", "message": "invalid x-api-key"}
                    answer = {"type": "error", "error": error}
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _H)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    def __enter__(self) -> FakeMessagesAPI:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


def _worker(case_file: Path, env: dict[str, str], crash: str | None) -> tuple[int, list[Any], str]:
    """Run one real worker with `-X importtime`; its exit code, events and stderr."""
    run_env = dict(env)
    if crash is not None:
        run_env["INTERLOCK_CRASH"] = crash
    out_path, err_path = case_file.with_suffix(".out"), case_file.with_suffix(".err")
    with out_path.open("w") as out, err_path.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-X", "importtime", "-m", "workers.standalone", str(case_file)],
            stdin=subprocess.PIPE,  # the worker's lifeline: it exits when this closes
            stdout=out,
            stderr=err,
            cwd=ROOT,
            env=run_env,
        )
    assert proc.stdin is not None
    try:
        proc.wait(WORKER_DEADLINE_S)
    finally:
        proc.stdin.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out_text, err_text = out_path.read_text(), err_path.read_text()
    events = [json.loads(line) for line in out_text.splitlines() if line.strip()]
    return proc.returncode, events, err_text


def _imported(stderr: str, *, top_level: bool = True) -> set[str]:
    """Modules `-X importtime` reported (a module blocked as None shows, without submodules)."""
    names = {
        line.split("|")[-1].strip()
        for line in stderr.splitlines()
        if line.startswith("import time:")
    }
    return {n.split(".")[0] for n in names} if top_level else names


def _live_case(
    tmp_path: Path, emulator: StripeEmulator, column: str
) -> tuple[StripePayments, Path, dict[str, str]]:
    """A $100 payment, a $20 approval and a case file; the env of a live-agent worker."""
    stripe_payments = StripePayments(
        make_stripe_client(TEST_KEY, timeout_s=2, base_url=emulator.url)
    )
    pi = stripe_payments.create_payment(10_000).id
    home = tmp_path / "home"
    store_path = home / "interlock.sqlite3"
    store = SQLiteStore(store_path)
    store.grant_lease(
        APPROVER.sign(
            Lease(
                id=f"lease_{column}",
                kind="refund",
                target=pi,
                cap=2000,
                expires_at=4e9,
                granted_by="support",
                granted_at=1e9,
            )
        )
    )
    store.close()
    # The worker checks approvals with the approver's public key only, as the engine's do.
    approvers = tmp_path / "approvers.pem"
    approvers.write_bytes(APPROVER.public_pem())
    case = Case(f"case-{column}", column, pi, f"lease_{column}", 2000, REQUEST)
    case_file = tmp_path / "case.json"
    case_file.write_text(json.dumps(case.to_dict()))
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
    env.update(
        {
            "INTERLOCK_HOME": str(home),
            "INTERLOCK_STORE": str(store_path),
            "INTERLOCK_APPROVERS": str(approvers),
            "INTERLOCK_STRIPE_BASE": emulator.url,
            "STRIPE_SECRET_KEY": TEST_KEY,
            "INTERLOCK_AGENT": "anthropic",
            "ANTHROPIC_API_KEY": "sk-ant-test-notARealKey",
            "INTERLOCK_MODEL": MODEL,
            # A worker takes the whole timing, as the engine writes it.
            **Timing(claim_ttl_s=6, stripe_timeout_s=1).to_env(),
        }
    )
    return stripe_payments, case_file, env


def test_worker_reports_a_failed_model_call_as_an_event(
    tmp_path: Path, emulator: StripeEmulator
) -> None:
    """A live worker whose model call is refused emits an error event and exits 1, no traceback."""
    stripe_payments, case_file, env = _live_case(tmp_path, emulator, "standard")
    with FakeMessagesAPI(status=401) as api:
        env["ANTHROPIC_BASE_URL"] = api.url
        code, events, err = _worker(case_file, env, None)
    assert code == 1, err[-2000:]
    assert len(api.bodies) == 1
    assert events[-1]["kind"] == "error"
    assert "model call failed (AuthenticationError)" in events[-1]["text"]
    assert "Traceback" not in err
    assert "sk-ant-test-notARealKey" not in json.dumps(events)
    assert stripe_payments.list_refunds(json.loads(case_file.read_text())["payment_intent"]) == []


@pytest.mark.e2e
@pytest.mark.timeout(120)
@pytest.mark.parametrize("column", ["standard", "interlock"])
def test_restarted_worker_with_a_saved_decision_never_imports_anthropic(
    tmp_path: Path, emulator: StripeEmulator, column: str
) -> None:
    """The first live worker asks the real SDK; its restart uses the saved decision, no SDK."""
    stripe_payments, case_file, env = _live_case(tmp_path, emulator, column)
    pi = json.loads(case_file.read_text())["payment_intent"]
    with FakeMessagesAPI() as api:
        env["ANTHROPIC_BASE_URL"] = api.url
        code, events, err = _worker(case_file, env, "before-send")
        assert code == -9, err[-2000:]
        assert [e["kind"] for e in events if e["kind"] in ("decision", "crash")] == [
            "decision",
            "crash",
        ]
        assert "anthropic" in _imported(err)
        assert len(api.bodies) == 2

        code, events, err = _worker(case_file, env, None)
        assert code == 0, err[-2000:]
        imported = _imported(err)
        assert "anthropic" not in imported
        assert "stripe" in imported
        # stripe's probes for default HTTP clients the worker never uses find nothing to load.
        loaded = _imported(err, top_level=False)
        assert not [m for m in loaded if m.startswith(("aiohttp.", "requests.", "yarl"))]
        assert len(api.bodies) == 2  # the restart asked nobody
    kinds = [e["kind"] for e in events]
    assert "ask-model" not in kinds
    outcome = events[-1]
    assert outcome["kind"] == "outcome"
    assert outcome["status"] == "sent"
    refunds = stripe_payments.list_refunds(pi)
    assert [r.amount for r in refunds] == [2000]

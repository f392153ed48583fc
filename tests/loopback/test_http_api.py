"""The loopback HTTP endpoint (docs/design.md §6): its answers, its checks and their order.

Requests go through the stdlib `http.client` so that each test sets the Host and Origin
headers itself. The engine runs in mock mode (in-process, well under a second); a test
that needs a run to stay running holds it with a listener that waits on an event.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import logging
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from interlock_demo.core.columns import OPTIONAL
from interlock_demo.core.run import Run
from interlock_demo.engine import Engine, RunChoice
from interlock_demo.errors import PortInUseError
from interlock_demo.settings.config import DemoConfig, resolve
from interlock_demo.settings.modes import mode_named
from interlock_demo.views.http_api import (
    FD_HEADROOM,
    LOG_ENTRIES_PER_MINUTE,
    MAX_BODY,
    MAX_LOG_BYTES,
    RunApi,
    connection_cap,
)

WAIT_S = 30.0
HTTP_TIMEOUT_S = 10.0
STRIPE_KEY = "sk_test_madeUpForHttpTests4242424242"
ANTHROPIC_KEY = "sk-ant-api03-madeUpForHttpTests-0000000000"
GOOD_BODY = {"scenario": "hand-refund", "mode": "mock", "checked": True}


@dataclass
class Answer:
    """One HTTP answer as received."""

    status: int
    headers: http.client.HTTPMessage
    raw: bytes

    def json(self) -> Any:
        """The body, after checking that it says it is JSON."""
        assert self.headers.get_content_type() == "application/json"
        return json.loads(self.raw)

    @property
    def error(self) -> str:
        """The error message of an error answer."""
        return str(self.json()["error"])


class Client:
    """Talks to one endpoint, addressed as 127.0.0.1:<port> unless told otherwise, sending
    `token` (the endpoint's, to start runs) unless a test sends its own Authorization."""

    def __init__(self, port: int, token: str | None = None) -> None:
        self.port = port
        self.token = token
        self.answers: list[Answer] = []

    def send(
        self,
        method: str,
        path: str,
        *,
        body: bytes = b"",
        headers: dict[str, str] | None = None,
        host: str | None = "",
    ) -> Answer:
        """Send one request; `host=None` sends no Host header, "" the endpoint's own."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=HTTP_TIMEOUT_S)
        try:
            conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            if host is not None:
                conn.putheader("Host", host or f"127.0.0.1:{self.port}")
            headers = dict(headers or {})
            if self.token is not None:
                headers.setdefault("Authorization", f"token {self.token}")
            for name, value in headers.items():
                conn.putheader(name, value)
            if body or method == "POST":
                conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body or None)
            response = conn.getresponse()
            answer = Answer(response.status, response.headers, response.read())
        finally:
            conn.close()
        self.answers.append(answer)
        return answer

    def get(self, path: str, **kwargs: Any) -> Answer:
        """GET `path`."""
        return self.send("GET", path, **kwargs)

    def post(
        self,
        body: Any = GOOD_BODY,
        *,
        content_type: str | None = "application/json",
        headers: dict[str, str] | None = None,
        host: str | None = "",
    ) -> Answer:
        """POST a run request; a dict or list body is sent as JSON, bytes as they are."""
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        all_headers = dict(headers or {})
        if content_type is not None:
            all_headers["Content-Type"] = content_type
        return self.send("POST", "/api/runs", body=raw, headers=all_headers, host=host)


class HeldRuns:
    """A `start_run` that starts engine runs whose columns wait at their first change."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.release = threading.Event()
        self.started: list[Run] = []

    def __call__(self, choice: RunChoice) -> Run:
        run = self.engine.start(choice, listeners=(self._hold,))
        self.started.append(run)
        return run

    def _hold(self, run: Run, column: str | None) -> None:
        self.release.wait(WAIT_S)

    def finish(self) -> None:
        """Let the held runs go and wait for them to end."""
        self.release.set()
        for run in self.started:
            assert run.wait(WAIT_S)


def mock_config(tmp_path: Path, **keys: str) -> DemoConfig:
    """A mock-mode configuration that sees only `keys` (and no `stripe` CLI)."""
    return resolve(mode="mock", env={"INTERLOCK_HOME": str(tmp_path / "home"), "PATH": "", **keys})


def endpoint(engine: Engine, config: DemoConfig, **kwargs: Any) -> RunApi:
    """The endpoint over `engine`, its POSTs changing a choice of `config` as a view would."""
    return RunApi(engine, choice=lambda: RunChoice(config), **kwargs)


@pytest.fixture
def config(tmp_path: Path) -> DemoConfig:
    """A mock-mode configuration that found no keys."""
    return mock_config(tmp_path)


@pytest.fixture
def engine(config: DemoConfig) -> Iterator[Engine]:
    """A mock-mode engine that found no keys."""
    eng = Engine(config)
    yield eng
    eng.close()


@pytest.fixture
def api(engine: Engine, config: DemoConfig) -> Iterator[RunApi]:
    """The endpoint over `engine` on a free port, starting runs with `engine.start`."""
    server = endpoint(engine, config, port=0).start()
    yield server
    server.stop()


@pytest.fixture
def client(api: RunApi) -> Client:
    """A client of `api`."""
    return Client(api.port, api.token)


@pytest.fixture
def held(engine: Engine) -> Iterator[HeldRuns]:
    """A `start_run` whose runs stay running until the test is over."""
    runs = HeldRuns(engine)
    yield runs
    runs.finish()


@pytest.fixture
def held_client(engine: Engine, config: DemoConfig, held: HeldRuns) -> Iterator[Client]:
    """A client of an endpoint whose POSTs start held runs."""
    server = endpoint(engine, config, port=0, start_run=held).start()
    yield Client(server.port, server.token)
    server.stop()


def started(answer: Answer, engine: Engine) -> Run:
    """The run a 202 answer started, after checking the answer."""
    assert answer.status == 202, answer.raw
    body = answer.json()
    assert body == {"run_id": body["run_id"], "url": f"/api/runs/{body['run_id']}"}
    return engine.runs[body["run_id"]]


# -- serving runs ------------------------------------------------------------------------


def test_get_run_before_any_run_is_404(client: Client) -> None:
    """Before any run, GET /api/run answers 404 with a JSON error."""
    answer = client.get("/api/run")
    assert answer.status == 404
    assert "no run yet" in answer.error


def test_served_run_equals_run_to_json(client: Client, engine: Engine) -> None:
    """A finished run is served at /api/run and /api/runs/{id} exactly as Run.to_json(): a
    run@2 document with its verdict, whose events carry their fields (each worker's report,
    its outcome)."""
    run = started(client.post(), engine)
    assert run.wait(WAIT_S)
    assert run.status == "finished"
    assert client.get("/api/run").json() == run.to_json()
    assert client.get(f"/api/runs/{run.run_id}").json() == run.to_json()
    served = client.get("/api/run").json()
    assert served["schema"] == "interlock-demo/run@2"
    # The hand refund: the standard agent pays twice, as the truth table predicts.
    assert (served["as_predicted"], served["verdict"]) == (True, "wrong (as predicted)")
    for col in served["columns"]:
        outcomes = [e["data"] for e in col["events"] if e["kind"] == "outcome"]
        assert outcomes[-1] == col["outcome"], col["name"]


def test_unknown_run_id_is_404(client: Client, engine: Engine) -> None:
    """GET of a run id this process does not have answers 404, also after another run."""
    assert client.get("/api/runs/run_000000000000").status == 404
    run = started(client.post(), engine)
    assert run.wait(WAIT_S)
    answer = client.get("/api/runs/run_000000000000")
    assert answer.status == 404
    assert "no run 'run_000000000000'" in answer.error


def test_post_answers_202_at_once_with_the_run_registered(
    held_client: Client, engine: Engine, held: HeldRuns
) -> None:
    """POST answers 202 while the run is still going, and the run is already served."""
    answer = held_client.post()
    run = started(answer, engine)
    assert held.started == [run]
    assert answer.headers["Location"] == f"/api/runs/{run.run_id}"
    assert not run.finished
    by_id = held_client.get(f"/api/runs/{run.run_id}").json()
    assert (by_id["run_id"], by_id["status"]) == (run.run_id, "running")
    assert held_client.get("/api/run").json()["run_id"] == run.run_id


def test_post_passes_the_request_to_start_run(
    held_client: Client, engine: Engine, held: HeldRuns
) -> None:
    """The body's scenario, mode and checked reach the run; left out, mode and checked default."""
    run = started(held_client.post({"scenario": "revoked"}), engine)
    assert (run.scenario, run.mode, [c.name for c in run.columns]) == (
        "revoked",
        "mock",
        ["standard", "interlock"],
    )
    held.release.set()
    assert run.wait(WAIT_S)
    run = started(held_client.post({"scenario": "after-answer", "checked": True}), engine)
    assert [c.name for c in run.columns] == ["standard", "interlock", "checked"]


def test_post_keeps_what_it_does_not_name_of_the_views_choice(tmp_path: Path) -> None:
    """A POST changes only what its body names in the view's choice, read at each request:
    the view's engine stays, so mock on the view's Temporal is refused with the mode
    table's own words and nothing starts."""
    offline = resolve(mode="offline", env={"INTERLOCK_HOME": str(tmp_path), "PATH": ""})
    choices = [RunChoice(dataclasses.replace(offline, engine="temporal"), optional=OPTIONAL)]
    eng = Engine(offline)
    server = RunApi(eng, choice=lambda: choices[-1], port=0).start()
    try:
        answer = Client(server.port, server.token).post({"scenario": "revoked", "mode": "mock"})
        assert answer.status == 400
        assert answer.error.startswith(str(mode_named("mock").refusal("temporal")))
        choices.append(RunChoice(offline.with_mode("mock"), optional=OPTIONAL))
        run = started(Client(server.port, server.token).post({"scenario": "revoked"}), eng)
        assert run.wait(WAIT_S)
    finally:
        server.stop()
        eng.close()
    assert (run.mode, run.engine, [c.name for c in run.columns]) == (
        "mock",
        "standalone",
        ["standard", "interlock", "checked"],
    )
    assert list(eng.runs) == [run.run_id]


def test_second_start_while_one_runs_is_409(
    held_client: Client, engine: Engine, held: HeldRuns
) -> None:
    """A POST while a run is going answers 409 with the running run's id and starts nothing."""
    first = started(held_client.post(), engine)
    answer = held_client.post({"scenario": "revoked", "mode": "mock"})
    assert answer.status == 409
    assert answer.json()["run_id"] == first.run_id
    assert first.run_id in answer.error
    assert list(engine.runs) == [first.run_id]


# -- Host ----------------------------------------------------------------------------------

FOREIGN_HOSTS = [
    "evil.example:{port}",
    "localhost.evil.example:{port}",  # DNS rebinding: a name of the attacker's
    "127.0.0.1.nip.io:{port}",  # DNS rebinding: a name that resolves to loopback
    "127.0.0.1",
    "localhost",
    "127.0.0.1:{other}",
    "localhost:{other}",
    "0.0.0.0:{port}",
    "[::1]:{port}",
    "127.0.0.1:{port}.evil.example",
]


@pytest.mark.parametrize("host", FOREIGN_HOSTS)
def test_foreign_host_is_403(client: Client, engine: Engine, host: str) -> None:
    """A request not addressed to 127.0.0.1:<port> or localhost:<port> gets 403, even a POST."""
    host = host.format(port=client.port, other=client.port + 1)
    get = client.get("/api/run", host=host)
    assert get.status == 403
    assert "DNS rebinding" in get.error
    assert repr(host) in get.error
    post = client.post(host=host)
    assert post.status == 403
    assert "DNS rebinding" in post.error
    assert engine.runs == {}


def test_missing_host_is_refused(client: Client, engine: Engine) -> None:
    """Without a Host header: HTTP/1.0 gets our 403; HTTP/1.1, aiohttp's 400; nothing starts."""
    with socket.create_connection(("127.0.0.1", client.port), timeout=HTTP_TIMEOUT_S) as sock:
        sock.sendall(b"GET /api/run HTTP/1.0\r\n\r\n")
        response = http.client.HTTPResponse(sock)
        try:
            response.begin()
            old = Answer(response.status, response.headers, response.read())
        finally:
            response.close()
    assert old.status == 403
    assert "got no Host header" in old.error
    for answer in (client.get("/api/run", host=None), client.post(host=None)):
        assert answer.status == 400
        assert b"Host" in answer.raw
    assert engine.runs == {}


def test_both_loopback_names_are_answered(client: Client, engine: Engine) -> None:
    """Requests addressed to localhost:<port> or 127.0.0.1:<port> are answered."""
    run = started(client.post(host=f"localhost:{client.port}"), engine)
    assert run.wait(WAIT_S)
    for host in (f"localhost:{client.port}", f"127.0.0.1:{client.port}"):
        assert client.get("/api/run", host=host).json()["run_id"] == run.run_id


# -- Content-Type, Origin, body, and their order -----------------------------------------


@pytest.mark.parametrize(
    "content_type",
    [None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"],
)
def test_post_without_json_content_type_is_415(
    client: Client, engine: Engine, content_type: str | None
) -> None:
    """A POST that does not say Content-Type: application/json gets 415 and starts nothing."""
    answer = client.post(content_type=content_type)
    assert answer.status == 415
    assert "application/json" in answer.error
    assert engine.runs == {}


def test_json_content_type_with_charset_is_accepted(client: Client, engine: Engine) -> None:
    """`application/json; charset=utf-8` is JSON."""
    run = started(client.post(content_type="application/json; charset=utf-8"), engine)
    assert run.wait(WAIT_S)


@pytest.mark.parametrize(
    "origin",
    [
        "http://evil.example",
        "null",
        "http://127.0.0.1:{other}",
        "https://127.0.0.1:{port}",
        "http://127.0.0.1",
        "http://localhost.evil.example:{port}",
    ],
)
def test_cross_origin_post_is_403(client: Client, engine: Engine, origin: str) -> None:
    """A POST with an Origin other than the endpoint's own gets 403 and starts nothing."""
    origin = origin.format(port=client.port, other=client.port + 1)
    answer = client.post(headers={"Origin": origin})
    assert answer.status == 403
    assert "own origin" in answer.error
    assert engine.runs == {}


@pytest.mark.parametrize("origin", ["http://127.0.0.1:{port}", "http://localhost:{port}"])
def test_own_origin_post_is_accepted(client: Client, engine: Engine, origin: str) -> None:
    """A POST from the endpoint's own origin starts a run."""
    answer = client.post(headers={"Origin": origin.format(port=client.port)})
    assert started(answer, engine).wait(WAIT_S)


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"scenario=hand-refund", "not JSON"),
        (b"", "not JSON"),
        (["hand-refund"], "JSON object"),
        ({"mode": "mock"}, "scenario must be one of hand-refund, revoked, after-answer"),
        ({"scenario": "all"}, "scenario must be one of"),
        ({"scenario": ["hand-refund"]}, "scenario must be one of"),
        ({"scenario": "revoked", "mode": "turbo"}, "mode must be one of live, offline, mock"),
        ({"scenario": "revoked", "mode": None}, "mode must be one of"),
        ({"scenario": "revoked", "checked": "yes"}, "checked must be true or false"),
        ({"scenario": "revoked", "checked": 1}, "checked must be true or false"),
        ({"scenario": "revoked", "check": True}, "unknown field(s) check"),
    ],
)
def test_bad_body_is_400_saying_what_is_valid(
    client: Client, engine: Engine, body: Any, says: str
) -> None:
    """A body that is not a valid run request gets 400 naming what is valid, and starts nothing."""
    answer = client.post(body)
    assert answer.status == 400
    assert says in answer.error
    assert '"scenario": "hand-refund"|"revoked"|"after-answer"' in answer.error
    assert engine.runs == {}


def test_checks_come_in_order(client: Client, engine: Engine) -> None:
    """Host is checked before Content-Type, Content-Type before Origin, Origin before the body."""
    evil = {"Origin": "http://evil.example"}
    port = client.port
    answer = client.post(b"nope", content_type="text/plain", headers=evil, host="evil.example")
    assert (answer.status, "DNS rebinding" in answer.error) == (403, True)
    answer = client.post(b"nope", content_type="text/plain", headers=evil)
    assert answer.status == 415
    answer = client.post(b"nope", headers=evil)
    assert (answer.status, "own origin" in answer.error) == (403, True)
    answer = client.post(b"nope", headers={"Origin": f"http://127.0.0.1:{port}"})
    assert answer.status == 400
    assert engine.runs == {}


def test_the_token_is_checked_after_host_and_before_content_type(
    api: RunApi, engine: Engine
) -> None:
    """Another name is refused before the token is asked for; without the token nothing else
    about the request is answered (not its Content-Type, not its body)."""
    bare = Client(api.port)
    answer = bare.post(b"nope", content_type="text/plain", host="evil.example")
    assert (answer.status, "DNS rebinding" in answer.error) == (403, True)
    answer = bare.post(b"nope", content_type="text/plain")
    assert (answer.status, "token" in answer.error) == (403, True)
    assert engine.runs == {}


@pytest.mark.parametrize(
    ("how", "said"),
    [
        ("none", "no token"),
        ("query", "a token that is not this launch's"),
        ("header", "a token that is not this launch's"),
        ("another scheme", "no token"),
    ],
)
def test_a_post_without_this_launchs_token_is_403_saying_where_it_is_shown(
    api: RunApi, engine: Engine, config: DemoConfig, how: str, said: str
) -> None:
    """Any local process reaches 127.0.0.1, another user's too: without the endpoint's token
    (or with another endpoint's) a POST starts nothing, and the answer says where the
    address with the token is shown; it never repeats the token."""
    other = endpoint(engine, config, port=0).token
    assert other != api.token  # a new one for each endpoint
    bare = Client(api.port)
    if how == "none":
        answer = bare.post()
    elif how == "query":
        answer = bare.send(
            "POST",
            f"/api/runs?token={other}",
            body=json.dumps(GOOD_BODY).encode(),
            headers={"Content-Type": "application/json"},
        )
    elif how == "header":
        answer = bare.post(headers={"Authorization": f"token {other}"})
    else:
        answer = bare.post(headers={"Authorization": f"Bearer {api.token}"})
    assert answer.status == 403
    assert answer.error == (
        f"POST /api/runs starts a run only with this endpoint's token (got {said}); the app "
        "shows the address with the token in its first message when it starts with --http "
        "(POST http://127.0.0.1:<port>/api/runs?token=...), and nothing else shows it; send "
        "it as ?token=... or as the header Authorization: token ..."
    )
    assert api.token.encode() not in answer.raw
    assert engine.runs == {}


def test_the_token_in_the_query_starts_a_run_and_reads_stay_open(
    api: RunApi, engine: Engine
) -> None:
    """The address the app shows (`control_url`) starts a run; reading needs no token."""
    assert api.control_url == f"http://127.0.0.1:{api.port}/api/runs?token={api.token}"
    bare = Client(api.port)
    answer = bare.send(
        "POST",
        api.control_url.removeprefix(api.url),
        body=json.dumps(GOOD_BODY).encode(),
        headers={"Content-Type": "application/json"},
    )
    run = started(answer, engine)
    assert run.wait(WAIT_S)
    assert bare.get("/api/run").json() == run.to_json()
    assert bare.get(f"/api/runs/{run.run_id}").status == 200


def test_checks_come_before_409(held_client: Client, engine: Engine) -> None:
    """While a run is going, each earlier check still gives its own answer, not 409."""
    started(held_client.post(), engine)
    assert held_client.post(host="evil.example:1").status == 403
    assert held_client.post(content_type="text/plain").status == 415
    assert held_client.post(headers={"Origin": "http://evil.example"}).status == 403
    assert held_client.post({"scenario": "nope"}).status == 400
    assert held_client.post({"scenario": "revoked", "mode": "live"}).status == 400
    assert held_client.post().status == 409


def test_live_without_keys_is_400_naming_what_is_missing(tmp_path: Path) -> None:
    """A mode the configuration refuses gets 400 with its message, which shows no key."""
    config = mock_config(tmp_path, STRIPE_SECRET_KEY=STRIPE_KEY)
    eng = Engine(config)
    server = endpoint(eng, config, port=0).start()
    try:
        answer = Client(server.port, server.token).post({"scenario": "revoked", "mode": "live"})
    finally:
        server.stop()
        eng.close()
    assert answer.status == 400
    assert answer.error.startswith("live mode needs ANTHROPIC_API_KEY")
    assert STRIPE_KEY not in answer.raw.decode()
    assert eng.runs == {}


# -- every answer ----------------------------------------------------------------------------


def test_no_key_in_any_answer(tmp_path: Path) -> None:
    """With both keys set, no answer (bodies or headers) contains either key."""
    config = mock_config(tmp_path, STRIPE_SECRET_KEY=STRIPE_KEY, ANTHROPIC_API_KEY=ANTHROPIC_KEY)
    eng = Engine(config)
    held = HeldRuns(eng)
    server = endpoint(eng, config, port=0, start_run=held).start()
    client = Client(server.port, server.token)
    try:
        run = started(client.post(), eng)
        client.get("/api/run")
        client.post()
        client.post({"scenario": "revoked", "mode": "turbo"})
        held.finish()
        client.get("/api/run")
        client.get(f"/api/runs/{run.run_id}")
        client.get("/api/runs/nope")
        client.get("/api/run", host="evil.example")
        client.send("OPTIONS", "/api/runs")
    finally:
        server.stop()
        eng.close()
    assert run.status == "finished"
    assert [a.status for a in client.answers] == [202, 200, 409, 400, 200, 200, 404, 403, 405]
    for answer in client.answers:
        text = answer.raw.decode() + str(answer.headers)
        assert STRIPE_KEY not in text
        assert ANTHROPIC_KEY not in text


def test_every_answer_is_json_no_store_without_cors(held_client: Client, engine: Engine) -> None:
    """Every answer, errors and unknown paths included, is JSON, no-store, and grants no CORS."""
    c = held_client
    evil = {"Origin": "http://evil.example"}
    preflight = {
        **evil,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type",
    }
    answers = [
        c.get("/api/run"),
        c.post(headers=evil),
        c.post(),
        c.get("/api/run", headers=evil),
        c.post(),
        c.post(b"{", headers=evil),
        c.post(b"{"),
        c.post(content_type="text/plain"),
        c.get("/api/run", host="evil.example"),
        c.get("/api/runs/nope"),
        c.get("/nope"),
        c.get("/api/runs"),
        c.send("DELETE", "/api/run"),
        c.send("OPTIONS", "/api/runs", headers=preflight),
        c.post(b"{" * 70_000),
    ]
    assert [a.status for a in answers] == [
        404, 403, 202, 200, 409, 403, 400, 415, 403, 404, 404, 405, 405, 405, 413
    ]  # fmt: skip
    for answer in answers:
        assert answer.headers.get_content_type() == "application/json", answer.raw
        assert answer.headers["Cache-Control"] == "no-store"
        assert isinstance(answer.json(), dict)
        assert not [h for h in answer.headers if h.lower().startswith("access-control-")]


# -- lifecycle ---------------------------------------------------------------------------------


def test_port_in_use_names_the_port_and_the_flag(engine: Engine, config: DemoConfig) -> None:
    """Starting on a port another program listens on raises an error naming it and --http PORT."""
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        with pytest.raises(PortInUseError) as caught:
            endpoint(engine, config, port=port).start()
    assert str(caught.value) == (
        f"cannot serve the HTTP endpoint on 127.0.0.1:{port}: the port is in use; "
        "pick another with --http PORT"
    )
    assert not [t for t in threading.enumerate() if t.name == "http-api"]


def test_serves_loopback_only_and_stop_frees_the_port(engine: Engine, config: DemoConfig) -> None:
    """It listens on 127.0.0.1 only, and after stop() its thread is gone and the port free."""
    server = endpoint(engine, config, port=0).start()
    port = server.port
    assert port != 0
    assert server.url == f"http://127.0.0.1:{port}"
    assert Client(port).get("/api/run").status == 404
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.2", port), timeout=HTTP_TIMEOUT_S).close()
    server.stop()
    assert not [t for t in threading.enumerate() if t.name == "http-api"]
    again = endpoint(engine, config, port=port).start()
    try:
        assert Client(port).get("/api/run").status == 404
    finally:
        again.stop()


# -- abuse: bodies that cannot be handled, slow clients, unexpected errors ------------------

SHORT_S = 0.5


@pytest.mark.parametrize(
    "body",
    [
        b"[" * 10_000 + b"]" * 10_000,
        b'{"a":' * 10_000 + b"1" + b"}" * 10_000,
        b'{"scenario": ' + b"[" * 5_000 + b"]" * 5_000 + b"}",
    ],
    ids=["array-10000", "object-10000", "scenario-5000"],
)
def test_deeply_nested_body_is_400_saying_so(client: Client, engine: Engine, body: bytes) -> None:
    """A body nested 5,000 to 10,000 levels deep (under the size limit) is a 400 that says why."""
    assert len(body) < 64 * 1024
    answer = client.post(body)
    assert answer.status == 400, answer.raw
    assert "nested too deeply" in answer.error
    assert engine.runs == {}


def _slow_request(port: int, head: bytes) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=HTTP_TIMEOUT_S)
    sock.sendall(head)
    return sock


def _read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (a reset counts as closed)."""
    chunks = []
    try:
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    except ConnectionResetError:
        pass
    finally:
        sock.close()
    return b"".join(chunks)


@pytest.fixture
def short_api(engine: Engine, config: DemoConfig) -> Iterator[RunApi]:
    """The endpoint with half-second header and body timeouts and room for 4 connections."""
    server = endpoint(
        engine, config, port=0, max_connections=4, header_timeout_s=SHORT_S, body_timeout_s=SHORT_S
    ).start()
    yield server
    server.stop()


def test_headers_that_never_finish_get_408_and_the_connection_closed(short_api: RunApi) -> None:
    """A client that never finishes its headers is answered 408 and closed after the timeout."""
    port = short_api.port
    sock = _slow_request(port, f"GET /api/run HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode())
    raw = _read_until_closed(sock)
    assert raw.startswith(b"HTTP/1.1 408 "), raw
    assert b"did not arrive within 0.5 s" in raw


def test_body_shorter_than_its_length_gets_408(short_api: RunApi, engine: Engine) -> None:
    """A POST whose body never reaches its Content-Length is answered 408, and starts nothing."""
    port = short_api.port
    head = (
        f"POST /api/runs HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Authorization: token {short_api.token}\r\n"
        "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
    )
    sock = _slow_request(port, head.encode() + b'{"scenario":')
    raw = _read_until_closed(sock)
    assert raw.startswith(b"HTTP/1.1 408 "), raw
    assert b"did not arrive within 0.5 s" in raw
    short_api.stop()  # the handler may still be waking to the closed connection: let it finish
    assert engine.runs == {}
    assert not short_api.error_log.exists()  # a client's stall is not the endpoint's error


def test_slow_clients_give_way_to_a_new_request(short_api: RunApi, engine: Engine) -> None:
    """With every slot held by clients that never finish, a new request is still answered."""
    port = short_api.port
    head = f"GET /api/run HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode()
    slow = [_slow_request(port, head) for _ in range(4)]
    client = Client(port, short_api.token)
    assert client.get("/api/run").status == 404  # answered, not queued behind them
    # The oldest gave way to the newcomer: the server closed it before its timeout.
    assert _read_until_closed(slow[0]) == b""
    run = started(client.post(), engine)
    assert run.wait(WAIT_S)
    for sock in slow[1:]:
        sock.close()


def test_bodies_that_never_finish_give_way_to_a_new_request(
    short_api: RunApi, engine: Engine
) -> None:
    """Every slot held by a POST whose headers are in but whose body never finishes (one
    process's way to lock everyone out) still leaves room: the oldest gives way, a new request
    is answered, and nothing is started or logged, for the one that gave way or for those whose
    clients then left mid-body."""
    port = short_api.port
    head = (
        f"POST /api/runs HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nExpect: 100-continue\r\n"
        f"Authorization: token {short_api.token}\r\n"
        "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
    ).encode()
    held = [_slow_request(port, head) for _ in range(4)]
    try:
        for sock in held:  # "100 Continue": the application has the headers, not the body
            assert sock.recv(100).startswith(b"HTTP/1.1 100 Continue")
            sock.sendall(b"{")
        probe = Client(port).get("/api/run")
        assert probe.status == 404, probe.raw
        assert _read_until_closed(held[0]) == b""  # gave way before its timeout
    finally:
        for sock in held:
            sock.close()
    short_api.stop()  # lets the handlers of the closed connections finish before the log is read
    assert engine.runs == {}
    assert not short_api.error_log.exists()


def test_a_declared_body_over_the_limit_is_413_at_once(api: RunApi, engine: Engine) -> None:
    """A Content-Length over MAX_BODY is answered 413 before any of the body is sent, not
    left to wait for a 408 while it holds a slot."""
    port = api.port
    head = (
        f"POST /api/runs HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {MAX_BODY + 1}\r\n\r\n"
    )
    sock = _slow_request(port, head.encode())
    sock.settimeout(3.0)  # well under the endpoint's 10 s timeouts
    raw = _read_until_closed(sock)
    assert raw.startswith(b"HTTP/1.1 413 "), raw
    assert f"at most {MAX_BODY}".encode() in raw
    assert engine.runs == {}


def test_unexpected_error_is_500_with_an_id_logged_without_key_or_body(
    tmp_path: Path,
) -> None:
    """An unexpected failure answers 500 with an error id; the log under INTERLOCK_HOME has that
    id and the traceback, 0600, and neither the key nor the request's body."""
    body = json.dumps(GOOD_BODY)

    def failing_start(choice: RunChoice) -> Run:
        raise RuntimeError(f"could not start with {STRIPE_KEY} for {body}")

    config = mock_config(tmp_path, STRIPE_SECRET_KEY=STRIPE_KEY)
    eng = Engine(config)
    server = endpoint(eng, config, port=0, start_run=failing_start).start()
    try:
        answer = Client(server.port, server.token).post(GOOD_BODY)
    finally:
        server.stop()
        eng.close()
    assert answer.status == 500
    error_id = answer.json()["error_id"]
    assert f"error {error_id}" in answer.error
    assert str(server.error_log) in answer.error
    assert STRIPE_KEY not in answer.raw.decode()
    assert server.error_log.is_relative_to(tmp_path / "home")
    assert server.error_log.stat().st_mode & 0o777 == 0o600
    logged = server.error_log.read_text()
    assert f"error {error_id}: POST '/api/runs'" in logged
    assert "Traceback" in logged
    assert "RuntimeError: could not start with [a key, withheld]" in logged
    assert STRIPE_KEY not in logged
    assert body not in logged


def test_requests_refused_before_the_host_check_are_never_logged(
    short_api: RunApi, caplog: pytest.LogCaptureFixture
) -> None:
    """Requests aiohttp's parser refuses (a bad Content-Length, a garbled line), as any web
    page can send them in a stream, get their 400 and leave no trace: not in the error log,
    which would grow without bound, nor on the terminal (the app's screen)."""
    port = short_api.port
    probes = [
        f"POST /api/runs HTTP/1.1\r\nHost: attacker.example:{port}\r\nContent-Length: abc\r\n\r\n",
        "GARBAGE\x01 / HTTP/1.1\r\n\r\n",
    ]
    for i in range(100):
        raw = _read_until_closed(_slow_request(port, probes[i % 2].encode()))
        assert raw.split(b"\r\n", 1)[0].endswith(b" 400 Bad Request"), raw
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert not short_api.error_log.exists()


def test_the_error_log_is_rate_limited_and_rotated(api: RunApi) -> None:
    """A burst of entries writes LOG_ENTRIES_PER_MINUTE of them and counts the rest; past
    MAX_LOG_BYTES the log moves to http-api.log.1, so it never grows without bound."""
    now = [1000.0]
    api._clock = lambda: now[0]
    for i in range(LOG_ENTRIES_PER_MINUTE + 30):
        api.append_to_error_log(f"entry {i}", "x")
    assert api.error_log.read_text().count("\nx\n") == LOG_ENTRIES_PER_MINUTE
    now[0] += 61.0
    api.append_to_error_log("after", "y")
    assert "after (30 entries withheld before this one" in api.error_log.read_text()
    big = "z" * (MAX_LOG_BYTES // 80)
    for _ in range(200):
        now[0] += 61.0
        api.append_to_error_log("big", big)
    assert api.error_log.stat().st_size <= MAX_LOG_BYTES
    rotated = api.error_log.with_name("http-api.log.1")
    assert rotated.stat().st_size <= MAX_LOG_BYTES
    assert rotated.stat().st_mode & 0o777 == 0o600


def test_connections_are_capped_under_the_file_limit(engine: Engine) -> None:
    """With a file limit that leaves room for 10 more descriptors past the headroom, the
    endpoint holds at most 10 connections, not 64 ("Too many open files" in the app)."""
    import os
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    in_use = len(os.listdir("/proc/self/fd"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (in_use + FD_HEADROOM + 10, hard))
    try:
        assert 1 <= connection_cap(64) <= 10
        assert connection_cap(64) < 64
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert connection_cap(64) == 64

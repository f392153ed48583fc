"""`serve`'s guard in-process, on a loopback port: which requests need the launch's token,
the words of a refusal, and the anti-framing headers on every answer (refusals and static
files too). No app is started: a request that passes the guard to `/ws` would start one,
so these stop at the guard or at the page. Chromium and another user are the e2e tests'
(tests/e2e/test_serve_browser.py)."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from interlock_demo.views.serve import FRAMING_HEADERS, HOST, LoopbackServer

TOKEN = "a-token-made-up-for-this-test"
UPGRADE = {
    "Connection": "Upgrade",
    "Upgrade": "websocket",
    "Sec-WebSocket-Version": "13",
    "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
async def mirror() -> AsyncIterator[tuple[LoopbackServer, str]]:
    """The mirror's aiohttp application on a free loopback port, and its base address."""
    port = _free_port()
    server = LoopbackServer(["--mock"], port, token=TOKEN)
    test_server = TestServer(await server._make_app(), host=HOST, port=port)
    await test_server.start_server()
    try:
        yield server, f"http://{HOST}:{port}"
    finally:
        await test_server.close()


async def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], str]:
    async with aiohttp.ClientSession() as session, session.get(url, headers=headers) as answer:
        return answer.status, dict(answer.headers), await answer.text()


@pytest.mark.parametrize(
    ("path", "upgrade"),
    [
        ("/", False),
        ("/?token=another", False),
        ("/ws?width=80&height=24", True),
        ("/ws/another?width=80&height=24", True),
        ("/download/some-key", False),
    ],
)
async def test_without_the_token_it_is_403_saying_where_it_is_printed(
    mirror: tuple[LoopbackServer, str], path: str, upgrade: bool
) -> None:
    """The page, the WebSocket and the download route refuse a request without this
    launch's token (or with another), saying where the address with it is printed; the
    refusal never repeats the token, and forbids framing like every answer."""
    server, base = mirror
    status, headers, text = await _get(base + path, UPGRADE if upgrade else None)
    assert status == 403
    what = "the app is driven" if path.startswith("/ws") else "this page is shown"
    assert text == (
        f"{what} only with this launch's token: open the address "
        f"http://127.0.0.1:{server.port}/?token=... that `interlock-demo serve` printed on "
        "the terminal it was started in (a new token each time it starts)"
    )
    assert TOKEN not in text
    assert {k: headers.get(k) for k in FRAMING_HEADERS} == FRAMING_HEADERS


async def test_the_page_with_the_token_passes_it_on_to_its_websocket(
    mirror: tuple[LoopbackServer, str],
) -> None:
    """With the token the page is served, with no framing allowed, and its terminal's
    WebSocket address carries the token in its path; the static files need none."""
    server, base = mirror
    assert server.url == f"{base}/?token={TOKEN}"
    status, headers, text = await _get(server.url)
    assert status == 200
    assert f'data-session-websocket-url="ws://127.0.0.1:{server.port}/ws/{TOKEN}"' in text
    assert {k: headers.get(k) for k in FRAMING_HEADERS} == FRAMING_HEADERS
    status, headers, _ = await _get(f"{base}/static/js/textual.js")
    assert status == 200
    assert headers["X-Frame-Options"] == "DENY"


async def test_a_token_is_made_anew_for_each_launch() -> None:
    """Two servers never share a token, and it is long enough not to be guessed."""
    first, second = LoopbackServer([], 1), LoopbackServer([], 1)
    assert first.token != second.token
    assert len(first.token) >= 40

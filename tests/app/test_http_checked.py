"""A run started over HTTP is the app's choice with what the body names changed: without
"checked" it keeps the app's checked column, and the app then holds what ran.

The endpoint is built the way `run_app` builds it (`http_api.for_view`), around the app
under Pilot; requests go through the stdlib `http.client`.
"""

from __future__ import annotations

import asyncio
import http.client
import json
from collections.abc import Mapping
from pathlib import Path

import pytest

from interlock_demo.core.columns import COLUMN_KINDS, OPTIONAL, shown_columns
from interlock_demo.settings.config import resolve
from interlock_demo.views.http_api import RunApi, for_view
from interlock_demo.views.tui.app import make_app
from interlock_demo.views.tui.widgets import MessageLine
from scenarios import SWITCHES

WAIT_S = 30.0


def _post(api: RunApi, body: Mapping[str, object]) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", api.port, timeout=10)
    try:
        conn.request(
            "POST",
            "/api/runs",
            body=json.dumps(body),
            headers={
                "Host": f"127.0.0.1:{api.port}",
                "Content-Type": "application/json",
                "Authorization": f"token {api.token}",
            },
        )
        return conn.getresponse().status
    finally:
        conn.close()


@pytest.mark.parametrize("checked", [True, False])
async def test_post_without_checked_keeps_the_apps_column(tmp_path: Path, checked: bool) -> None:
    """With the column shown (or hidden) in the app, a POST that leaves "checked" out runs
    with the same columns and leaves the app's setting alone."""
    app = make_app(
        resolve(mode="mock", env={"INTERLOCK_HOME": str(tmp_path)}),
        optional=OPTIONAL if checked else frozenset(),
    )
    api = for_view(app, port=0)
    async with app.run_test(size=(160, 45)) as pilot:
        api.start()
        try:
            assert await asyncio.to_thread(_post, api, {"scenario": "revoked"}) == 202
            run = app.engine.current
            assert run is not None
            assert await asyncio.to_thread(run.wait, WAIT_S)
            await pilot.pause()
            assert app.run_on_screen is run
        finally:
            api.stop()
    expected = ["standard", "interlock", "checked"] if checked else ["standard", "interlock"]
    assert [c.name for c in run.columns] == expected
    assert app.optional == (OPTIONAL if checked else frozenset())


async def test_enter_after_a_post_in_another_mode_runs_the_mode_on_screen(tmp_path: Path) -> None:
    """A POSTed run in another mode puts that mode on screen (a mock run is labelled MOCK);
    the next enter then runs in the mode the screen shows, not the engine's earlier one."""
    app = make_app(
        resolve(mode="offline", env={"INTERLOCK_HOME": str(tmp_path)}), optional=frozenset()
    )
    api = for_view(app, port=0)
    async with app.run_test(size=(160, 45)) as pilot:
        api.start()
        try:
            body = {"scenario": "revoked", "mode": "mock"}
            assert await asyncio.to_thread(_post, api, body) == 202
            posted = app.engine.current
            assert posted is not None and posted.mode == "mock"
            assert await asyncio.to_thread(posted.wait, WAIT_S)
            await pilot.pause()
            assert app.run_on_screen is posted
            assert app.config.mode == "mock"

            await pilot.press("enter")
            await pilot.pause()
            pressed = app.run_on_screen
            assert pressed is not None and pressed is not posted
            assert pressed.mode == "mock", "enter ran another mode than the screen shows"
            assert await asyncio.to_thread(pressed.wait, WAIT_S)
        finally:
            api.stop()


async def test_a_post_runs_the_apps_choice_with_what_it_names_changed(tmp_path: Path) -> None:
    """The app's choice is what the engine runs when the HTTP endpoint starts a run: a POST
    naming a scenario and a mode keeps the app's emulated switch and checked column, and
    afterwards the app's choice is exactly the one that ran (mode, scenario, switches,
    columns), on screen and for the next enter."""
    app = make_app(
        resolve(mode="offline", env={"INTERLOCK_HOME": str(tmp_path)}), optional=OPTIONAL
    )
    api = for_view(app, port=0)
    async with app.run_test(size=(160, 45)) as pilot:
        api.start()
        try:
            [no_lookup] = [s for s in SWITCHES if s.field == "no_lookup"]
            app.set_switch(no_lookup)
            await pilot.pause()
            body = {"scenario": "after-answer", "mode": "mock"}
            assert await asyncio.to_thread(_post, api, body) == 202
            run = app.engine.current
            assert run is not None
            assert await asyncio.to_thread(run.wait, WAIT_S)
            await pilot.pause()
            assert app.run_on_screen is run
            ran = (run.mode, run.scenario, run.emulated, [c.name for c in run.columns])
            chosen = (
                app.config.mode,
                app.scenario,
                app.config.switches.names,
                shown_columns(app.optional),
            )
            assert ran == chosen == ("mock", "after-answer", [no_lookup.env], list(COLUMN_KINDS))

            await pilot.press("enter")
            await pilot.pause()
            pressed = app.run_on_screen
            assert pressed is not None and pressed is not run
            assert (pressed.mode, pressed.scenario, pressed.emulated) == ran[:3]
            assert await asyncio.to_thread(pressed.wait, WAIT_S)
        finally:
            api.stop()


async def test_the_first_message_shows_where_to_start_a_run_with_the_token(tmp_path: Path) -> None:
    """With --http, the app's first message names the JSON's address and the address that
    starts a run, the endpoint's token in it: the one place the token is shown."""
    app = make_app(resolve(mode="mock", env={"INTERLOCK_HOME": str(tmp_path)}))
    api = for_view(app, port=0)
    app.show_endpoint(api.url, api.control_url)
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.pause()
        shown = str(app.query_one(MessageLine).render())
    assert shown == (
        f"JSON of the run: {api.url}/api/run · start a run: POST {api.url}/api/runs?token="
        f"{api.token}"
    )

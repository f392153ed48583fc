"""Every line whole at the three projector widths: the mode banner in every mode, with every
switch and every reason for falling back, the header and the story, and every message the
app says (palette commands, keys, refusals while a run goes), each drawn at 160, 100 and
80 columns and read back from the screen."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from rich.cells import cell_len
from textual.pilot import Pilot

from interlock_demo.settings.config import DemoConfig, resolve
from interlock_demo.views.tui.app import DemoApp
from interlock_demo.views.tui.widgets import MessageLine, ModeBanner, RunHeader
from interlock_demo.views.tui.widgets.mode_banner import banner_parts, fitting
from scenarios import SCENARIOS, SWITCHES
from tests.app.test_app import Hold, finish, message, new_app, screen_text, settle, start

SIZES = [(160, 45), (100, 30), (80, 24)]
STRIPE = {"STRIPE_SECRET_KEY": "sk_test_" + "0" * 24}
ANTHROPIC = {"ANTHROPIC_API_KEY": "sk-ant-test"}
TEMPORAL_MISSING = "the Temporal engine needs temporalio: pip install 'interlock-demo[temporal]'"


def configs(home: Path) -> list[tuple[str, DemoConfig]]:
    """Every kind of banner: live; offline chosen, or fallen back to for want of either key
    or both; mock; offline and mock with each set of emulated switches."""
    base = {"INTERLOCK_HOME": str(home)}
    found: list[tuple[str, DemoConfig]] = [
        ("live", resolve(mode="live", env={**base, **STRIPE, **ANTHROPIC})),
        ("live-long-model", resolve(mode="live", env={**base, **STRIPE, **ANTHROPIC})),
    ]
    for name, keys in (("no-keys", {}), ("no-stripe", ANTHROPIC), ("no-anthropic", STRIPE)):
        found.append((f"fallback-{name}", resolve(env={**base, **keys})))
    for mode, n in itertools.product(("offline", "mock"), range(len(SWITCHES) + 1)):
        for on in itertools.combinations(SWITCHES, n):
            flags = {s.field: True for s in on}
            found.append((f"{mode}-{n}", resolve(mode=mode, env=base, **flags)))
    found.append(("fallback-switched", resolve(env=base, **{s.field: True for s in SWITCHES})))
    return found


def region_text(app: DemoApp, widget: Any) -> str:
    """The words the widget's region of the screen shows, its rows joined by spaces."""
    region = widget.region
    rows = screen_text(app).splitlines()[region.y : region.y + region.height]
    return " ".join(" ".join(rows).split())


def assert_whole(app: DemoApp, said: str, widget: Any) -> None:
    """`said` is on screen in the widget's rows, every word of it, and nothing was cut."""
    shown = region_text(app, widget)
    assert " ".join(said.split()) in shown, f"cut at {app.size.width}: {said!r} shows {shown!r}"
    assert "…" not in shown, f"cut at {app.size.width}: {shown!r}"


@pytest.mark.parametrize("width", [w for w, _ in SIZES])
def test_every_banner_fits_whole_and_keeps_what_must_stay(
    tmp_path: Path, width: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At each width, each banner's wording fits the line (its padding aside) and still
    names the mode and every emulated switch that is on."""
    for name, config in configs(tmp_path):
        if name == "live-long-model":
            monkeypatch.setenv("INTERLOCK_MODEL", "claude-a-very-long-model-name-20991231-v9")
        else:
            monkeypatch.delenv("INTERLOCK_MODEL", raising=False)
        text = fitting(banner_parts(config), width - 2)
        assert cell_len(text) <= width - 2, (name, text)
        assert config.run_mode.banner in text, (name, text)
        on = [s for s in SWITCHES if getattr(config.switches, s.field)]
        if on:
            assert "EMULATED:" in text, (name, text)
            for s in on:
                assert s.short in text, (name, text)
        if width == 160 and name.startswith("fallback"):
            assert "live needs" in text, (name, text)  # at 160 the whole reason


# Many apps, or every palette command twice: a minute on a loaded machine, so a wider bound.
@pytest.mark.timeout(300)
@pytest.mark.parametrize("size", SIZES, ids=str)
async def test_the_banner_header_and_story_are_whole_on_screen(
    tmp_path: Path, size: tuple[int, int]
) -> None:
    """Drawn by the app at each size, in each mode with its longest banner (every switch on,
    live lacking both keys), the banner's row shows its text uncut, and so do the header and
    the story for every scenario. (Every banner's wording is fitted in the test above.)"""
    drawn = ("live", "fallback-no-keys", "fallback-switched", f"mock-{len(SWITCHES)}")
    for name, config in configs(tmp_path):
        if name not in drawn:
            continue
        app = new_app(config)
        async with app.run_test(size=size) as pilot:
            await settle(pilot)
            banner = app.query_one(ModeBanner)
            assert_whole(app, banner.text, banner)
            for sc in SCENARIOS.values():
                await pilot.press(sc.key)
                await settle(pilot)
                header = app.query_one(RunHeader)
                assert "…" not in region_text(app, header), (name, sc.id)
                assert "…" not in region_text(app, app.query_one("#story")), (name, sc.id)


async def _say_everything(app: DemoApp, pilot: Pilot[Any]) -> list[str]:
    """Every palette command twice (on, then off), each message checked whole on screen."""
    said = []
    line = app.query_one(MessageLine)
    for name, _, run_it in list(app.palette_commands()):
        if name == "run: start":
            continue
        for _ in range(2):
            run_it()
            await settle(pilot)
            said.append(message(app))
            assert_whole(app, message(app), line)
    return said


@pytest.mark.timeout(300)
@pytest.mark.parametrize("size", SIZES, ids=str)
async def test_every_message_is_whole_at_each_width(
    tmp_path: Path, size: tuple[int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The start hint (with the JSON endpoint's address), every palette command's answer
    (live refused for want of keys, Temporal off, switches, modes, zoom, the screenshot's
    path) and every refusal while a run goes show whole on the message line."""
    monkeypatch.chdir(tmp_path)  # as on stage: INTERLOCK_HOME under the working folder
    home = tmp_path / "home"
    config = resolve(env={"INTERLOCK_HOME": str(home)})  # offline: no keys here
    hold = Hold()
    app = new_app(config, hold=hold)
    # The JSON endpoint's addresses as `run_app` shows them, its token as long as any.
    app.show_endpoint("http://127.0.0.1:8787", "http://127.0.0.1:8787/api/runs?token=" + "t" * 22)
    app.temporal_missing = TEMPORAL_MISSING
    try:
        async with app.run_test(size=size) as pilot:
            await settle(pilot)
            line = app.query_one(MessageLine)
            assert_whole(app, message(app), line)
            said = await _say_everything(app, pilot)
            assert any(m.startswith("Live is off:") for m in said), said
            assert any(m.startswith("Temporal is off:") for m in said), said
            assert any(m.startswith("Screenshot saved:") for m in said), said
            await pilot.press("m")  # mock: a run that holds after the kill, before the outage
            await settle(pilot)
            run = await start(pilot, "1")
            await hold.reached(pilot, len(run.columns))
            for key in ("1", "c", "m", "t", "p", "a"):
                await pilot.press(key)
                await settle(pilot)
                assert_whole(app, message(app), line)
            hold.release()
            await finish(pilot, run)
    finally:
        hold.release()

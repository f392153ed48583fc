"""`interlock-demo screenshots`: the app's screens as SVG (and PNG) files for the talk's notes.

Runs the app headless at 160x45 in offline mode (real worker processes, the loopback Stripe
emulator, the scripted model) with short timings, with the checked column, and saves the
idle screen and the finished run of each scenario; for the first scenario also Interlock's
claim-wait countdown mid-wait (`<scenario>-countdown`) and the finished run at 100x30 and
80x24, the smaller projectors (`<scenario>-100x30`, `<scenario>-80x24`). This is the only
command that writes
to `results/screenshots/`. A PNG is written next to each SVG when `rsvg-convert` is found.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from interlock_demo.core.columns import OPTIONAL
from interlock_demo.core.run import ColumnState, Run
from interlock_demo.errors import KeyRefusedError, ScreenshotError, UsageError
from interlock_demo.exit_codes import ExitCode
from interlock_demo.output import refuse_link, write_output
from interlock_demo.settings.config import resolve
from interlock_demo.settings.environment import child_env
from interlock_demo.stopping import Stopped, on_stop, stopped
from interlock_demo.views.tui.svg import svg_keeping_spaces
from scenarios import SCENARIOS
from workers.protocol.switches import Switches

if TYPE_CHECKING:
    from textual.pilot import Pilot

DEFAULT_OUT = Path("results/screenshots")
SIZE = (160, 45)
SMALL_SIZES = ((100, 30), (80, 24))
# Short, so a run takes about fifteen seconds, yet with room for the emulator's answers on
# a loaded machine: with a 1 s Stripe timeout (and the least claim it allows, 6 s) calls
# took up to 1.03 s at load 5 to 8, and a worker whose read of the payment took longer
# exited 1 where it was to be killed, failing the command.
SHORT_TIMING = {"INTERLOCK_CLAIM_TTL": "10", "INTERLOCK_STRIPE_TIMEOUT": "5"}
RUN_TIMEOUT_S = 120.0


def screenshot_env(home: Path, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for the screenshot runs: short timings, no emulated switches, `home`."""
    env = os.environ if env is None else env
    switches = list(Switches.ENV_NAMES.values())
    clean = {k: v for k, v in env.items() if k not in switches}
    clean.update(SHORT_TIMING)
    clean["INTERLOCK_HOME"] = str(home)
    return clean


async def take(
    out: Path,
    scenario_ids: Sequence[str],
    env: Mapping[str, str] | None = None,
    saved: list[Path] | None = None,
) -> list[Path]:
    """Save `idle.svg` and `<scenario>.svg` for each scenario under `out`; returns the SVGs,
    each also added to `saved` as soon as it is written.

    The runs keep their state in a fresh INTERLOCK_HOME, removed afterwards, so that the
    pictures do not depend on earlier runs (receipt numbers, chain lengths). A stop signal
    (`interlock_demo.stopping`) closes the app's engine: its workers are killed, and the
    run that ended so raises `ScreenshotError`, `saved` holding what was written.
    """
    saved = [] if saved is None else saved
    with tempfile.TemporaryDirectory(prefix="interlock-screenshots-") as home:
        await _take(out, scenario_ids, screenshot_env(Path(home), env), saved)
        return saved


async def _take(
    out: Path, scenario_ids: Sequence[str], env: Mapping[str, str], saved: list[Path]
) -> None:
    from interlock_demo.views.tui.app import make_app

    config = resolve(mode="offline", env=env)
    out.mkdir(parents=True, exist_ok=True)
    app = make_app(config, optional=OPTIONAL)
    loop = asyncio.get_running_loop()
    # A stop closes the engine on the loop, not in the signal handler (the app's handlers
    # call the engine there): the run going ends as its workers die and no other starts,
    # so the steps end with `ScreenshotError` and the app is torn down as on any error.
    try:
        with on_stop(lambda: loop.call_soon_threadsafe(app.engine.close), interrupt=False):
            async with app.run_test(size=SIZE) as pilot:
                await _steps(pilot, out, scenario_ids, saved)
    finally:
        app.engine.close()  # no worker or emulator outlives the command, even on an error


async def _steps(
    pilot: Pilot[Any], out: Path, scenario_ids: Sequence[str], saved: list[Path]
) -> None:
    """Drive the app through the scenarios, adding each screen saved to `saved`."""
    from interlock_demo.views.tui.app import DemoApp

    app = pilot.app
    assert isinstance(app, DemoApp)
    await pilot.pause()
    saved.append(_save(out / "idle.svg", app.export_screenshot()))
    for sid in scenario_ids:
        sys.stderr.write(f"screenshots: running {sid}\n")
        await pilot.press(SCENARIOS[sid].key, "enter")
        await pilot.pause()
        run = app.run_on_screen
        if run is None or run.scenario != sid:
            raise ScreenshotError(f"{sid}: the run did not start")
        first = sid == scenario_ids[0]
        if first and await _countdown_shows(pilot, run):
            saved.append(_save(out / f"{sid}-countdown.svg", app.export_screenshot()))
        if not await asyncio.to_thread(run.wait, RUN_TIMEOUT_S):
            raise ScreenshotError(f"{sid}: the run did not finish in {RUN_TIMEOUT_S:g} s")
        if run.error:
            raise ScreenshotError(f"{sid}: the run failed: {run.error}")
        await pilot.pause()
        await pilot.wait_for_scheduled_animations()
        await pilot.pause()
        saved.append(_save(out / f"{sid}.svg", app.export_screenshot()))
        for width, height in SMALL_SIZES if first else ():
            await pilot.resize_terminal(width, height)
            await pilot.pause()
            await pilot.wait_for_scheduled_animations()
            await pilot.pause()
            name = f"{sid}-{width}x{height}.svg"
            saved.append(_save(out / name, app.export_screenshot()))
        await pilot.resize_terminal(*SIZE)
    await pilot.press("q")


async def _countdown_shows(pilot: Pilot[Any], run: Run) -> bool:
    """Wait until Interlock's countdown is on screen and has moved; False if the run ended.

    The scenarios that crash before the send make Interlock wait out the dead worker's
    claim; the control (after the answer) takes the claim at once and has no countdown.
    """
    from textual.widgets import Digits

    from interlock_demo.views.tui.widgets import ColumnPane

    pane = pilot.app.query_one("#col-interlock", ColumnPane)
    digits = pane.query_one(Digits)
    first: str | None = None
    while not run.finished:
        if pane.shown_state == ColumnState.WAITING:
            value = str(digits.value)
            if first is None:
                first = value
            elif value != first:
                return True
        await pilot.pause(0.05)
    return False


def _save(path: Path, svg: str) -> Path:
    return write_output(path, svg_keeping_spaces(svg))


def to_png(svg: Path) -> Path | None:
    """Convert an SVG to a PNG next to it with `rsvg-convert`; None when it is missing."""
    tool = shutil.which("rsvg-convert")
    if tool is None:
        return None
    png = svg.with_suffix(".png")
    refuse_link(png)  # before the drawing, not after it
    # An SVG saved by an older version, or by hand, may not say it yet.
    text = svg_keeping_spaces(svg.read_text(encoding="utf-8"))
    # Its PNG on stdout, written here: `-o` would follow a link planted at the PNG's name.
    drawn = subprocess.run(
        [tool], input=text.encode(), env=child_env(), check=True, capture_output=True
    )
    return write_output(png, drawn.stdout)


def main(out: Path = DEFAULT_OUT, scenario: str = "all") -> int:
    """The command: returns 0; 2 for bad configuration; 3 when a run could not finish."""
    ids = list(SCENARIOS) if scenario == "all" else [scenario]
    saved: list[Path] = []
    try:
        svgs = asyncio.run(take(out, ids, saved=saved))
    except (UsageError, KeyRefusedError) as e:
        print(f"interlock-demo screenshots: {e}", file=sys.stderr)
        return ExitCode.USAGE
    except ScreenshotError as e:
        _raise_if_stopped(saved, out)
        print(f"interlock-demo screenshots: {e}", file=sys.stderr)
        return ExitCode.UNFINISHED
    _raise_if_stopped(saved, out)
    try:
        written = pngs_for(svgs)
    except Stopped as stop:
        done = f"wrote {len(svgs)} SVG files to {out}; stopped making their PNGs"
        raise stop.having(done) from None
    for line in written:
        print(line)
    if shutil.which("rsvg-convert") is None:
        print(
            "(no PNGs: rsvg-convert not found; install librsvg2-bin. Older PNGs next to "
            "these SVGs were removed, so none shows an earlier screen.)",
            file=sys.stderr,
        )
    return ExitCode.OK


def _raise_if_stopped(saved: Sequence[Path], out: Path) -> None:
    """`Stopped`, saying which files were written, when a stop signal ended the runs."""
    stop = stopped()
    if stop is not None:
        names = ", ".join(p.name for p in saved) or "nothing"
        raise stop.having(f"its workers stopped; wrote {names} to {out}")


def pngs_for(svgs: Sequence[Path]) -> list[Path]:
    """Each SVG and its PNG; without `rsvg-convert` an older PNG is removed, never left stale."""
    written: list[Path] = []
    for svg in svgs:
        written.append(svg)
        png = to_png(svg)
        if png is not None:
            written.append(png)
        else:
            svg.with_suffix(".png").unlink(missing_ok=True)
    return written

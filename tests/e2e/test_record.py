"""`interlock-demo record`: the app through a scenario on a real pseudo-terminal, written as
an asciinema v2 recording and read back with asciinema's own parser (what `asciinema play`
reads)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from asciinema import asciicast

from tests.e2e.test_cli import _env, _run
from tests.helpers.headless import ROOT

ASCIINEMA = Path(sys.executable).parent / "asciinema"
PLAYED = "ASCIINEMA-PLAY-EXITED"

# The verdict strip at the end of revoked: what the recording must end on. Not the app's
# first scenario, so the recorder has to pick it before it runs.
VERDICT_WORDS = ("despite the revocation", "saw the revocation: refused")


@pytest.mark.parametrize(
    ("options", "size", "picked"),
    [
        (("--no-checked",), (160, 45), "[2] Approval revoked during the outage"),
        (("--size", "100x30"), (100, 30), "[2] Revoked"),
    ],
    ids=["160x45-two-columns", "100x30"],
)
def test_record_writes_a_cast_that_asciinema_reads_back_with_the_verdicts(
    tmp_path: Path, options: tuple[str, ...], size: tuple[int, int], picked: str
) -> None:
    """A mock run of revoked is recorded at 160x45 without the checked column, and at a
    projector's 100x30 with all three: asciinema reads the header and the output events,
    and the frames show that scenario finished with its verdict strip."""
    out = tmp_path / "talk" / "revoked.cast"
    cmd = [sys.executable, "-m", "interlock_demo.cli", "record", "--scenario", "revoked"]
    done = subprocess.run(
        [*cmd, "--mock", *options, "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=_env(tmp_path),
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"asciinema play {out}" in done.stdout
    with asciicast.open_from_url(str(out)) as cast:
        header = cast.v2_header
        events = list(cast.events())
    assert header["version"] == 2
    assert (header["width"], header["height"]) == size
    assert isinstance(header["timestamp"], int)
    assert events, "the recording has no events"
    assert {e[1] for e in events} == {"o"}
    times = [e[0] for e in events]
    assert times == sorted(times), "the events are not in time order"
    shown = "".join(e[2] for e in events)
    for words in (*VERDICT_WORDS, picked, "finished"):
        assert words in shown, f"{words!r} never shown in the recording"
    # The third column's pane is in the recording unless it was left out.
    assert ("Hand-written check" in shown) == ("--no-checked" not in options)
    # The recording ends with the app's teardown after q (not a kill): mouse reporting
    # off, the cursor shown; it never enters the alternate screen, so it leaves none.
    assert {"\x1b[?1000l", "\x1b[?25h"} <= set(re.findall(r"\x1b\[\?\d+[hl]", events[-1][2]))
    assert "\x1b[?1049" not in shown


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_asciinema_play_ends_on_the_held_verdicts_and_gives_the_terminal_back(
    tmp_path: Path,
) -> None:
    """Played by the real `asciinema play` in a tmux pane of the cast's size, a recording
    ends on its verdict strip, held for --hold seconds, with no dead JSON address in it;
    once the player exits the pane is out of the alternate screen (none was entered),
    mouse reporting is off and the cursor shows."""
    hold = 2.5
    out = tmp_path / "revoked.cast"
    options = ["--mock", "--size", "100x30", "--hold", str(hold), "--out", str(out)]
    done = _run(["record", "--scenario", "revoked", *options], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    with asciicast.open_from_url(str(out)) as cast:
        events = list(cast.events())
    shown = "".join(e[2] for e in events)
    assert "127.0.0.1" not in shown and "JSON of the run" not in shown
    # The verdicts' last line is painted, then nothing but the teardown for the hold.
    painted = max(i for i, e in enumerate(events) if "saw the revocation: refused" in e[2])
    assert painted < len(events) - 1
    # Held exactly so long (the cast's times are written to the microsecond).
    assert events[-1][0] - events[-2][0] == pytest.approx(hold, abs=1e-5)
    assert "saw the revocation" not in events[-1][2]
    socket = f"interlock-record-{os.getpid()}-{tmp_path.name}"
    env = {k: v for k, v in os.environ.items() if k != "TMUX"}

    def tmux(*args: str) -> str:
        return subprocess.run(
            ["tmux", "-L", socket, *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout

    # -i 0.1: every pause, the hold too, plays in a tenth of a second; the cast keeps its times.
    play = f"{ASCIINEMA} play -i 0.1 {out}; echo {PLAYED} $?; sleep 60"
    tmux("new-session", "-d", "-s", "play", "-x", "100", "-y", "30", play)
    socket_path = Path(tmux("display-message", "-p", "#{socket_path}").strip())
    try:
        deadline = time.monotonic() + 60
        screen = ""
        while PLAYED not in screen and time.monotonic() < deadline:
            time.sleep(0.1)  # polling another process's screen: there is no event to wait on
            screen = tmux("capture-pane", "-p", "-t", "play")
        assert f"{PLAYED} 0" in screen, screen
        flags = tmux(
            "display-message",
            "-p",
            "-t",
            "play",
            "#{alternate_on} #{mouse_any_flag} #{cursor_flag}",
        )
    finally:
        subprocess.run(
            ["tmux", "-L", socket, "kill-server"], env=env, capture_output=True, timeout=10
        )
        socket_path.unlink(missing_ok=True)  # tmux leaves the socket file behind
    assert flags.split() == ["0", "0", "1"], f"alternate, mouse, cursor: {flags}"
    lines = screen.splitlines()
    standard = [line for line in lines if line.startswith(" Standard ")]
    interlock = [line for line in lines if line.startswith(" Interlock ")]
    assert len(standard) == len(interlock) == 1, screen
    assert "$20.00" in standard[0] and "despite the revocation" in standard[0], screen
    assert "$0.00" in interlock[0] and "saw the revocation: refused" in interlock[0], screen
    assert "127.0.0.1" not in screen, screen


@pytest.mark.parametrize("size", ["60x20", "100", "wide", "100x9000"])
def test_record_refuses_a_size_the_app_cannot_lay_out(tmp_path: Path, size: str) -> None:
    """A size below the app's smallest layout, or not COLSxROWS, exits 2 saying what to
    give, and writes nothing."""
    out = tmp_path / "revoked.cast"
    done = _run(
        ["record", "--scenario", "revoked", "--mock", "--size", size, "--out", str(out)],
        tmp_path,
    )
    assert done.returncode == 2
    assert "--size" in done.stderr and "such as 100x30" in done.stderr
    assert not out.exists()


@pytest.mark.parametrize("hold", ["-1", "soon", "nan", "601"])
def test_record_refuses_a_hold_that_is_not_seconds_to_wait(tmp_path: Path, hold: str) -> None:
    """--hold below 0, above 600 s or not a number exits 2 saying what to give, and writes
    nothing."""
    out = tmp_path / "revoked.cast"
    done = _run(
        ["record", "--scenario", "revoked", "--mock", "--hold", hold, "--out", str(out)], tmp_path
    )
    assert done.returncode == 2
    assert "--hold" in done.stderr and "such as 5" in done.stderr
    assert not out.exists()


def test_record_needs_a_scenario_and_a_file(tmp_path: Path) -> None:
    """Without --scenario or --out the command exits 2 and writes nothing."""
    done = _run(["record", "--mock"], tmp_path)
    assert done.returncode == 2
    assert "--scenario" in done.stderr

"""`interlock-demo record`: the app through a scenario on a real pseudo-terminal, written as
an asciinema v2 recording and read back with asciinema's own parser (what `asciinema play`
reads)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from asciinema import asciicast

from tests.e2e.test_cli import _env
from tests.helpers.headless import ROOT

# The verdict strip at the end of revoked: what the recording must end on. Not the app's
# first scenario, so the recorder has to pick it before it runs.
VERDICT_WORDS = ("despite the revocation", "saw the revocation: refused")


def test_record_writes_a_cast_that_asciinema_reads_back_with_the_verdicts(
    tmp_path: Path,
) -> None:
    """A mock run of revoked is recorded at 160x45: asciinema reads the header and the
    output events, and the frames show that scenario finished with its verdict strip."""
    out = tmp_path / "talk" / "revoked.cast"
    cmd = [sys.executable, "-m", "interlock_demo.cli", "record", "--scenario", "revoked"]
    done = subprocess.run(
        [*cmd, "--mock", "--out", str(out)],
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
    assert (header["width"], header["height"]) == (160, 45)
    assert isinstance(header["timestamp"], int)
    assert events, "the recording has no events"
    assert {e[1] for e in events} == {"o"}
    times = [e[0] for e in events]
    assert times == sorted(times), "the events are not in time order"
    shown = "".join(e[2] for e in events)
    for words in (*VERDICT_WORDS, "[2] Approval revoked during the outage", "finished"):
        assert words in shown, f"{words!r} never shown in the recording"
    # The recording ends with the app giving the terminal back (q, not a kill).
    assert shown.rfind("\x1b[?1049l") > shown.rfind("retried blindly")


def test_record_needs_a_scenario_and_a_file(tmp_path: Path) -> None:
    """Without --scenario or --out the command exits 2 and writes nothing."""
    done = subprocess.run(
        [sys.executable, "-m", "interlock_demo.cli", "record", "--mock"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=_env(tmp_path),
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "--scenario" in done.stderr

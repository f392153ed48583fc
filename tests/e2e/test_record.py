"""`interlock-demo record`: the app through a scenario on a real pseudo-terminal, written as
an asciinema v2 recording and read back with asciinema's own parser (what `asciinema play`
reads)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from asciinema import asciicast

from tests.e2e.test_cli import _env, _run
from tests.helpers.headless import ROOT

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
    # The recording ends with the app giving the terminal back (q, not a kill).
    assert shown.rfind("\x1b[?1049l") > shown.rfind("retried blindly")


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


def test_record_needs_a_scenario_and_a_file(tmp_path: Path) -> None:
    """Without --scenario or --out the command exits 2 and writes nothing."""
    done = _run(["record", "--mock"], tmp_path)
    assert done.returncode == 2
    assert "--scenario" in done.stderr

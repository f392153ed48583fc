"""`interlock-demo record`: the app through one scenario, as an asciinema v2 recording.

The speaker's backup: if the live run cannot happen on stage, `asciinema play FILE.cast`
replays a real one. The app runs as its own process on a pseudo-terminal of a fixed size;
the recorder presses the scenario's key and enter, waits for the run's end (the app's own
JSON of the run on loopback, `--http`, then the screen redrawn with it), quits with q and
writes what the terminal received, with the time each piece came.

The cast ends on the verdicts, held for `hold` seconds, and leaves them on the player's
screen: the app draws in the alternate screen and leaves it when it quits, which would
blank the player's terminal as the cast ends, so the cast draws on the main screen
instead (the app's switch to the alternate screen becomes a clear screen, its switch back
is dropped). The rest of the app's teardown stays, after the hold: it turns mouse
reporting, bracketed paste, focus events and the keyboard protocol off and shows the
cursor again, all of which the cast turned on in the player's terminal. The cast then
puts the cursor below the last frame, where the shell's prompt comes back. The app is told
it is recorded (`--recorded`) and leaves out its JSON address, which is dead once the
recording is over.
"""

from __future__ import annotations

import codecs
import fcntl
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import termios
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from interlock_demo.core.columns import OPTIONAL, ColumnKind, optional_flags
from interlock_demo.engine import RunChoice
from interlock_demo.engine.supervisor import kill_tree
from interlock_demo.exit_codes import ExitCode
from interlock_demo.layout import LARGEST, WIDE
from interlock_demo.output import SymlinkRefusedError, refuse_link, replacing
from interlock_demo.settings.environment import demo_env
from interlock_demo.settings.private import PRIVATE_UMASK
from interlock_demo.stopping import Stopped
from scenarios import SCENARIOS

START_TIMEOUT_S = 60.0
RUN_TIMEOUT_S = 180.0
QUIT_TIMEOUT_S = 30.0
POLL_S = 0.1
# The app has painted its last frame once it has written nothing for this long: q is
# pressed then, so everything after it is the app's teardown and nothing of the frame.
QUIET_S = 0.5
# Past this the app is taken as settled even if it keeps painting (a blinking cursor).
SETTLE_TIMEOUT_S = 5.0
# The app's alternate screen, and what the cast does instead (see the module docstring).
CAST_REPLACES = {"\x1b[?1049h": "\x1b[H\x1b[2J", "\x1b[?1049l": ""}


class RecordError(Exception):
    """The recording could not be made; the message says why and what to do."""


class _Pty:
    """What the app's terminal received, with the time of each piece since the start."""

    def __init__(self, master: int) -> None:
        self.master = master
        self.start = time.monotonic()
        self.events: list[tuple[float, str]] = []
        self.changed = threading.Condition()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:  # EIO: the app has exited and closed the terminal
                data = b""
            text = decoder.decode(data, final=not data)
            with self.changed:
                if text:
                    self.events.append((time.monotonic() - self.start, text))
                self.changed.notify_all()
            if not data:
                return

    def wait_for(self, text: str, since: int, timeout: float) -> bool:
        """Wait until the output after event `since` contains `text`; False on timeout."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while text not in "".join(t for _, t in self.events[since:]):
                left = deadline - time.monotonic()
                if left <= 0 or not self.thread.is_alive():
                    return False
                self.changed.wait(left)
        return True

    def wait_quiet(self, quiet: float, timeout: float) -> int:
        """Wait until the app has written nothing for `quiet` seconds (at most `timeout`);
        the number of events then."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while True:
                count = len(self.events)
                last = self.events[-1][0] + self.start if self.events else self.start
                left = min(last + quiet, deadline) - time.monotonic()
                if left <= 0 or not self.thread.is_alive():
                    return count
                self.changed.wait(left)

    def write(self, data: bytes) -> None:
        """Type `data` into the app's terminal."""
        os.write(self.master, data)


VERDICT_LINE = "Standard  "


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _current_run(url: str) -> dict[str, Any] | None:
    """The app's current run as its JSON says it; None when there is none yet or no answer."""
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            doc = json.load(answer)
    except (urllib.error.URLError, OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and "status" in doc else None


def _wait_finished(
    url: str, proc: subprocess.Popen[bytes], timeout: float
) -> dict[str, Any] | None:
    """Poll the app's run until it is no longer running; None on timeout or exit."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        run = _current_run(url)
        if run is not None and run["status"] != "running":
            return run
        time.sleep(POLL_S)
    return None


def record(
    scenario: str,
    mode: str,
    out: Path,
    *,
    optional: frozenset[ColumnKind] = OPTIONAL,
    size: tuple[int, int] = LARGEST,
    hold: float,
    env: Mapping[str, str] | None = None,
    progress: TextIO | None = None,
) -> Path:
    """Record the app running `scenario` in `mode` ("offline" or "mock") into `out`, its
    verdicts held on screen for `hold` seconds at the end; `progress` is told when the run
    starts."""
    width, height = size
    port = _free_port()
    cmd = [sys.executable, "-m", "interlock_demo.cli", f"--{mode}", "--http", str(port)]
    cmd.append("--recorded")
    # Each optional column has its flag, named after it (`--no-checked`).
    cmd += [f"--no-{name}" for name, on in optional_flags(optional).items() if not on]
    parent = os.environ if env is None else env
    # The demo itself, offline or mock: its settings and no key. The terminal it draws for
    # is the recording's (the cast says xterm-256color), in the colours ours has.
    app_env = demo_env(parent=parent)
    term = parent.get("TERM", "")
    app_env["TERM"] = "xterm-256color" if term in ("", "dumb") else term
    if parent.get("COLORTERM"):
        app_env["COLORTERM"] = parent["COLORTERM"]
    master, slave = os.openpty()
    proc: subprocess.Popen[bytes] | None = None
    try:
        try:
            fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", height, width, 0, 0))
            proc = subprocess.Popen(
                cmd,
                stdin=slave,
                stdout=slave,
                stderr=slave,
                env=app_env,
                start_new_session=True,
                umask=PRIVATE_UMASK,
            )
        finally:
            os.close(slave)
        pty = _Pty(master)
        url = f"http://127.0.0.1:{port}/api/run"
        if not pty.wait_for("ready: press enter to run", 0, START_TIMEOUT_S):
            raise RecordError(f"the app did not show its idle screen in {START_TIMEOUT_S:g} s")
        started = len(pty.events)
        chosen = SCENARIOS[scenario]
        if scenario != RunChoice.scenario:
            pty.write(chosen.key.encode())
            # Enter is a priority key: typed in the same breath as the scenario's key, it
            # would start the run before the pick reached the app. Enter once it shows.
            shown = f"[{chosen.key}] {chosen.label if width < WIDE else chosen.title}"
            if not pty.wait_for(shown, started, START_TIMEOUT_S):
                raise RecordError(f"the app did not show scenario {scenario} after its key")
        pty.write(b"\r")
        if progress is not None:
            progress.write(f"record: the app (pid {proc.pid}) runs {scenario} ({mode})\n")
            progress.flush()
        run = _wait_finished(url, proc, RUN_TIMEOUT_S)
        if run is None:
            raise RecordError(f"the run did not finish in {RUN_TIMEOUT_S:g} s")
        if run.get("scenario") != scenario:
            raise RecordError(f"the app ran {run.get('scenario')!r}, not {scenario!r}")
        status = str(run["status"])
        # The header says so (the idle screen never does): the recording ends with it.
        if not pty.wait_for(status, started, 10):
            raise RecordError(f"the app did not show the {status} run")
        # The verdict strip comes once every column has shown its kill for the hold: its
        # first line starts with the column's title, padded (no other line pads it so).
        if not pty.wait_for(VERDICT_LINE, started, 10):
            raise RecordError("the app did not show the verdict strip")
        quit_at = pty.wait_quiet(QUIET_S, SETTLE_TIMEOUT_S)
        pty.write(b"q")
        proc.wait(timeout=QUIT_TIMEOUT_S)
        pty.thread.join(QUIT_TIMEOUT_S)
    finally:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # the app stops its workers on SIGTERM
            try:
                proc.wait(timeout=QUIT_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                # Its workers are in sessions of their own: kill them with it.
                kill_tree(proc.pid)
                proc.wait()
        os.close(master)
    events = _ending_on_the_last_frame(pty.events, quit_at, hold, height)
    _write_cast(out, width, height, events, f"interlock-demo {scenario} ({mode})")
    return out


def _ending_on_the_last_frame(
    events: list[tuple[float, str]], quit_at: int, hold: float, height: int
) -> list[tuple[float, str]]:
    """The cast's events: the app's up to q, then its teardown `hold` seconds after the
    last frame, without the alternate screen, and the cursor below the frame."""
    frames, teardown = _main_screen(events[:quit_at]), _main_screen(events[quit_at:])
    end = (frames[-1][0] if frames else 0.0) + hold
    last = "".join(text for _, text in teardown) + f"\x1b[{height};1H\r\n"
    return [*frames, (end, last)]


def _main_screen(events: list[tuple[float, str]]) -> list[tuple[float, str]]:
    """`events` with the alternate screen's sequences replaced (`CAST_REPLACES`), also
    where one is split between two reads."""
    kept: list[tuple[float, str]] = []
    carry = ""
    for t, piece in events:
        text = carry + piece
        start = text.rfind("\x1b")
        tail = text[start:] if start >= 0 else ""
        split = any(seq.startswith(tail) and seq != tail for seq in CAST_REPLACES)
        carry = tail if split else ""
        text = text[: len(text) - len(carry)]
        for seq, instead in CAST_REPLACES.items():
            text = text.replace(seq, instead)
        if text:
            kept.append((t, text))
    if carry:
        kept.append((events[-1][0], carry))
    return kept


def _write_cast(
    out: Path, width: int, height: int, events: list[tuple[float, str]], title: str
) -> None:
    header: dict[str, Any] = {
        "version": 2,
        "width": width,
        "height": height,
        "timestamp": int(time.time()),
        "title": title,
        "env": {"TERM": "xterm-256color"},
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    # Written beside it and renamed (`replacing`): a stop mid-write leaves no half cast, an
    # earlier recording at `out` stays whole until the new one is, and no link planted at
    # `out` or beside it is written through.
    with replacing(out, "w", encoding="utf-8") as f:
        f.write(json.dumps(header) + "\n")
        for t, text in events:
            f.write(json.dumps([round(t, 6), "o", text]) + "\n")


def main(
    scenario: str,
    mode: str,
    out: Path,
    *,
    optional: frozenset[ColumnKind],
    size: tuple[int, int],
    hold: float,
) -> int:
    """The command: 0 when the recording is written, 3 when the run could not finish (or
    a stop signal ended it: `Stopped`, saying that the app stopped and nothing was written)."""
    try:
        refuse_link(out)  # before the recording, which takes minutes, not after it
    except SymlinkRefusedError as e:
        print(f"interlock-demo record: {e}", file=sys.stderr)
        return ExitCode.USAGE
    try:
        path = record(
            scenario, mode, out, optional=optional, size=size, hold=hold, progress=sys.stderr
        )
    except Stopped as stop:
        raise stop.having(f"the app and its workers stopped; nothing written to {out}") from None
    except SymlinkRefusedError as e:  # planted while it recorded
        print(f"interlock-demo record: {e}; nothing was written to {out}", file=sys.stderr)
        return ExitCode.USAGE
    except (RecordError, subprocess.TimeoutExpired, OSError) as e:
        print(f"interlock-demo record: {e}; nothing was written to {out}", file=sys.stderr)
        return ExitCode.UNFINISHED
    print(f"recorded {scenario} ({mode}) to {path}; replay it with: asciinema play {path}")
    return ExitCode.OK

"""The claim-wait countdown: large seconds left, a one-line caption saying why, and a bar.

While a restarted worker waits out the dead worker's claim, nothing else moves on screen;
this is the lesson of the demo, so it is large and it moves every tick. In mock runs the
wait is not waited: the widget says so instead of counting down.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Digits, ProgressBar, Static

from interlock_demo.core.run import ClaimWait

# Why the column waits, longest first: the widest that fits the column is shown.
CAPTIONS = (
    "waiting: the dead worker's refund request could still land",
    "the dead worker's request could still land",
    "dead worker's send may land",
    "its send may land",
)


def caption_for(width: int) -> str:
    """The longest caption that fits in `width` cells."""
    return next((c for c in CAPTIONS if len(c) <= width), CAPTIONS[-1])


class ClaimCountdown(Vertical):
    """Seconds left of a claim wait, as large digits with a caption and a progress bar."""

    def compose(self) -> ComposeResult:
        yield Digits("", classes="seconds")
        yield Static("", classes="caption")
        yield ProgressBar(total=100, show_eta=False, show_percentage=False, classes="bar")

    def on_resize(self) -> None:
        if self.query_one(".bar", ProgressBar).display:
            self.query_one(".caption", Static).update(caption_for(self.size.width))

    def show(self, wait: ClaimWait, run_now: float) -> None:
        """Move to `run_now` (seconds since the run started) in the wait `wait`."""
        caption = self.query_one(".caption", Static)
        digits = self.query_one(".seconds", Digits)
        bar = self.query_one(".bar", ProgressBar)
        if wait.simulated:
            digits.display = False
            bar.display = False
            caption.update(f"simulated: {wait.seconds:.1f} s on the mock clock, no real time")
            return
        digits.display = True
        bar.display = True
        left = max(wait.until - run_now, 0.0)
        span = max(wait.until - wait.start, 1e-6)
        digits.update(f"{left:4.1f}s")
        # Before the first layout the width is 0: the app's width stands in until on_resize.
        caption.update(caption_for(self.size.width or self.app.size.width))
        bar.update(progress=100 * min(max((run_now - wait.start) / span, 0.0), 1.0))

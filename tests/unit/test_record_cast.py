"""How `record` turns what the app's terminal received into the cast's events: the last
frame held, the teardown after it, no alternate screen even where a read split it."""

from __future__ import annotations

from interlock_demo.views.record import _ending_on_the_last_frame

ENTER, LEAVE = "\x1b[?1049h", "\x1b[?1049l"


def test_the_alternate_screen_is_left_out_even_split_between_two_reads() -> None:
    """The switch into the alternate screen becomes a clear screen and the switch out is
    dropped, also when the pseudo-terminal handed either over in two reads."""
    events = [
        (0.5, "\x1b[?10"),
        (0.6, "49h\x1b[?25lframe one"),
        (1.0, "frame two\x1b[?1"),
        (1.1, "049"),
        (1.2, "l\x1b[?25h"),
    ]
    cast = _ending_on_the_last_frame(events, quit_at=2, hold=0.0, height=30)
    text = "".join(t for _, t in cast)
    assert ENTER not in text and LEAVE not in text and "\x1b[?1049" not in text
    assert text.startswith("\x1b[H\x1b[2J\x1b[?25lframe one")
    assert "frame two" in text and "\x1b[?25h" in text


def test_the_teardown_comes_after_the_hold_with_the_cursor_below_the_frame() -> None:
    """What the app wrote after q (its teardown) is one last event `hold` seconds after its
    last frame, ending with the cursor on a new line below the frame's last row."""
    events = [(0.2, f"{ENTER}idle"), (4.0, "verdicts"), (4.3, f"\x1b[?1000l{LEAVE}\x1b[?25h")]
    cast = _ending_on_the_last_frame(events, quit_at=2, hold=5.0, height=45)
    assert cast[:-1] == [(0.2, "\x1b[H\x1b[2Jidle"), (4.0, "verdicts")]
    assert cast[-1] == (9.0, "\x1b[?1000l\x1b[?25h\x1b[45;1H\r\n")

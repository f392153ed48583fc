"""The files the user names (`record --out`, `e2e-report --out`, `screenshots`, `results`)
are never written through a symbolic link another user planted, at the chosen name or at
the temporary name beside it: a link at the name is refused saying so, and the file the
link names is left as it was."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from interlock_demo.engine.temporal import probe
from interlock_demo.output import SymlinkRefusedError, replacing, write_output
from interlock_demo.reports import e2e_report
from interlock_demo.views import record
from interlock_demo.views.tui import screenshots

# What another user's link points at: a file of the user's that the demo must not touch.
VICTIM_TEXT = "the user's own file, which no report may overwrite\n"


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A file of the user's elsewhere, the target of every planted link."""
    path = tmp_path / "elsewhere" / "precious.txt"
    path.parent.mkdir()
    path.write_text(VICTIM_TEXT)
    return path


def _plant(link: Path, victim: Path) -> Path:
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(victim)
    return link


def _refusal(path: Path) -> str:
    return f"{path} is a symbolic link; remove it or choose another path"


def test_write_output_refuses_a_link_at_the_name(tmp_path: Path, victim: Path) -> None:
    """A link at the chosen name: refused in words; the link and its target stay as they were."""
    out = _plant(tmp_path / "shared" / "report.md", victim)
    with pytest.raises(SymlinkRefusedError) as refused:
        write_output(out, "the report\n")
    assert str(refused.value).startswith(_refusal(out))
    assert out.is_symlink() and victim.read_text() == VICTIM_TEXT
    assert [p.name for p in out.parent.iterdir()] == ["report.md"]  # no part file left


def test_the_file_beside_is_never_opened_through_a_link(
    tmp_path: Path, victim: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Even a link planted under the very name of the file written beside (its random part
    guessed) is not followed: the open fails and the target is untouched."""
    monkeypatch.setattr("interlock_demo.output.secrets.token_hex", lambda n: "guessed")
    out = tmp_path / "report.md"
    _plant(tmp_path / ".report.md.guessed.part", victim)
    with pytest.raises(FileExistsError):
        write_output(out, "the report\n")
    assert victim.read_text() == VICTIM_TEXT and not out.exists()


def test_write_output_replaces_a_plain_file_whole(tmp_path: Path) -> None:
    """A file there before is replaced; an error mid-write leaves it whole and no part file."""
    out = tmp_path / "report.md"
    out.write_text("before\n")
    with pytest.raises(RuntimeError), replacing(out) as f:
        f.write("half a re")
        raise RuntimeError("stopped mid-write")
    assert out.read_text() == "before\n"
    assert write_output(out, b"after\n") == out
    assert out.read_text() == "after\n"
    assert [p.name for p in tmp_path.iterdir()] == ["report.md"]


def test_records_cast_is_never_written_through_a_link(tmp_path: Path, victim: Path) -> None:
    """`record`'s writer: a link at `out` is refused (it was silently replaced); a link at
    `out.part`, the name it wrote beside before, is not followed (it was written through)."""
    events = [(0.0, "hello")]
    out = _plant(tmp_path / "talk.cast", victim)
    with pytest.raises(SymlinkRefusedError):
        record._write_cast(out, 80, 24, events, "t")
    assert out.is_symlink() and victim.read_text() == VICTIM_TEXT
    out = tmp_path / "other.cast"
    _plant(tmp_path / "other.cast.part", victim)
    record._write_cast(out, 80, 24, events, "t")
    assert victim.read_text() == VICTIM_TEXT
    assert out.read_text().splitlines()[1] == '[0.0, "o", "hello"]'


def test_record_refuses_a_link_before_it_records(
    tmp_path: Path,
    victim: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`interlock-demo record --out LINK` exits 2 at once, before the minutes of recording."""

    def no_recording(*args: object, **kwargs: object) -> Path:
        raise AssertionError("the recording started")

    monkeypatch.setattr(record, "record", no_recording)
    out = _plant(tmp_path / "talk.cast", victim)
    code = record.main("hand-refund", "offline", out, optional=frozenset(), size=(100, 30), hold=0)
    assert code == 2
    assert capsys.readouterr().err.startswith(f"interlock-demo record: {_refusal(out)}")
    assert victim.read_text() == VICTIM_TEXT


@pytest.mark.parametrize("when", ["before", "during the runs"])
def test_e2e_report_is_never_written_through_a_link(
    when: str,
    tmp_path: Path,
    victim: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`interlock-demo e2e-report --out LINK` exits 2 saying so, whether the link was there
    before it started or planted while its runs ran; the linked file is untouched."""
    out = tmp_path / "shared" / "e2e.md"
    runs_ran: list[bool] = []

    def runs(home: Path, *, parallel: int) -> list[e2e_report.CaseRun]:
        runs_ran.append(True)
        if when != "before":
            _plant(out, victim)
        return []

    monkeypatch.setattr(e2e_report, "run_all", runs)
    monkeypatch.setattr(probe, "temporal_unavailable", lambda: None)
    monkeypatch.setenv("INTERLOCK_HOME", str(tmp_path / "home"))
    if when == "before":
        _plant(out, victim)
    assert e2e_report.main(out, parallel=1) == 2
    err = capsys.readouterr().err
    assert f"interlock-demo e2e-report: {_refusal(out)}" in err
    assert runs_ran == ([] if when == "before" else [True])
    assert out.is_symlink() and victim.read_text() == VICTIM_TEXT


def test_screenshots_are_never_written_through_a_link(
    tmp_path: Path, victim: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An SVG's name and its PNG's name (which rsvg-convert's -o followed) are refused when
    they are links, the PNG's before rsvg-convert is started."""
    svg = _plant(tmp_path / "idle.svg", victim)
    with pytest.raises(SymlinkRefusedError):
        screenshots._save(svg, "<svg/>")
    assert victim.read_text() == VICTIM_TEXT
    # Found or not on this machine, the command would run it: the tier starts no process.
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}")
    svg = tmp_path / "run.svg"
    svg.write_text('<svg xmlns="http://www.w3.org/2000/svg" width="4" height="4"/>')
    png = _plant(tmp_path / "run.png", victim)
    with pytest.raises(SymlinkRefusedError):
        screenshots.to_png(svg)
    assert png.is_symlink() and victim.read_text() == VICTIM_TEXT

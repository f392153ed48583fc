"""The `interlock-demo` command.

    interlock-demo [--live|--offline|--mock] [--no-checked] [--http [PORT]] the app
    interlock-demo --headless --json --scenario ID|all [...]               for CI
    interlock-demo doctor                                                   the venue check
    interlock-demo serve [--port 8000]                                      the app in a browser
    interlock-demo stripe-emulator [--port N]                               the emulator alone
    interlock-demo mcp [--offline] [--approve PAYMENT --cap CENTS]        refunds over MCP
    interlock-demo e2e-report [--out FILE] [--parallel N]                   both engines, offline
    interlock-demo screenshots [--out DIR] [--scenario ID|all]              SVG/PNG files
    interlock-demo record --scenario ID [--mock] [--no-checked] [--size 100x30] [--hold 5]
                          --out F.cast

Exit codes: 0 as predicted, 1 a deviation, 2 bad usage or configuration, 3 a run could
not finish. `doctor`: 0 when the chosen mode can run, else 1. A Ctrl-C, SIGTERM or SIGHUP
stops a command at once with one line saying what finished (`STOP_CODES`: 3, or 0 for
`mcp`).
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import importlib.util
import io
import math
import os
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from interlock_demo.core.columns import OPTIONAL, ColumnKind, optional_from
from interlock_demo.errors import KeyRefusedError, UsageError
from interlock_demo.exit_codes import ExitCode
from interlock_demo.layout import LARGEST, SMALLEST
from interlock_demo.mcp.cli import add_mcp_parser
from interlock_demo.settings.config import resolve
from interlock_demo.settings.environment import ENV_OTEL_FILE
from interlock_demo.settings.modes import MODES
from interlock_demo.stopping import Stopped, stop_signals
from scenarios import SCENARIOS, SWITCHES

SCENARIO_HELP = (
    ", ".join(SCENARIOS)
    + " or all (the app's keys "
    + ", ".join(sc.key for sc in SCENARIOS.values())
    + " name them too)"
)
STORE_HELP = (
    "the journal: postgresql://user@host/db[?schema=NAME] for workers on many hosts, or a "
    "SQLite path (default: INTERLOCK_STORE, else the SQLite file under INTERLOCK_HOME)"
)
# The third column, the hand-written re-check, is the point of comparison: on unless left out.
CHECKED_OPTION: dict[str, Any] = {
    "action": argparse.BooleanOptionalAction,
    "default": True,
    "help": "the third column, a hand-written re-check (on; --no-checked leaves it out)",
}
# The modes a sweep and a recording run in: those that need no key.
_KEYLESS_MODES = [m.name for m in MODES.values() if not m.needs_keys]
# A recording's terminal larger than this is a typo, not a projector.
MAX_RECORD_SIDE = 500
# What each subcommand exits with when a stop signal ends it (`interlock_demo.stopping`):
# a server's normal end is Ctrl-C; any other command did not finish.
STOP_CODES = {
    "mcp": ExitCode.OK,
    "doctor": ExitCode.UNFINISHED,
    "e2e-report": ExitCode.UNFINISHED,
    "screenshots": ExitCode.UNFINISHED,
    "record": ExitCode.UNFINISHED,
    "sweep": ExitCode.UNFINISHED,
    "results": ExitCode.UNFINISHED,
}
# How long a recording stays on the verdicts at its end, unless `--hold` says; longer than
# MAX_HOLD_S is a typo, not a pause to talk over.
DEFAULT_HOLD_S = 5.0
MAX_HOLD_S = 600.0


def port(text: str) -> int:
    """A TCP port number from the command line; argparse turns the error into exit 2."""
    try:
        number = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 1 <= number <= 65535:
        raise argparse.ArgumentTypeError(
            f"{number} is not a port: use a number from 1 to 65535, such as 8787"
        )
    return number


def scenario_id(text: str) -> str:
    """A scenario id, `all`, or the app's key for it (`1` is hand-refund); else `UsageError`."""
    if text == "all" or text in SCENARIOS:
        return text
    for sid, sc in SCENARIOS.items():
        if text == sc.key:
            return sid
    close = difflib.get_close_matches(text, [*SCENARIOS, "all"], n=1)
    hint = f" Did you mean {close[0]}?" if close else ""
    raise UsageError(f"unknown scenario {text!r}: use one of {SCENARIO_HELP}.{hint}")


def version() -> str:
    """The demo's version and the library's it runs on, as `--version` prints them."""
    return f"interlock-demo {_installed('interlock-demo')} (interlock {_installed('interlock')})"


def _installed(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


class _Parser(argparse.ArgumentParser):
    """A parser that answers `--version`; every subcommand's parser is one too (argparse
    makes subparsers of their parent's class), so `--version` works everywhere."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.add_argument("--version", action="version", version=version())


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="interlock-demo",
        description="One real refund case, a SIGKILLed worker, and what ends up in Stripe.",
    )
    modes = p.add_mutually_exclusive_group()
    modes.add_argument(
        "--live",
        action="store_const",
        const="live",
        dest="mode",
        help="Stripe test mode and the real model (needs both keys)",
    )
    modes.add_argument(
        "--offline",
        action="store_const",
        const="offline",
        dest="mode",
        help="rehearsal: loopback Stripe emulator and a scripted model",
    )
    modes.add_argument(
        "--mock",
        action="store_const",
        const="mock",
        dest="mode",
        help="simulated in-process: no Stripe, no processes",
    )
    p.add_argument("--engine", default="standalone", choices=["standalone", "temporal"])
    p.add_argument("--checked", **CHECKED_OPTION)
    p.add_argument("--headless", action="store_true", help="run without the app")
    p.add_argument("--json", action="store_true", help="headless: print the run as JSON")
    p.add_argument("--scenario", help=f"headless: {SCENARIO_HELP}")
    for switch in SWITCHES:
        p.add_argument(switch.flag, action="store_true", dest=switch.field, help=switch.help)
    p.add_argument(
        "--stripe-base", metavar="URL", help="offline: use an emulator already listening at URL"
    )
    p.add_argument("--store", metavar="URL", help=STORE_HELP)
    p.add_argument(
        "--http",
        nargs="?",
        const=8787,
        type=port,
        metavar="PORT",
        help="serve the run as JSON on 127.0.0.1 (default port 8787)",
    )
    p.add_argument(
        "--otel-file",
        metavar="PATH",
        help="append the run's OpenTelemetry spans to PATH, one JSON object a line",
    )
    # `record`'s app: it leaves out of the screen what dies with it (the JSON's address).
    p.add_argument("--recorded", action="store_true", help=argparse.SUPPRESS)
    sub = p.add_subparsers(dest="command")
    emu = sub.add_parser("stripe-emulator", help="run the loopback Stripe emulator alone")
    emu.add_argument("--port", type=port, help="default: a free port, printed on start")
    doctor = sub.add_parser(
        "doctor",
        help="check the venue before the talk: mode, keys, network, emulator, Temporal, terminal",
    )
    _app_options_again(doctor, checked=False)
    serve = sub.add_parser("serve", help="the same app in a browser tab on 127.0.0.1")
    serve.add_argument("--port", type=port, default=8000, help="default 8000")
    _app_options_again(serve, checked=True)
    report = sub.add_parser(
        "e2e-report",
        help="offline runs of every scenario on both engines, compared in results/e2e_offline.md",
    )
    report.add_argument("--out", metavar="FILE", help="default results/e2e_offline.md")
    report.add_argument("--parallel", type=int, default=5, help="runs at a time (default 5)")
    sweep = sub.add_parser(
        "sweep", help="every crash point x every outage x every column, each a real run"
    )
    sweep_modes = sweep.add_mutually_exclusive_group()
    for flag in _KEYLESS_MODES:
        sweep_modes.add_argument(
            f"--{flag}", action="store_const", const=flag, dest="sweep_mode", help=f"{flag} runs"
        )
    sweep.add_argument("--json", action="store_true", dest="sweep_json", help="print JSON")
    sweep.add_argument("--store", metavar="URL", default=argparse.SUPPRESS, help=STORE_HELP)
    sweep.add_argument("--parallel", type=int, default=3, help="runs at a time (default 3)")
    sweep.add_argument(
        "--faults",
        action="store_true",
        help="sweep Stripe's answer to the first refund call instead of the crash point "
        "(offline only)",
    )
    results = sub.add_parser(
        "results",
        help="regenerate results/: every scenario, the sweep, the engine report, screenshots",
    )
    results.add_argument("--out", type=Path, metavar="DIR", default=Path("results"))
    shots = sub.add_parser(
        "screenshots",
        help="save SVG (and PNG) screenshots of each scenario's finished run, offline",
    )
    shots.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        default=Path("results/screenshots"),
        help="folder for the files (default results/screenshots/)",
    )
    shots.add_argument(
        "--scenario",
        dest="shot_scenario",
        default="all",
        choices=[*SCENARIOS, "all"],
        help="one scenario, or all (default)",
    )
    rec = sub.add_parser(
        "record", help="record the app through one scenario as an asciinema v2 .cast file"
    )
    rec.add_argument("--scenario", dest="rec_scenario", required=True, choices=list(SCENARIOS))
    rec_modes = rec.add_mutually_exclusive_group()
    for mode in _KEYLESS_MODES:
        rec_modes.add_argument(
            f"--{mode}", action="store_const", const=mode, dest="rec_mode", default="offline"
        )
    rec.add_argument("--out", type=Path, metavar="FILE.cast", required=True)
    rec.add_argument("--checked", **CHECKED_OPTION)
    rec.add_argument(
        "--size",
        type=_terminal_size,
        default=LARGEST,
        metavar="COLSxROWS",
        help="the terminal recorded, such as 100x30 for the projector's (default "
        f"{LARGEST[0]}x{LARGEST[1]}; at least {SMALLEST[0]}x{SMALLEST[1]})",
    )
    rec.add_argument(
        "--hold",
        type=_hold,
        default=DEFAULT_HOLD_S,
        metavar="SECONDS",
        help=f"how long the cast stays on the verdicts at its end (default {DEFAULT_HOLD_S:g})",
    )
    add_mcp_parser(sub)
    return p


def _terminal_size(text: str) -> tuple[int, int]:
    """`COLSxROWS` as the two numbers; a size the app cannot lay out in is refused."""
    cols, sep, rows = text.lower().partition("x")
    if not (sep and cols.isdigit() and rows.isdigit()):
        raise argparse.ArgumentTypeError(f"{text!r}: give columns x rows, such as 100x30")
    size = (int(cols), int(rows))
    if size[0] < SMALLEST[0] or size[1] < SMALLEST[1] or max(size) > MAX_RECORD_SIDE:
        raise argparse.ArgumentTypeError(
            f"{text!r}: the app lays out from {SMALLEST[0]}x{SMALLEST[1]} (and a side of at "
            f"most {MAX_RECORD_SIDE}); give a size such as 100x30"
        )
    return size


def _hold(text: str) -> float:
    """Seconds to hold the verdicts: a number from 0 to `MAX_HOLD_S`."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    # NaN fails the comparison too: "nan" is a float to Python, not a time to wait.
    if not 0 <= seconds <= MAX_HOLD_S:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give seconds from 0 to {MAX_HOLD_S:g}, such as {DEFAULT_HOLD_S:g}"
        )
    return seconds


def _app_options_again(sub: argparse.ArgumentParser, *, checked: bool) -> None:
    """Let `doctor --live` and `serve --offline --checked` mean what `--live doctor` does.

    Left out, they leave the value given before the subcommand alone (SUPPRESS).
    """
    modes = sub.add_mutually_exclusive_group()
    for mode in MODES:
        modes.add_argument(
            f"--{mode}",
            action="store_const",
            const=mode,
            dest="mode",
            default=argparse.SUPPRESS,
            help=f"check {mode} mode" if not checked else f"serve the app in {mode} mode",
        )
    sub.add_argument("--engine", choices=["standalone", "temporal"], default=argparse.SUPPRESS)
    if checked:
        sub.add_argument("--checked", **{**CHECKED_OPTION, "default": argparse.SUPPRESS})


def main(argv: list[str] | None = None) -> int:
    """Run the command; returns the exit code."""
    refused = _live_key_refusal(argv if argv is not None else sys.argv[1:])
    if refused is not None:
        print(f"interlock-demo: {refused}", file=sys.stderr)
        return ExitCode.USAGE
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return ExitCode.USAGE if e.code else ExitCode.OK
    if args.otel_file is not None:
        problem = _trace_to(args.otel_file)
        if problem is not None:
            print(f"interlock-demo: {problem}", file=sys.stderr)
            return ExitCode.USAGE
    if args.command == "stripe-emulator":
        return _emulator(args.port)  # the library's: it stops on these signals itself
    if args.command in STOP_CODES:
        with stop_signals():
            try:
                return _subcommand(args)
            except Stopped as stop:
                print(stop.line(f"interlock-demo {args.command}"), file=sys.stderr)
                return STOP_CODES[args.command]
    try:
        _check_headless_usage(args)
        config = resolve(
            mode=args.mode,
            engine=args.engine,
            emulate_24h=args.emulate_24h,
            no_lookup=args.no_lookup,
            stripe_base=args.stripe_base,
            store=args.store,
        )
        if args.engine == "temporal":
            from interlock_demo.engine.temporal.probe import check_temporal

            check_temporal(config)  # the extra installed, the activity's timeouts workable
    except (UsageError, KeyRefusedError) as e:
        print(f"interlock-demo: {e}", file=sys.stderr)
        return ExitCode.USAGE
    if args.headless:
        from interlock_demo.views.headless import run_headless

        return run_headless(
            config, scenario_id(args.scenario), optional=_optional(args), as_json=args.json
        )
    if args.command == "serve":
        from interlock_demo.views.serve import serve

        return serve(args.port, argv=_app_argv(args))
    from interlock_demo.views.tui.app import run_app

    return run_app(config, optional=_optional(args), http_port=args.http, recorded=args.recorded)


def _trace_to(path: str) -> str | None:
    """Have every gate of this run (in this process and in each worker, which inherit
    `INTERLOCK_OTEL_FILE`) append its spans to `path`; or why it cannot."""
    if importlib.util.find_spec("opentelemetry.sdk") is None:
        return (
            "--otel-file needs the OpenTelemetry SDK, which is not installed: "
            "pip install opentelemetry-sdk (or the demo's `otel` extra)"
        )
    where = Path(path).absolute()
    try:
        # Created here, so a worker never fails on it; never through a planted symlink.
        fd = os.open(where, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError as e:
        return (
            f"cannot write traces to {where}: {e.strerror} (a symlink there is refused); "
            "name a plain file in a directory you own"
        )
    os.close(fd)
    os.environ[ENV_OTEL_FILE] = str(where)
    return None


def _optional(args: argparse.Namespace) -> frozenset[ColumnKind]:
    """The optional columns the command line chose: each has its flag (`--no-checked`)."""
    return optional_from(vars(args), OPTIONAL)


def _subcommand(args: argparse.Namespace) -> int:
    """Run one of the subcommands in `STOP_CODES`; returns its exit code."""
    if args.command == "mcp":
        from interlock_demo.mcp.cli import run as run_mcp

        return run_mcp(args)
    if args.command == "doctor":
        from interlock_demo.doctor import main_doctor

        return main_doctor(mode=args.mode, engine=args.engine)
    if args.command == "e2e-report":
        from interlock_demo.reports import e2e_report

        if args.parallel < 1:
            print("interlock-demo: --parallel needs 1 or more", file=sys.stderr)
            return ExitCode.USAGE
        return e2e_report.main(args.out, parallel=args.parallel)
    if args.command == "screenshots":
        from interlock_demo.views.tui.screenshots import main as screenshots

        return screenshots(args.out, args.shot_scenario)
    if args.command == "record":
        from interlock_demo.views.record import main as record

        return record(
            args.rec_scenario,
            args.rec_mode,
            args.out,
            optional=_optional(args),
            size=args.size,
            hold=args.hold,
        )
    if args.command == "sweep":
        return _sweep(
            args.sweep_mode or "offline", args.sweep_json, args.parallel, args.faults, args.store
        )
    if args.command == "results":
        from interlock_demo.reports.results import main_results

        try:
            return main_results(args.out)
        except (UsageError, KeyRefusedError) as e:
            print(f"interlock-demo: {e}", file=sys.stderr)
            return ExitCode.USAGE
    raise AssertionError(f"not a subcommand with a stop code: {args.command}")


def _command(argv: list[str]) -> str | None:
    """The subcommand `argv` names, as the parser reads it (an option's value named
    `doctor` is not the command); None when it names none or does not parse."""
    try:  # quietly: `--help` or a bad option is answered by the real parse that follows
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            args, _ = _parser().parse_known_args(argv)
    except SystemExit:
        return None
    command = getattr(args, "command", None)
    return command if isinstance(command, str) else None


def _live_key_refusal(argv: list[str]) -> KeyRefusedError | None:
    """Why no command may run with the Stripe key set here, or None when it may.

    Checked before anything is parsed or started, so every command (the emulator, the MCP
    desk offline, the reports) refuses a live key with the same words and exit code, even
    those that would never send it. `doctor` alone goes on: naming a refused key on its
    keys line is what the venue check is for, and it starts nothing; so does `--version`
    (an option's value is never `--version`: argparse reads that as the option).
    """
    if _command(argv) == "doctor" or "--version" in argv:
        return None
    from interlock_demo.settings.keys import Secret, check_test_key

    value = os.environ.get("STRIPE_SECRET_KEY", "").strip()
    if not value:
        return None
    try:
        check_test_key(Secret(value, "STRIPE_SECRET_KEY"))
    except KeyRefusedError as e:
        return e
    return None


def _check_headless_usage(args: argparse.Namespace) -> None:
    """Options that only mean something headless are refused without it, and vice versa.

    A CI job that forgets `--headless` would otherwise open the app and hang.
    """
    if args.headless:
        if args.command is not None:
            raise UsageError(f"--headless runs scenarios; drop it for `{args.command}`")
        if args.scenario is None:
            raise UsageError(f"--headless needs --scenario with one of {SCENARIO_HELP}")
        scenario_id(args.scenario)
        return
    if args.json:
        raise UsageError(
            "--json prints a headless run and opens no app: add --headless --scenario ID|all"
        )
    if args.scenario is not None:
        scenario_id(args.scenario)
        raise UsageError(
            "--scenario chooses what --headless runs: add --headless, or open the app and "
            "press " + ", ".join(sc.key for sc in SCENARIOS.values()) + " to choose"
        )


def _app_argv(args: argparse.Namespace) -> list[str]:
    """The app's own options, for the command `serve` starts for each browser tab."""
    argv = [f"--{args.mode}"] if args.mode else []
    if args.engine != "standalone":
        argv += ["--engine", args.engine]
    if not args.checked:
        argv.append("--no-checked")
    argv += [switch.flag for switch in SWITCHES if getattr(args, switch.field)]
    if args.stripe_base:
        argv += ["--stripe-base", args.stripe_base]
    if args.store:
        argv += ["--store", args.store]
    return argv


def _sweep(
    mode: str, as_json: bool, parallel: int, faults: bool = False, store: str | None = None
) -> int:
    from interlock_demo.reports.sweep import main_sweep

    try:
        config = resolve(mode=mode, store=store)
    except (UsageError, KeyRefusedError) as e:
        print(f"interlock-demo: {e}", file=sys.stderr)
        return ExitCode.USAGE
    if parallel < 1:
        print("interlock-demo: --parallel needs 1 or more", file=sys.stderr)
        return ExitCode.USAGE
    return main_sweep(config, as_json=as_json, parallel=parallel, faults=faults)


def _emulator(port: int | None) -> int:
    """Serve the emulator until Ctrl-C, as the library's own command does."""
    from interlock.testing import serve_emulator

    return serve_emulator(port, prog="interlock-demo")


if __name__ == "__main__":
    sys.exit(main())

"""The `interlock-demo` command.

    interlock-demo [--live|--offline|--mock] [--checked] [--http [PORT]]   the app
    interlock-demo --headless --json --scenario ID|all [...]               for CI
    interlock-demo stripe-emulator [--port N]                               the emulator alone
    interlock-demo mcp [--offline] [--approve PAYMENT --cap CENTS]        refunds over MCP
    interlock-demo e2e-report [--out FILE] [--parallel N]                   both engines, offline
    interlock-demo screenshots [--out DIR] [--scenario ID|all]              SVG/PNG files

Exit codes: 0 as predicted, 1 a deviation, 2 bad usage or configuration, 3 a run could
not finish.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from interlock_demo.keys import KeyRefusedError
from interlock_demo.mcp.cli import add_mcp_parser
from interlock_demo.settings import UsageError, resolve
from scenarios import SCENARIOS

EXIT_USAGE = 2


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
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
    p.add_argument("--checked", action="store_true", help="add the hand-written check column")
    p.add_argument("--headless", action="store_true", help="run without the app")
    p.add_argument("--json", action="store_true", help="headless: print the run as JSON")
    p.add_argument("--scenario", help="headless: hand-refund, revoked, after-answer or all")
    p.add_argument(
        "--emulate-24h",
        action="store_true",
        help="emulate a retry after Stripe pruned the idempotency key",
    )
    p.add_argument("--no-lookup", action="store_true", help="emulate a gate without the lookup")
    p.add_argument(
        "--stripe-base", metavar="URL", help="offline: use an emulator already listening at URL"
    )
    p.add_argument(
        "--http",
        nargs="?",
        const=8787,
        type=int,
        metavar="PORT",
        help="serve the run as JSON on 127.0.0.1 (default port 8787)",
    )
    sub = p.add_subparsers(dest="command")
    emu = sub.add_parser("stripe-emulator", help="run the loopback Stripe emulator alone")
    emu.add_argument("--port", type=int, help="default: a free port, printed on start")
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
    for flag in ("offline", "mock"):
        sweep_modes.add_argument(
            f"--{flag}", action="store_const", const=flag, dest="sweep_mode", help=f"{flag} runs"
        )
    sweep.add_argument("--json", action="store_true", dest="sweep_json", help="print JSON")
    sweep.add_argument("--parallel", type=int, default=3, help="runs at a time (default 3)")
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
    add_mcp_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the command; returns the exit code."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return EXIT_USAGE if e.code else 0
    if args.command == "stripe-emulator":
        return _emulator(args.port)
    if args.command == "mcp":
        from interlock_demo.mcp.cli import run as run_mcp

        return run_mcp(args)
    if args.command == "e2e-report":
        from interlock_demo import e2e_report

        if args.parallel < 1:
            print("interlock-demo: --parallel needs 1 or more", file=sys.stderr)
            return EXIT_USAGE
        return e2e_report.main(args.out, parallel=args.parallel)
    if args.command == "screenshots":
        from interlock_demo.screenshots import main as screenshots

        return screenshots(args.out, args.shot_scenario)
    if args.command == "sweep":
        return _sweep(args.sweep_mode or "offline", args.sweep_json, args.parallel)
    if args.command == "results":
        from interlock_demo.results import main_results

        try:
            return main_results(args.out)
        except (UsageError, KeyRefusedError) as e:
            print(f"interlock-demo: {e}", file=sys.stderr)
            return EXIT_USAGE
    try:
        config = resolve(
            mode=args.mode,
            engine=args.engine,
            emulate_24h=args.emulate_24h,
            no_lookup=args.no_lookup,
            stripe_base=args.stripe_base,
        )
        if args.engine == "temporal":
            from interlock_demo.temporal_engine import check_temporal

            check_temporal(config)  # the extra installed, the activity's timeouts workable
    except (UsageError, KeyRefusedError) as e:
        print(f"interlock-demo: {e}", file=sys.stderr)
        return EXIT_USAGE
    if args.headless:
        from interlock_demo.headless import run_headless
        from scenarios import SCENARIOS

        if args.scenario is None or (args.scenario != "all" and args.scenario not in SCENARIOS):
            print(
                "interlock-demo: --headless needs --scenario with one of "
                f"{', '.join(SCENARIOS)} or all",
                file=sys.stderr,
            )
            return EXIT_USAGE
        return run_headless(config, args.scenario, checked=args.checked, as_json=args.json)
    from interlock_demo.app import run_app

    return run_app(config, checked=args.checked, http_port=args.http)


def _sweep(mode: str, as_json: bool, parallel: int) -> int:
    from interlock_demo.sweep import main_sweep

    try:
        config = resolve(mode=mode)
    except (UsageError, KeyRefusedError) as e:
        print(f"interlock-demo: {e}", file=sys.stderr)
        return EXIT_USAGE
    if parallel < 1:
        print("interlock-demo: --parallel needs 1 or more", file=sys.stderr)
        return EXIT_USAGE
    return main_sweep(config, as_json=as_json, parallel=parallel)


def _emulator(port: int | None) -> int:
    """Serve the emulator until Ctrl-C; its address and control token go to stderr only."""
    import os

    from interlock_demo.payments import StripeEmulator
    from interlock_demo.payments.emulator import TOKEN_ENV

    preset = os.environ.get(TOKEN_ENV) or None
    try:
        emu = StripeEmulator(port or 0, control_token=preset)
    except OSError as e:
        print(f"interlock-demo: cannot listen on 127.0.0.1:{port}: {e}", file=sys.stderr)
        return EXIT_USAGE
    except ValueError as e:
        print(f"interlock-demo: {TOKEN_ENV}: {e}; unset it for a random one", file=sys.stderr)
        return EXIT_USAGE
    print(f"Stripe emulator on {emu.url} (test keys only; Ctrl-C stops it)", file=sys.stderr)
    if preset is not None:
        print(f"Control token: the one in {TOKEN_ENV}", file=sys.stderr)
    else:
        # For the person who started it: the engine's --stripe-base path needs it to arm
        # faults. It is printed here once and never written anywhere else.
        print(
            f"Control token: {emu.control_token} (set {TOKEN_ENV} to it where you run "
            f"--stripe-base {emu.url}; keep it to yourself)",
            file=sys.stderr,
        )
    try:
        emu.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        emu.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

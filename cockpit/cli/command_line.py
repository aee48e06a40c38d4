"""The `cockpit` command: the app by default, `train --headless` for batch jobs, `presets`.

Every user error ends as one line on stderr and exit status 2; no traceback reaches a user.
"""

from __future__ import annotations

import argparse
import os
import sys

from cockpit.cli.launch import train
from cockpit.cli.options import add_run_options
from cockpit.cli.stop_signals import StopSignals
from engine.config import ConfigError


def build_parser() -> argparse.ArgumentParser:
    from cockpit.cli.subcommands import MODULES

    parser = argparse.ArgumentParser(
        prog="cockpit",
        description="Train small GPT models and steer the run from the terminal.",
        epilog="Run `cockpit` alone to open the app on the default preset; `cockpit train --headless` for batch jobs.",
    )
    parser.add_argument("--version", action="version", version=f"cockpit {cockpit_version()}")
    sub = parser.add_subparsers(
        dest="command", metavar="COMMAND", help="what to do (default: train)"
    )
    add_run_options(sub.add_parser("train", help="train a preset (the app, or --headless)"))
    for module in MODULES:
        module.add_arguments(sub.add_parser(module.NAME, help=module.HELP, description=module.HELP))
    parser.set_defaults(parser=parser)  # `cockpit completion` writes its scripts from it
    return parser


def cockpit_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("cockpit")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def parse_args(argv: list[str]) -> argparse.Namespace:
    from cockpit.cli.subcommands import BY_NAME

    # `cockpit --preset x` is `cockpit train --preset x`: training is the default command.
    commands = ("train", *BY_NAME, "-h", "--help", "--version")
    if not argv or argv[0] not in commands:
        argv = ["train", *argv]
    if argv[0] == "train" and "--detach" in argv:  # `cockpit --detach ...` is `cockpit start ...`
        argv = ["start", *(a for a in argv[1:] if a != "--detach")]
    args = build_parser().parse_args(argv)
    if args.command in ("train", "start") and args.tensorboard:
        args.overrides.append("log.tensorboard=true")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    # Before anything slow (torch, the corpus): a SIGTERM during startup must stop the run
    # cleanly with its reason recorded, not kill the process with nothing on disk.
    signals = StopSignals()
    if args.command == "train":
        signals.install()
    try:
        if args.command != "train":
            from cockpit.cli.subcommands import BY_NAME

            return BY_NAME[args.command].run(args)
        return train(args, signals)
    except ConfigError as e:
        print(f"cockpit: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("cockpit: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`cockpit runs | head`): nothing more to say to it, and Python's
        # own flush at exit must not fail on the closed pipe either.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # what a shell reports for a command ended by SIGPIPE
    finally:
        signals.restore()


if __name__ == "__main__":
    sys.exit(main())

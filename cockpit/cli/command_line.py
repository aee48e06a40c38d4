"""The `cockpit` command line: the app by default, `train --headless` for batch jobs, and the
subcommands (one module each, with `NAME`, `HELP`, `add_arguments(parser)` and `run(args) ->
int`; importing one is cheap, no torch: the parser is built from all of them for every command
line, and for shell completion).

Every user error ends as one line on stderr and exit status 2; no traceback reaches a user.
"""

from __future__ import annotations

import argparse
import os
import sys
from types import ModuleType

from cockpit.cli.one_line_parser import OneLineParser
from cockpit.cli.options import add_run_options
from cockpit.cli.stop_signals import StopSignals
from engine.config import ConfigError


def subcommands() -> dict[str, ModuleType]:
    """The subcommands besides `train`, by name, in the order `cockpit --help` lists them."""
    from cockpit.cli import (
        ablate,
        attach,
        autopilot,
        compare,
        completion,
        data,
        export,
        fork,
        plan,
        presets,
        ps,
        research,
        runs,
        sample,
        serve,
        start,
    )

    modules = (
        start, attach, ps, runs, compare, ablate, research, autopilot, serve, fork, plan, presets, sample, export, data, completion,
    )  # fmt: skip
    return {module.NAME: module for module in modules}


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="cockpit",
        description="Train small GPT models and steer the run from the terminal.",
        epilog="Run `cockpit` alone to open the app on the default preset; `cockpit train --headless` for batch jobs.",
    )
    parser.add_argument("--version", action="version", version=f"cockpit {cockpit_version()}")
    sub = parser.add_subparsers(
        dest="subcommand", metavar="COMMAND", help="what to do (default: train)"
    )
    add_run_options(sub.add_parser("train", help="train a preset (the app, or --headless)"))
    for module in subcommands().values():
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
    # `cockpit --preset x` is `cockpit train --preset x`: training is the default subcommand.
    first_words = ("train", *subcommands(), "-h", "--help", "--version")
    if not argv or argv[0] not in first_words:
        argv = ["train", *argv]
    if argv[0] == "train" and "--detach" in argv:  # `cockpit --detach ...` is `cockpit start ...`
        argv = ["start", *(a for a in argv[1:] if a != "--detach")]
    args = build_parser().parse_args(argv)
    if args.subcommand in ("train", "start") and args.tensorboard:
        args.overrides.append("log.tensorboard=true")
    if args.subcommand in ("train", "start") and args.metrics_port is not None:
        args.overrides.append(f"log.metrics_port={args.metrics_port}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    # Before anything slow (torch, the corpus): a SIGTERM during startup must stop the run
    # cleanly with its reason recorded, not kill the process with nothing on disk.
    signals = StopSignals()
    if args.subcommand == "train":
        signals.install()
    try:
        if args.subcommand != "train":
            return subcommands()[args.subcommand].run(args)
        from cockpit.cli.launch import train

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

"""Options several subcommands share, defined once so their names and help agree."""

from __future__ import annotations

import argparse


def add_set_option(parser: argparse.ArgumentParser, example: str = "optim.lr=3e-4") -> None:
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"override a preset value, e.g. --set {example} (repeatable)",
    )


def add_presets_dir_option(parser: argparse.ArgumentParser, dest: str = "presets_dir") -> None:
    parser.add_argument(
        "--presets-dir",
        dest=dest,
        action="append",
        default=[],
        metavar="DIR",
        help="extra folder of presets (repeatable; later ones win)",
    )

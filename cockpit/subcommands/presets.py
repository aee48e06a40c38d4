"""`cockpit presets`: list the presets and where they come from."""

from __future__ import annotations

import argparse

NAME = "presets"
HELP = "list the presets and where they come from"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--presets-dir", action="append", default=[], metavar="DIR")


def run(args: argparse.Namespace) -> int:
    from engine.presets import discover, search_dirs

    presets = discover(args.presets_dir)
    width = max((len(n) for n in presets), default=10)
    for info in presets.values():
        print(f"{info.name:<{width}}  {info.origin:<13}  {info.description}")
    print("\nsearched (later wins): " + ", ".join(str(d) for d, _ in search_dirs(args.presets_dir)))
    return 0

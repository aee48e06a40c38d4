"""`cockpit serve` (being written)."""

from __future__ import annotations

import argparse

NAME = "serve"
HELP = "(being written)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    pass


def run(args: argparse.Namespace) -> int:
    raise NotImplementedError

"""`cockpit attach` (being written)."""

from __future__ import annotations

import argparse

NAME = "attach"
HELP = "(being written)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    pass


def run(args: argparse.Namespace) -> int:
    raise NotImplementedError

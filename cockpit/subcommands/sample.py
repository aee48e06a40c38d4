"""`cockpit sample`: stream text from a trained model in the terminal."""

from __future__ import annotations

import argparse

NAME = "sample"
HELP = "stream text from a trained model (a run's best checkpoint by default)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", metavar="RUN_DIR|CKPT", help="a run directory or a checkpoint file")


def run(args: argparse.Namespace) -> int:
    raise NotImplementedError("cockpit sample")

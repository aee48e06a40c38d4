"""`cockpit export`: a run's model or metrics in the formats other tools read."""

from __future__ import annotations

import argparse

NAME = "export"
HELP = "write a run's model (safetensors, hf, nanogpt) or metrics (csv, tensorboard) for other tools"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", metavar="RUN_DIR|CKPT", help="a run directory or a checkpoint file")


def run(args: argparse.Namespace) -> int:
    raise NotImplementedError("cockpit export")

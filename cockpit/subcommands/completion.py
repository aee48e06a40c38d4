"""`cockpit completion bash|zsh|fish`: the shell completion script, generated from the parser."""

from __future__ import annotations

import argparse

NAME = "completion"
HELP = "print a shell completion script (bash, zsh or fish)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("shell", choices=("bash", "zsh", "fish"), help="the shell to complete in")


def run(args: argparse.Namespace) -> int:
    raise NotImplementedError("cockpit completion")

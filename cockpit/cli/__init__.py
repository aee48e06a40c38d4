"""The `cockpit` command: argument parsing, launch helpers, one module per subcommand."""

from cockpit.cli.command_line import build_parser, main

__all__ = ["build_parser", "main"]

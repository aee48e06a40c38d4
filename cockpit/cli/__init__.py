"""The `cockpit` command: argument parsing, launch helpers, one module per subcommand."""

from __future__ import annotations

import importlib

# module -> the names it gives the rest of the code. Imported when first asked for, so that a
# subcommand's module does not load the parser and every subcommand with it.
_EXPORTS = {"cockpit.cli.command_line": ("build_parser", "main")}
__all__ = ["build_parser", "main"]


def __getattr__(name: str) -> object:
    for module, names in _EXPORTS.items():
        if name in names:
            return getattr(importlib.import_module(module), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""The `cockpit` command: argument parsing, launch helpers, one module per subcommand."""

from __future__ import annotations

import importlib
import sys

# module -> the names it gives the rest of the code. Imported when first asked for, so that a
# subcommand's module does not load the parser and every subcommand with it.
_EXPORTS = {"cockpit.cli.command_line": ("build_parser",)}
__all__ = ["build_parser", "main"]

INTERRUPTED = 130  # what a shell reports for a command ended by ctrl+c (128 + SIGINT)


def main(argv: list[str] | None = None) -> int:
    """The `cockpit` command (`command_line.main`). A ctrl+c while it is still importing (the
    parser, the subcommand, torch: seconds at start-up) or before its own handlers are in place
    ends it quietly: one line, exit status 130, no traceback."""
    try:
        from cockpit.cli.command_line import main as command_line_main

        code = command_line_main(argv)
    except KeyboardInterrupt:
        code = interrupted()
    if code == INTERRUPTED:
        forget_unhandled_interrupt()
    return code


def interrupted() -> int:
    """Say 'interrupted' in one line; the exit status of a ctrl+c."""
    try:
        print("cockpit: interrupted", file=sys.stderr)
    except (KeyboardInterrupt, OSError):  # a second ctrl+c, or stderr gone: nothing more to say
        pass
    return INTERRUPTED


def forget_unhandled_interrupt() -> None:
    """A ctrl+c that struck source text run by `exec` (a dataclass's generated methods, torch's
    own at import) leaves CPython's "unhandled KeyboardInterrupt" flag set even though the
    interrupt was handled here: under `python -m cockpit` the process would then kill itself
    with SIGINT at exit instead of exiting 130 (about one time in three with ctrl+c during
    torch's import). Running any source text through the same API clears the flag."""
    try:
        import ctypes

        ctypes.pythonapi.PyRun_SimpleString(b"")
    except (ImportError, AttributeError, OSError):  # not CPython: it has no such flag
        pass


def __getattr__(name: str) -> object:
    for module, names in _EXPORTS.items():
        if name in names:
            return getattr(importlib.import_module(module), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""The terminal the commands run in: can the app be drawn here (one rule for `cockpit`, `cockpit
attach`, `cockpit start`, `compare` and `ablate`), can the terminal show the app's glyphs, and
leaving quietly once it is gone (an SSH link dropped)."""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# What the app draws that ASCII has not: the braille of the charts and the rounded borders.
GLYPHS = "⣿╭"
GOOD_TERM = "xterm-256color"
TERMINAL_POLL_S = 1.0  # how often the controlling terminal is looked for (watch_the_terminal)


@dataclass(frozen=True)
class NoApp:
    """Why the app cannot be drawn here (`reason`, a phrase) and what would let it (`fix`)."""

    reason: str
    fix: str


def no_app_reason(
    stdout_is_tty: bool, stdin_is_tty: bool, environ: Mapping[str, str]
) -> NoApp | None:
    """None when the app can be drawn and driven here, else why not.

    Textual's own driver (`TEXTUAL_DRIVER`, textual-serve's web page) needs no terminal. A dumb
    terminal (an editor's shell, `TERM=dumb`) is a terminal, but the app would draw its escape
    sequences as text on it."""
    if environ.get("TEXTUAL_DRIVER"):
        return None
    if not stdout_is_tty:
        return NoApp("no terminal", "run it in a terminal")
    if environ.get("TERM", "") == "dumb":
        return NoApp("a dumb terminal (TERM=dumb)", f"run it with TERM={GOOD_TERM}")
    if not stdin_is_tty:  # the app would wait for keys that can never come
        return NoApp(
            "input is not a terminal (no key could reach the app)", "run it from a terminal"
        )
    return None


def headless_line(why: NoApp) -> str:
    """Why a run that was not asked to be headless is, in one line, with how to get the app."""
    return f"{why.reason}, running headless (pass --headless to say so; for the app: {why.fix})"


def no_app_here() -> NoApp | None:
    """`no_app_reason` for this process's standard streams and environment."""
    return no_app_reason(sys.stdout.isatty(), sys.stdin.isatty(), os.environ)


def glyph_problem(encoding: str | None, tmux_client_utf8: str | None) -> str | None:
    """One line (ASCII, so that it reads where the glyphs do not) when the terminal cannot show
    the app's braille and borders, else None.

    `encoding` is the one the app's output is written in; `tmux_client_utf8` is tmux's
    `#{client_utf8}` when running inside tmux (None outside). tmux decides from its client's
    locale: started under a POSIX locale (an SSH login without LANG) it draws them as `_` and
    `q`, however well the app encodes them."""
    if tmux_client_utf8 == "0":
        return (
            "tmux draws the charts and borders as _ and q here: its client was started without "
            "a UTF-8 locale; reattach with `tmux -u attach`, or set LANG=C.UTF-8 before tmux starts"
        )
    try:
        GLYPHS.encode(encoding or "ascii")
    except (UnicodeEncodeError, LookupError):
        return (
            f"the locale's encoding ({encoding}) cannot show the charts and borders; "
            "run it with LANG=C.UTF-8"
        )
    return None


def tmux_client_utf8(environ: Mapping[str, str] = os.environ) -> str | None:
    """tmux's `#{client_utf8}` ("1" or "0") when this process runs inside tmux, else None."""
    tmux = shutil.which("tmux")
    if not environ.get("TMUX") or tmux is None:
        return None
    try:
        answer = subprocess.run(
            [tmux, "display-message", "-p", "#{client_utf8}"],
            capture_output=True, text=True, timeout=2, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None  # no answer: nothing to warn about
    return answer.stdout.strip() if answer.returncode == 0 else None


def glyph_problem_here() -> str | None:
    """`glyph_problem` for the stream the app draws on (Textual writes to stderr); None where
    Textual's own driver draws elsewhere (textual-serve's web page)."""
    if os.environ.get("TEXTUAL_DRIVER"):
        return None
    stream = sys.__stderr__
    encoding = getattr(stream, "encoding", None) if stream is not None else None
    return glyph_problem(encoding, tmux_client_utf8())


def warn_in_app(app: Any, warning: str | None) -> None:
    """Show `warning` once, as a toast of the app when it starts (a line printed before would be
    hidden behind the app's screen)."""
    if warning:
        app.call_later(app.notify, warning, severity="warning", timeout=20, markup=False)


def say_or_leave_quietly(text: str) -> bool:
    """Print `text`; False when the terminal is gone (EIO after the SSH link dropped, a closed
    pipe). Then nothing more is written to it: stdout and stderr go to /dev/null, so that no
    traceback or failed flush at exit turns a quiet leave into an error status."""
    try:
        print(text, flush=True)
        return True
    except OSError:
        forget_terminal()
        return False


def forget_terminal() -> None:
    """Point stdout and stderr at /dev/null: the terminal behind them is gone."""
    null = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        try:
            os.dup2(null, stream.fileno())
        except (OSError, ValueError, AttributeError):  # not a real file: nothing to redirect
            pass
    os.close(null)


def watch_the_terminal(poll_s: float = TERMINAL_POLL_S) -> None:
    """Raise SIGHUP in this process once its controlling terminal is gone, if it has one.

    A hang-up signals the session's leader only. When that is a shell that catches it (a
    wrapper's `trap`), no SIGHUP reaches the app, whose input then reads end-of-file in a loop
    at full CPU, forever. The app and the viewer leave on SIGHUP (a checkpoint, a detach), so
    the same signal makes them leave here too; a second one after the kernel's is harmless."""
    if not hasattr(signal, "SIGHUP") or not _has_controlling_terminal():
        return  # nothing to watch (Textual's web driver, a batch job), or no hang-ups here
    threading.Thread(
        target=_hang_up_when_gone, args=(poll_s,), daemon=True, name="terminal-watch"
    ).start()


def _has_controlling_terminal() -> bool:
    try:
        os.close(os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY))
    except OSError as e:  # ENXIO: none (or it hung up); anything else (EMFILE...): not known
        return e.errno not in (errno.ENXIO, errno.EIO)
    return True


def _hang_up_when_gone(poll_s: float) -> None:
    while _has_controlling_terminal():
        time.sleep(poll_s)
    os.kill(os.getpid(), signal.SIGHUP)

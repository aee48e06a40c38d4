"""`cockpit attach [RUN_DIR]`: open the cockpit on a live run in another process.

The app is the same as for a run of its own; its engine is a `RemoteEngine`
on the run's control socket, so every panel and key works as in-process. Leaving asks: detach
(the run goes on), stop the run, or cancel. A dropped terminal (SIGHUP, an SSH link gone)
detaches: it never stops the run, and the viewer leaves quietly with status 0.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from cockpit.cli.options import add_notify_options, notify_settings
from cockpit.cli.terminal import (
    NoApp,
    forget_terminal,
    glyph_problem_here,
    no_app_here,
    say_or_leave_quietly,
    warn_in_app,
    watch_the_terminal,
)

NAME = "attach"
HELP = "open the cockpit on a live run (started with `cockpit start`, in another terminal, or a batch job)"
EPILOG = (
    "Without RUN_DIR: the newest live run under runs/ (a list to choose from when there are "
    "several). `cockpit ps` lists the live runs."
)
DEFAULT_ROOT = "runs"
LEAVE_GRACE_S = 3.0  # after SIGHUP/SIGTERM: the process ends this long after, whatever the UI does


class AttachError(Exception):
    """A one-line reason why there is nothing to attach to; exit status 2."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.add_argument(
        "run_dir", nargs="?", metavar="RUN_DIR", help="the run's directory (default: the newest live run under runs/)"
    )
    parser.add_argument(
        "--read-only", action="store_true", help="watch only: this viewer's keys cannot change the run"
    )
    parser.add_argument(
        "--runs", default=DEFAULT_ROOT, metavar="DIR", help="where to look for live runs without RUN_DIR (default: runs)"
    )
    parser.add_argument(
        "--no-mouse", action="store_true", help="turn off mouse tracking (saves bandwidth over slow SSH links)"
    )
    add_notify_options(parser)


def run(args: argparse.Namespace) -> int:
    try:
        run_dir = Path(args.run_dir) if args.run_dir else choose_live_run(Path(args.runs))
        return attach(
            run_dir,
            read_only=args.read_only,
            mouse=not args.no_mouse,
            notify=notify_settings(args),
            runs_root=args.runs,
        )
    except AttachError as e:
        print(f"cockpit attach: {e}", file=sys.stderr)
        return 2


def attach(
    run_dir: Path,
    *,
    read_only: bool = False,
    mouse: bool = True,
    notify: Any = None,
    runs_root: str = DEFAULT_ROOT,
) -> int:
    """Open the app on the live run in `run_dir` until the user leaves; print where the run is."""
    from engine.control import EngineUnreachable, RemoteEngine

    if not run_dir.is_dir():
        raise AttachError(f"{run_dir}: no such run directory; `cockpit ps` lists the live runs")
    try:
        engine = RemoteEngine(run_dir, read_only=read_only)
    except EngineUnreachable as e:
        raise AttachError(str(e)) from None
    why = no_app_here()
    if why is not None:
        engine.close()
        raise AttachError(no_app_line(why))
    from cockpit.app.cockpit_app import run_in_terminal
    from cockpit.app.session_runs import format_exit_report

    app = attached_app(engine, notify, runs_root)
    hung_up = _detach_on_signals(app)
    watch_the_terminal()
    warn_in_app(app, glyph_problem_here())
    run_in_terminal(app, mouse=mouse)
    if hung_up.is_set():  # the terminal is gone: where the run is can no longer be said
        forget_terminal()
        return 0
    say_or_leave_quietly(format_exit_report(app.exit_summary(), forced=app.quit_forced))
    return 0


def no_app_line(why: NoApp) -> str:
    """Why this viewer cannot open here, and the fix, in one line."""
    return f"{why.reason}: cannot open the app here; {why.fix} (`cockpit ps` lists live runs in plain text)"


def attached_app(
    engine: Any, notify: Any = None, runs_root: str = DEFAULT_ROOT, away_min_s: float | None = None
) -> Any:
    """The cockpit app as a viewer of `engine` (a connected RemoteEngine); its runs screen (h)
    lists `runs_root`. A viewer starts no run: resume, new run and fork say so. A user back
    after `away_min_s` (default AWAY_MIN_S) since they last detached from this run gets the
    digest of what it did meanwhile over the live screen."""
    from cockpit.app.cockpit_app import CockpitApp
    from engine.rundir import AWAY_MIN_S

    preset = engine.summary.get("preset") or os.path.basename(os.path.normpath(engine.run_dir))
    app = CockpitApp(lambda _preset: engine, preset, notify=notify, runs_root=runs_root)
    gap = AWAY_MIN_S if away_min_s is None else away_min_s
    app.opening.away_min_s = gap  # a live run opened from its runs screen (h): the same gap
    app.call_later(_offer_digest, app, Path(engine.run_dir), gap)
    return app


def _offer_digest(app: Any, run_dir: Path, min_gap_s: float) -> None:
    """Read the run's records off the UI thread; show the digest when this user was away long
    enough and the run did something meanwhile."""
    from cockpit.screens.away_dialog import AwayScreen, away_lines

    now = time.time()  # when this viewer attached: the gap ends here

    def read() -> None:
        lines = away_lines(run_dir, min_gap_s, now)
        if lines:
            try:
                app.call_from_thread(app.push_screen, AwayScreen(lines))
            except RuntimeError:  # the app closed meanwhile: no one to tell
                pass

    app.run_worker(read, thread=True, exit_on_error=False, name="away-digest")


def _detach_on_signals(app: Any) -> threading.Event:
    """SIGHUP (the SSH link dropped) and SIGTERM detach: the viewer leaves, the run goes on.
    With no terminal left, restoring it can block: the process ends after a grace period.
    The event returned is set once SIGHUP came (the terminal is gone)."""
    hung_up = threading.Event()

    def leave(signum: int, _frame: Any) -> None:
        if signum == getattr(signal, "SIGHUP", None):
            hung_up.set()
        app.call_later(app.detach)
        threading.Thread(target=_exit_later, args=(LEAVE_GRACE_S,), daemon=True).start()

    for name in ("SIGHUP", "SIGTERM"):
        sig = getattr(signal, name, None)
        if sig is not None:
            signal.signal(sig, leave)
    return hung_up


def _exit_later(grace_s: float) -> None:
    time.sleep(grace_s)
    os._exit(0)  # the run is not ours: nothing is lost by leaving


def choose_live_run(root: Path) -> Path:
    """The newest live run under `root`; with several, the user picks one (on a terminal)."""
    from engine.control import find_live_runs

    if not root.is_dir():
        raise AttachError(
            f"no {root}/ here to look for live runs; name one: cockpit attach RUN_DIR"
        )
    refused: list[str] = []  # sockets served by another uid: never attached to, but said
    runs = find_live_runs(root, refused=refused)
    for line in refused:
        print(f"cockpit attach: {line}", file=sys.stderr)
    if not runs:
        raise AttachError(
            f"no live run under {root}/; start one with `cockpit start`, or name one: "
            "cockpit attach RUN_DIR"
        )
    if len(runs) == 1:
        return runs[0].run_dir
    if not sys.stdin.isatty():
        names = ", ".join(str(r.run_dir) for r in runs)
        raise AttachError(f"{len(runs)} live runs ({names}); name one: cockpit attach RUN_DIR")
    for i, live in enumerate(runs, 1):
        step = f"step {live.step}" + (f"/{live.max_steps}" if live.max_steps else "")
        print(f"  {i}. {live.run_dir}  {live.preset or '?'}  {live.state}  {step}", file=sys.stderr)
    while True:
        try:
            answer = input(f"attach to which run? [1-{len(runs)}, enter: 1] ").strip()
        except (EOFError, KeyboardInterrupt):
            print(file=sys.stderr)
            raise AttachError("no run chosen") from None
        if not answer:
            return runs[0].run_dir
        if answer.isdigit() and 1 <= int(answer) <= len(runs):
            return runs[int(answer) - 1].run_dir
        print(f"  type a number from 1 to {len(runs)}", file=sys.stderr)

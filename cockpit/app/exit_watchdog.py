"""The process ends after a forced quit even if the training thread never returns.

The engine's thread worker runs in asyncio's default executor, which `App.run()` joins on the
way out: an engine stuck in one long call would keep the process alive after the UI closed.
Once the UI has shut down (terminal restored), the engine gets a grace period; then the exit
report is printed and the process leaves with os._exit. Only a forced quit arms this: a quit
that waits for its checkpoint never does.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

EXIT_GRACE_S = 5.0  # after a forced exit, how long the engine thread gets before os._exit
UI_CLOSE_WAIT_S = 30.0  # at most this long for the UI to close before the grace period starts


def start_exit_watchdog(
    engine: threading.Thread,
    ui_running: Callable[[], bool],
    report: Callable[[], str],
    grace_s: float = EXIT_GRACE_S,
    exit_process: Callable[[int], object] = os._exit,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> threading.Thread:
    """Watch, on a daemon thread, for the UI to close, then give `engine` `grace_s` seconds;
    if it is still alive, print `report()` (the exit report) and end the process with 1."""
    out = out or sys.__stdout__
    err = err or sys.__stderr__

    def watch() -> None:
        deadline = time.monotonic() + UI_CLOSE_WAIT_S
        while ui_running() and time.monotonic() < deadline:
            time.sleep(0.1)
        engine.join(grace_s)
        if engine.is_alive():
            if err is not None:
                err.write("cockpit: quit without waiting for the training thread; exiting without it\n")
                err.flush()
            if out is not None:
                out.write(report() + "\n")
                out.flush()
            exit_process(1)

    watcher = threading.Thread(target=watch, name="cockpit-exit-watchdog", daemon=True)
    watcher.start()
    return watcher

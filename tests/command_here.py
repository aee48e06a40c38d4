"""`cockpit ARGS` run in the test's own process, for tests whose point is what the command does
and says, not a new interpreter: one that imports torch costs 2-3 s on a 2-core machine. The
tests of signals, terminals and exits of a real process keep starting one."""

from __future__ import annotations

import io
import logging
import os
import signal
import subprocess
import sys
import threading
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pytest

# the signals the commands take over (the app, attach, data prepare, a headless run)
SIGNALS = [
    getattr(signal, name)
    for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGTSTP")
    if hasattr(signal, name)
]


@contextmanager
def process_state_kept() -> Iterator[None]:
    """The process-wide state a command may change put back as it was: signal handlers, umask,
    excepthooks, warning filters and the root logger (a later test must not inherit them)."""
    handlers = {sig: signal.getsignal(sig) for sig in SIGNALS}
    umask = os.umask(0o077)
    os.umask(umask)
    hooks = sys.excepthook, threading.excepthook
    root = logging.getLogger()
    root_handlers, root_level = list(root.handlers), root.level
    try:
        with warnings.catch_warnings():
            yield
    finally:
        for sig, handler in handlers.items():
            if handler is not None:  # None: set outside Python, which cannot be put back
                signal.signal(sig, handler)
        os.umask(umask)
        sys.excepthook, threading.excepthook = hooks
        root.handlers[:] = root_handlers
        root.setLevel(root_level)


def cockpit_here(
    *argv: str, stdin: str = "", env: Mapping[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """What `subprocess.run([sys.executable, "-m", "cockpit", *argv], input=stdin, env=env,
    cwd=cwd, capture_output=True, text=True)` would give (`env`, as there, is the whole
    environment), from `cockpit.cli.main` called here with its streams captured."""
    import torch

    from cockpit.cli import main

    out, err = io.StringIO(), io.StringIO()
    threads = torch.get_num_threads()  # --threads and a run's auto setting change this process's
    with process_state_kept(), pytest.MonkeyPatch.context() as patch:
        if env is not None:
            for name in set(os.environ) - set(env):
                patch.delenv(name)
            for name, value in env.items():
                patch.setenv(name, value)
        if cwd is not None:
            patch.chdir(cwd)
        patch.setattr(sys, "stdin", io.StringIO(stdin))
        patch.setattr(sys, "stdout", out)
        patch.setattr(sys, "stderr", err)
        try:
            code = main(list(argv))
        except SystemExit as exit_:  # argparse's usage errors and --help
            code = exit_.code if isinstance(exit_.code, int) else int(exit_.code is not None)
        finally:
            torch.set_num_threads(threads)
    return subprocess.CompletedProcess(["cockpit", *argv], code, out.getvalue(), err.getvalue())

"""`python -m MODULE ...` in a terminal (a tmux pane), started warm: this small script runs in
the pane and has the test process's warm server (tests/warm_process.py) fork the real process,
which takes the pane's terminal as its own controlling terminal. It is the process on the
terminal, as if the shell had started it: its keys, screen, size changes (SIGWINCH) and the
hang-up when the terminal goes (SIGHUP) are its own; it skips importing torch again (2-3 s of
CPU each time on a 2-core machine).

`pane_command(argv)` is the shell command for a pane; this script waits for the process and
exits with its status, so a command after it in the pane (`; echo $?`) reads it as before.
"""

from __future__ import annotations

import shlex
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve()

# In the forked process: the pane's terminal becomes its controlling terminal (taken from the
# pane's shell, whose session had it: the right of root, CAP_SYS_ADMIN; elsewhere it stays the
# shell's, and this script passes the terminal's signals on), then the module runs as __main__.
TAKE_THE_TERMINAL = """
import fcntl, os, runpy, sys, termios
try:
    fcntl.ioctl(0, termios.TIOCSCTTY, 1)
except OSError:
    pass
sys.argv = sys.argv[2:]  # ["-c", "-m", MODULE, ...] as the server passes them
sys.path[0] = os.getcwd()
runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
"""


def pane_command(argv: Sequence[str]) -> str:
    """The shell command that runs `python ARGV` (`-m MODULE ...`) warm in a pane of a terminal
    started by this test process: it names this process's warm server."""
    import warm_process

    if len(argv) < 2 or argv[0] != "-m":
        raise ValueError(f"a warm pane runs -m MODULE ..., not {list(argv)}")
    env = warm_process.sharing_env({})
    words = [f"{name}={value}" for name, value in env.items()]
    return shlex.join(["env", *words, sys.executable, str(HERE), *argv])


def main(argv: list[str]) -> int:
    import warm_process

    child = warm_process.Popen(
        [sys.executable, "-c", TAKE_THE_TERMINAL, *argv[1:]], start_new_session=True
    )

    # Where the process could not take the terminal, it is still this script's (and the
    # shell's): what the terminal sends here goes on to it. Where it did, none comes here but a
    # hang-up by hand; this script stays to report the status either way.
    warm_process.pass_signals_on(
        child.pid, (signal.SIGHUP, signal.SIGWINCH, signal.SIGTERM, signal.SIGINT)
    )
    code = child.wait()
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main(sys.argv))

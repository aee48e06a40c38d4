"""One engine per run directory: an exclusive flock on RUN_DIR/.run.lock for the run's life.

The kernel drops the lock with the process, so it never lies after a crash (a pid file would);
the file says who holds it, for the one-line refusal of a second engine.
"""

from __future__ import annotations

import fcntl
import os
import socket
import sys
import time
from collections.abc import Iterable
from pathlib import Path

from engine.config.run_config import ConfigError
from engine.files import PRIVATE_MODE, open_kept_file

LOCK_NAME = ".run.lock"


class RunLock:
    """An exclusive lock on RUN_DIR/.run.lock for the run's life; the file says who holds it."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock, or raise a ConfigError naming the engine that holds it."""
        # never through a planted link or hard link: the file is truncated below
        fd = open_kept_file(self.path, os.O_RDWR, PRIVATE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 4096).decode("utf-8", "replace").strip().splitlines()
            os.close(fd)
            raise ConfigError(in_use_message(self.path.parent, holder)) from None
        os.ftruncate(fd, 0)
        since = time.strftime("%Y-%m-%d %H:%M:%S")
        info = f"pid {os.getpid()}\nhost {socket.gethostname()}\nsince {since}\n"
        os.write(fd, (info + "command " + " ".join(sys.argv) + "\n").encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock; the file stays (its content is stale)
            self._fd = None


def in_use_message(run_dir: Path, holder: Iterable[str]) -> str:
    return (
        f"run directory {run_dir} is in use by another engine ({describe_holder(holder)}); "
        "let it finish or stop it first, or pass --run-dir DIR for a new run"
    )


def check_not_in_use(run_dir: Path) -> None:
    """Refuse (ConfigError, one line) a run directory whose lock a live engine holds, without
    taking the lock or touching the file: the CLI asks before anything starts."""
    try:
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # never a FIFO's wait
        fd = os.open(run_dir / LOCK_NAME, flags)
    except OSError:
        return  # no lock file: no engine ever ran here, or it cannot be read (the run will say)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 4096).decode("utf-8", "replace").strip().splitlines()
        raise ConfigError(in_use_message(run_dir, holder)) from None
    finally:
        os.close(fd)


def describe_holder(lines: Iterable[str]) -> str:
    """'pid N on HOST since T: COMMAND' from a lock file's lines (what is there of it)."""
    fields = dict(line.split(" ", 1) for line in lines if " " in line)
    text = f"pid {fields.get('pid', '?')}"
    if "host" in fields:
        text += f" on {fields['host']}"
    if "since" in fields:
        text += f" since {fields['since']}"
    if fields.get("command"):
        text += f": {fields['command']}"
    return text

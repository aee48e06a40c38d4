"""Atomic file writes, shared by checkpoints and prepared data (torch-free).

A file is written under a temporary name beside its destination, fsynced, then renamed over
it: a crash at any moment leaves either the old file or the new one, never a partial one. The
temporary name is `.NAME.XXXX.tmp` (a run's leftovers, `.ckpt-*.tmp`, are cleared by
`engine.checkpoint.remove_partial_saves` when the run directory is next used).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


def fsync_dir(directory: Path) -> None:
    """Make a rename or a new link in `directory` durable (where the platform allows it)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return  # not supported on this platform
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """Create or replace `path` with what `write(file)` writes, atomically and durably. The
    directory must exist (a run directory removed under a running run is an error, not remade)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; these are ordinary files
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)

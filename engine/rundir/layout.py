"""The run directory: its default name, its creation (refused clearly when not writable) and the
error log a crash leaves in it."""

from __future__ import annotations

import contextlib
import os
import stat
import time
import traceback
from pathlib import Path

from engine.config.run_config import ConfigError, RunConfig
from engine.files import DIR_MODE, atomic_file, atomic_write_text


def default_run_dir(cfg: RunConfig, root: str | Path = "runs") -> Path:
    """A new run's directory under `root` (the app's runs root: `cockpit ablate --runs DIR`'s
    DIR), named by the run's config and the time."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path(root) / f"{cfg.name}-{stamp}"


def create_run_dir(run_dir: Path) -> None:
    """Create `run_dir` (0755, narrowed by the umask) and prove it writable, or raise a
    ConfigError naming the fix; refuse one other users can write in (they could plant links
    to files of ours where the run writes)."""
    try:
        run_dir.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        problem = others_can_write_message(run_dir)
        if problem:
            raise ConfigError(problem)
        # a fresh name: a `.write-test` someone left (or linked elsewhere) is not written
        with atomic_file(run_dir / ".write-test") as probe:
            probe.write(b"ok")
        (run_dir / ".write-test").unlink()
    except OSError as e:
        raise ConfigError(
            f"run directory {run_dir} is not writable ({e.strerror}); pass --run-dir DIR"
        ) from None


def others_can_write_message(directory: Path) -> str | None:
    """One line when users other than us can write in `directory`: world-writable, unless it
    is sticky and ours (then no one else can remove or replace what the run writes there)."""
    info = directory.stat()
    if not info.st_mode & stat.S_IWOTH:
        return None
    mode = f"mode {stat.S_IMODE(info.st_mode):04o}"
    if info.st_mode & stat.S_ISVTX:
        if info.st_uid == os.geteuid():
            return None
        return (
            f"run directory {directory} can be written by other users ({mode}, and it is "
            f"uid {info.st_uid}'s, not yours); pass --run-dir DIR of your own"
        )
    return (
        f"run directory {directory} can be written by other users ({mode}); "
        f"chmod o-w {directory}, or pass --run-dir DIR of your own"
    )


def write_error_log(run_dir: Path | None) -> Path | None:
    """Write the exception being handled to run_dir/error.log; None when there is nowhere to."""
    if run_dir is None or not run_dir.is_dir():
        return None
    path = run_dir / "error.log"
    with contextlib.suppress(OSError):
        atomic_write_text(path, traceback.format_exc())  # a link there is replaced, not followed
        return path
    return None

"""The run directory: its default name, its creation (refused clearly when not writable) and the
error log a crash leaves in it."""

from __future__ import annotations

import contextlib
import time
import traceback
from pathlib import Path

from engine.config import ConfigError, RunConfig


def default_run_dir(cfg: RunConfig) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{cfg.name}-{stamp}"


def create_run_dir(run_dir: Path) -> None:
    """Create `run_dir` and prove it writable, or raise a ConfigError naming the fix."""
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe = run_dir / ".write-test"
        probe.write_text("ok")
        probe.unlink()
    except OSError as e:
        raise ConfigError(
            f"run directory {run_dir} is not writable ({e.strerror}); pass --run-dir DIR"
        ) from None


def write_error_log(run_dir: Path | None) -> Path | None:
    """Write the exception being handled to run_dir/error.log; None when there is nowhere to."""
    if run_dir is None or not run_dir.is_dir():
        return None
    path = run_dir / "error.log"
    with contextlib.suppress(OSError):
        path.write_text(traceback.format_exc())
        return path
    return None

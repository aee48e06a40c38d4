"""Real runs made cheaply for tests that only need one to read: trained in the test process
(no new interpreter importing torch), and copied where a test may change it, as if it had been
trained there (cheaper than training again)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from pathlib import Path

import pytest

# the run's own files that name its directory (its records and summary hold absolute paths)
TEXT_FILES = {"metrics.jsonl", "summary.json", "config.toml", "config.json", ".run.lock"}


def copy_run(trained: Path, target: Path) -> Path:
    """`trained` copied to `target` (which must not exist): the files that name the run's
    directory name `target` instead and files hard-linked together stay linked."""
    target.mkdir(parents=True)
    linked: dict[tuple[int, int], Path] = {}
    for source in sorted(trained.iterdir()):
        if source.is_dir():
            shutil.copytree(source, target / source.name)
            continue
        copy = target / source.name
        if source.name in TEXT_FILES:
            text = source.read_text(encoding="utf-8")
            copy.write_text(text.replace(str(trained), str(target)), encoding="utf-8")
            shutil.copystat(source, copy)
            continue
        stat = source.stat()
        inode = (stat.st_dev, stat.st_ino)
        if inode in linked:
            os.link(linked[inode], copy)  # e.g. best.pt and the checkpoint it is
        else:
            shutil.copy2(source, copy)
            linked[inode] = copy
    return target


def train_here(
    run_dir: Path,
    sets: Iterable[str],
    env: dict[str, str],
    preset: str = "tiny",
    telemetry: bool = False,
    cwd: Path | None = None,
) -> Path:
    """A headless run of `preset` with these `--set`s to its end, in this process: what
    `cockpit train --headless --no-telemetry` (or, `telemetry`, without --no-telemetry) run
    in `cwd` would leave in `run_dir` (relative to `cwd`, as a user may give it). `env` is the
    tests' environment (conftest's `isolated_env`), which module-scoped fixtures do not have."""
    from engine.config.presets import load_preset
    from engine.train.trainer import Trainer

    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        if cwd is not None:
            patch.chdir(cwd)
        trainer = Trainer(load_preset(preset, list(sets)), run_dir=run_dir, telemetry=telemetry,
                          interactive=False)  # fmt: skip
        state = trainer.run()
    alerts = [e.message for e in trainer.drain_events() if e.kind == "alert"]
    assert state == "finished", alerts
    return run_dir
